/* fuzz-http-router.c: libFuzzer target for the router
 * (http/weft-http-router.c): pattern parsing, path matching with {param}
 * capture, percent-decoding and query parsing. Built by tests/fuzz/run;
 * tests/test-fuzz-replay.c replays the corpus and regressions through it.
 *
 * The first byte picks what is fuzzed:
 *   0: weft_http_router_match() on a fixed route table (the second byte
 *      picks the method, the rest up to a NUL is the path, what follows it
 *      a query string), checked against a model written here: the result,
 *      the route, every {param} value and the Allow list must agree;
 *   1: the input as a pattern for weft_http_router_add(): accepted exactly
 *      when the model accepts it, and then a path built from the pattern
 *      matches it, with the params it was built with;
 *   2: weft_http_percent_decode() and weft_http_query_parse() on the raw
 *      bytes: the model's answer, and never more output than input.
 *
 * The model splits the path into all its segments first, where the
 * router walks it; the two must agree on everything, the order in which a
 * malformed escape is found included (it is a 400 only if a route's
 * literal segment has to be compared with it).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "weft-http-router.h"

#define N_ROUTES G_N_ELEMENTS (table)

typedef struct {
  const char *method; /* NULL: any */
  const char *pattern;
} RouteDef;

/* Exact, {param} and prefix routes, a method-less one, an asterisk one,
 * routes that shadow others (a literal one shadowed by a {param} one
 * too), and literal segments that need decoding. */
static const RouteDef table[] = {
  { "GET", "/" },
  { "GET", "/users/{id}" },
  { "POST", "/users/{id}" },
  { "DELETE", "/users/{id}/posts/{post}" },
  { NULL, "/any/{x}/tail" },
  { "GET", "/static/*" },
  { "PUT", "/files*" },
  { "GET", "/caf\xc3\xa9/{n}" },
  { "OPTIONS", "*" },
  { "GET", "/a/b/c" },
  { "HEAD", "/only-head" },
  { "PATCH", "/x/{a}/y/{b}/*" },
  { "GET", "/x/{a}/y/{b}/z" },
  { "GET", "/dup/{a}" },
  { "POST", "/dup/{b}" },
  { "GET", "/deep/{a}/{b}/{c}/{d}" },
  { "GET", "/pre/fix*" },
  { NULL, "/empty//seg" },
  { "GET", "/sp ace/+plus" },
  /* Literal routes behind others on the same path (the router's index of
   * literal patterns merges them with the other routes in order). */
  { "POST", "/a/b/c" },
  { "PUT", "/users/me" },
  { "DELETE", "/" },
  { "GET", "/users/me" },
};

static const char *const methods[] = { "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS",
                                       "PATCH", "TRACE", "CONNECT", "BREW", "" };

/* ---- the model ------------------------------------------------------------ */

/* A model route: the pattern taken apart independently of the router. */
typedef struct {
  const char *method;
  gboolean asterisk;
  gboolean prefix;
  GPtrArray *segs;    /* char *: a literal, or a param's name */
  GArray *is_param;   /* gboolean per segment */
  char *tail;         /* prefix routes: raw text the rest must start with */
  guint n_params;
} Model;

static int
hex (char c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* The model decoder: NULL for an escape without two hex digits, or %00. */
static GString *
model_decode (const char *s, gsize len, gboolean plus)
{
  GString *out = g_string_new (NULL);
  gsize i = 0;
  while (i < len)
    {
      if (s[i] == '%')
        {
          if (len - i < 3 || hex (s[i + 1]) < 0 || hex (s[i + 2]) < 0 ||
              hex (s[i + 1]) * 16 + hex (s[i + 2]) == 0)
            {
              g_string_free (out, TRUE);
              return NULL;
            }
          g_string_append_c (out, (char) (hex (s[i + 1]) * 16 + hex (s[i + 2])));
          i += 3;
        }
      else
        {
          g_string_append_c (out, plus && s[i] == '+' ? ' ' : s[i]);
          i++;
        }
    }
  return out;
}

static gboolean
has_any (const char *s, const char *chars)
{
  return strpbrk (s, chars) != NULL;
}

/* "a/b" -> {"a", "b"}; "" -> {""} (g_strsplit would give no element). */
static char **
split_segments (const char *s)
{
  if (s[0] == '\0')
    {
      char **v = g_new0 (char *, 2);
      v[0] = g_strdup ("");
      return v;
    }
  return g_strsplit (s, "/", -1);
}

static void
model_free (Model *m)
{
  if (m->segs != NULL)
    g_ptr_array_unref (m->segs);
  if (m->is_param != NULL)
    g_array_unref (m->is_param);
  g_free (m->tail);
}

/* The rules of weft_http_router_add(), written from its documentation:
 * "*" alone, or '/'-separated segments, each literal or a whole {name},
 * no '{', '}' or '*' elsewhere, names unique and not empty, at most
 * WEFT_HTTP_MAX_PARAMS of them, and an optional final '*' after which the
 * text behind the last '/' is a raw prefix. */
static gboolean
model_parse (const char *method, const char *pattern, Model *m)
{
  memset (m, 0, sizeof *m);
  m->method = method;
  if (strcmp (pattern, "*") == 0)
    {
      m->asterisk = TRUE;
      return TRUE;
    }
  if (pattern[0] != '/')
    return FALSE;
  gsize n = strlen (pattern);
  m->prefix = pattern[n - 1] == '*';
  char *body = g_strndup (pattern, m->prefix ? n - 1 : n);
  if (m->prefix)
    {
      char *slash = strrchr (body, '/');
      m->tail = g_strdup (slash + 1);
      *slash = '\0'; /* the segments end before the last '/' */
      if (has_any (m->tail, "{}*"))
        {
          g_free (body);
          return FALSE;
        }
    }
  m->segs = g_ptr_array_new_with_free_func (g_free);
  m->is_param = g_array_new (FALSE, FALSE, sizeof (gboolean));
  gboolean ok = TRUE;
  if (body[0] != '\0')
    {
      char **parts = split_segments (body + 1);
      for (char **p = parts; *p != NULL; p++)
        {
          gsize len = strlen (*p);
          gboolean param = len >= 2 && (*p)[0] == '{' && (*p)[len - 1] == '}';
          char *text = param ? g_strndup (*p + 1, len - 2) : g_strdup (*p);
          if (has_any (text, "{}*") || (param && text[0] == '\0'))
            ok = FALSE;
          for (guint i = 0; param && i < m->segs->len; i++)
            if (g_array_index (m->is_param, gboolean, i) &&
                strcmp (m->segs->pdata[i], text) == 0)
              ok = FALSE;
          m->n_params += param;
          g_ptr_array_add (m->segs, text);
          g_array_append_val (m->is_param, param);
        }
      g_strfreev (parts);
    }
  g_free (body);
  return ok && m->n_params <= WEFT_HTTP_MAX_PARAMS;
}

/* 1: @path's segments match, -1: a literal segment could not be decoded,
 * 0: no match. @raw gets the path's segments. */
static int
model_path_matches (const Model *m, char **raw)
{
  guint n_raw = g_strv_length (raw);
  guint n = m->segs->len;
  for (guint i = 0; i < n; i++)
    {
      if (i >= n_raw)
        return 0;
      const char *seg = raw[i];
      if (g_array_index (m->is_param, gboolean, i))
        {
          if (seg[0] == '\0')
            return 0;
          continue;
        }
      const char *lit = m->segs->pdata[i];
      if (strchr (seg, '%') == NULL)
        {
          if (strcmp (seg, lit) != 0)
            return 0;
          continue;
        }
      GString *dec = model_decode (seg, strlen (seg), FALSE);
      if (dec == NULL)
        return -1;
      gboolean eq = dec->len == strlen (lit) && memcmp (dec->str, lit, dec->len) == 0;
      g_string_free (dec, TRUE);
      if (!eq)
        return 0;
    }
  if (!m->prefix)
    return n_raw == n;
  if (n_raw <= n)
    return 0;
  char *rest = g_strjoinv ("/", raw + n);
  gboolean ok = g_str_has_prefix (rest, m->tail);
  g_free (rest);
  return ok;
}

typedef struct {
  WeftHttpRouteResult result;
  guint route;        /* FOUND */
  GPtrArray *values;  /* FOUND: decoded param values, in pattern order */
  GString *allow;     /* BAD_METHOD */
} Expect;

static void
add_allowed (GString *allow, const char *method)
{
  char **have = g_strsplit (allow->str, ", ", -1);
  gboolean seen = allow->len > 0 && g_strv_contains ((const char *const *) have, method);
  g_strfreev (have);
  if (seen)
    return;
  if (allow->len > 0)
    g_string_append (allow, ", ");
  g_string_append (allow, method);
}

static void
model_match (const Model *models, guint n_models, const char *method, const char *path,
             Expect *ex)
{
  ex->result = WEFT_HTTP_ROUTE_NOT_FOUND;
  ex->values = g_ptr_array_new_with_free_func (g_free);
  ex->allow = g_string_new (NULL);
  /* A path not starting with '/' has no segments a pattern could match. */
  char **raw = path[0] == '/' ? split_segments (path + 1) : g_new0 (char *, 1);
  gboolean path_seen = FALSE;
  guint chosen = G_MAXUINT;
  for (guint i = 0; i < n_models && chosen == G_MAXUINT; i++)
    {
      const Model *m = &models[i];
      int r = m->asterisk ? strcmp (path, "*") == 0
                          : path[0] == '/' ? model_path_matches (m, raw) : 0;
      if (r < 0)
        {
          ex->result = WEFT_HTTP_ROUTE_BAD_PATH;
          g_strfreev (raw);
          return;
        }
      if (r == 0)
        continue;
      path_seen = TRUE;
      if (m->method == NULL || strcmp (m->method, method) == 0 ||
          (strcmp (method, "HEAD") == 0 && strcmp (m->method, "GET") == 0))
        chosen = i;
      else
        {
          add_allowed (ex->allow, m->method);
          if (strcmp (m->method, "GET") == 0)
            add_allowed (ex->allow, "HEAD");
        }
    }
  if (chosen == G_MAXUINT)
    {
      ex->result = path_seen ? WEFT_HTTP_ROUTE_BAD_METHOD : WEFT_HTTP_ROUTE_NOT_FOUND;
      g_strfreev (raw);
      return;
    }
  const Model *m = &models[chosen];
  for (guint i = 0; !m->asterisk && i < m->segs->len; i++)
    {
      if (!g_array_index (m->is_param, gboolean, i))
        continue;
      GString *dec = model_decode (raw[i], strlen (raw[i]), FALSE);
      if (dec == NULL)
        {
          ex->result = WEFT_HTTP_ROUTE_BAD_PATH;
          g_strfreev (raw);
          return;
        }
      g_ptr_array_add (ex->values, g_string_free (dec, FALSE));
    }
  ex->result = WEFT_HTTP_ROUTE_FOUND;
  ex->route = chosen;
  g_strfreev (raw);
}

static void
expect_clear (Expect *ex)
{
  g_ptr_array_unref (ex->values);
  g_string_free (ex->allow, TRUE);
}

/* ---- the targets ---------------------------------------------------------- */

static WeftHttpRouter *router;
static Model models[N_ROUTES];

static void
setup (void)
{
  if (router != NULL)
    return;
  router = weft_http_router_new ();
  for (guint i = 0; i < N_ROUTES; i++)
    {
      /* The handler is the route's index + 1, to find the route again. */
      if (!weft_http_router_add (router, table[i].method, table[i].pattern, 0,
                                 GUINT_TO_POINTER (i + 1), NULL, NULL) ||
          !model_parse (table[i].method, table[i].pattern, &models[i]))
        abort ();
    }
}

/* Decoding never writes more than its input, and agrees with the model. */
static void
check_decode (const char *s, gsize len, gboolean plus)
{
  GString *out = g_string_new ("pre"); /* appends: what is there stays */
  gboolean ok = weft_http_percent_decode (s, len, plus, out);
  if (out->len < 3 || memcmp (out->str, "pre", 3) != 0 || out->len - 3 > len)
    abort ();
  GString *want = model_decode (s, len, plus);
  if (ok != (want != NULL))
    abort ();
  if (ok && (want->len != out->len - 3 || memcmp (want->str, out->str + 3, want->len) != 0))
    abort ();
  if (want != NULL)
    g_string_free (want, TRUE);
  g_string_free (out, TRUE);
}

static void
check_query (const char *query)
{
  GHashTable *got = weft_http_query_parse (query);
  GHashTable *want = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  char **pairs = g_strsplit (query, "&", -1);
  for (char **p = pairs; *p != NULL; p++)
    {
      const char *eq = strchr (*p, '=');
      gsize name_len = eq != NULL ? (gsize) (eq - *p) : strlen (*p);
      if (name_len == 0)
        continue;
      GString *name = model_decode (*p, name_len, TRUE);
      GString *value =
          eq != NULL ? model_decode (eq + 1, strlen (eq + 1), TRUE) : g_string_new (NULL);
      if (name != NULL && value != NULL && !g_hash_table_contains (want, name->str))
        g_hash_table_insert (want, g_strdup (name->str), g_strdup (value->str));
      if (name != NULL)
        g_string_free (name, TRUE);
      if (value != NULL)
        g_string_free (value, TRUE);
    }
  g_strfreev (pairs);
  if (g_hash_table_size (got) != g_hash_table_size (want))
    abort ();
  GHashTableIter it;
  gpointer k, v;
  g_hash_table_iter_init (&it, want);
  while (g_hash_table_iter_next (&it, &k, &v))
    {
      const char *gv = g_hash_table_lookup (got, k);
      if (gv == NULL || strcmp (gv, v) != 0)
        abort ();
    }
  g_hash_table_unref (want);
  g_hash_table_unref (got);
}

static void
fuzz_match (const char *method, const char *path)
{
  const WeftHttpRoute *route = NULL;
  WeftHttpParam *params = NULL;
  guint n_params = 0;
  GString *allow = g_string_new (NULL);
  WeftHttpRouteResult r = weft_http_router_match (router, method, path, &route, &params,
                                                  &n_params, allow);
  Expect ex;
  model_match (models, N_ROUTES, method, path, &ex);
  if (r != ex.result)
    abort ();
  if (r == WEFT_HTTP_ROUTE_FOUND)
    {
      guint i = GPOINTER_TO_UINT (weft_http_route_get_handler (route)) - 1;
      if (i != ex.route || n_params != ex.values->len || n_params != models[i].n_params)
        abort ();
      guint k = 0;
      for (guint s = 0; !models[i].asterisk && s < models[i].segs->len; s++)
        {
          if (!g_array_index (models[i].is_param, gboolean, s))
            continue;
          const char *value = params[k].value;
          const char *want = ex.values->pdata[k];
          /* A value is a whole decoded segment: never empty, no NUL, and
           * never longer than the path it came from. */
          if (strcmp (params[k].name, models[i].segs->pdata[s]) != 0 || strcmp (value, want) != 0 ||
              value[0] == '\0' || strlen (value) > strlen (path))
            abort ();
          k++;
        }
    }
  else if (route != NULL || params != NULL || n_params != 0)
    abort ();
  if (r == WEFT_HTTP_ROUTE_BAD_METHOD && strcmp (allow->str, ex.allow->str) != 0)
    abort ();
  weft_http_params_free (params, n_params);

  /* Without an Allow list (the server's first try) the verdict is the same. */
  WeftHttpRouteResult r2 = weft_http_router_match (router, method, path, &route, &params,
                                                   &n_params, NULL);
  if (r2 != r)
    abort ();
  weft_http_params_free (params, n_params);
  g_string_free (allow, TRUE);
  expect_clear (&ex);
}

/* A pattern: accepted iff the model accepts it; then a path made from it
 * (each {name} as "v<i>", the prefix tail followed by "rest") matches. */
static void
fuzz_pattern (const char *pattern)
{
  WeftHttpRouter *r = weft_http_router_new ();
  gboolean added = weft_http_router_add (r, "GET", pattern, 0, GINT_TO_POINTER (1), NULL, NULL);
  Model m;
  gboolean want = model_parse ("GET", pattern, &m);
  if (added != want)
    abort ();
  /* Literal text with '%' is compared decoded: skip those. */
  if (added && strchr (pattern, '%') == NULL)
    {
      GString *path = g_string_new (NULL);
      if (m.asterisk)
        g_string_append (path, "*");
      for (guint i = 0; !m.asterisk && i < m.segs->len; i++)
        {
          g_string_append_c (path, '/');
          if (g_array_index (m.is_param, gboolean, i))
            g_string_append_printf (path, "v%u", i);
          else
            g_string_append (path, m.segs->pdata[i]);
        }
      if (m.prefix)
        g_string_append_printf (path, "/%srest", m.tail);
      const WeftHttpRoute *route;
      WeftHttpParam *params;
      guint n_params;
      if (weft_http_router_match (r, "GET", path->str, &route, &params, &n_params, NULL) !=
              WEFT_HTTP_ROUTE_FOUND ||
          n_params != m.n_params)
        abort ();
      guint k = 0;
      for (guint i = 0; !m.asterisk && i < m.segs->len; i++)
        {
          if (!g_array_index (m.is_param, gboolean, i))
            continue;
          char v[16];
          g_snprintf (v, sizeof v, "v%u", i);
          if (strcmp (params[k].name, m.segs->pdata[i]) != 0 || strcmp (params[k].value, v) != 0)
            abort ();
          k++;
        }
      weft_http_params_free (params, n_params);
      g_string_free (path, TRUE);
    }
  model_free (&m);
  weft_http_router_free (r);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  setup ();
  if (size < 2)
    return 0;
  const char *buf = (const char *) data + 2;
  gsize len = size - 2;
  /* The input up to its first NUL as a C string; what follows, another. */
  const char *nul = memchr (buf, '\0', len);
  char *first = g_strndup (buf, nul != NULL ? (gsize) (nul - buf) : len);
  char *second = nul != NULL ? g_strndup (nul + 1, len - (gsize) (nul - buf) - 1) : g_strdup ("");
  switch (data[0] % 3)
    {
    case 0:
      fuzz_match (methods[data[1] % G_N_ELEMENTS (methods)], first);
      check_query (second);
      break;
    case 1:
      fuzz_pattern (first);
      break;
    default:
      check_decode (buf, len, data[1] & 1); /* NULs and all */
      check_query (first);
      break;
    }
  g_free (first);
  g_free (second);
  return 0;
}
