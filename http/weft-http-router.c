/* weft-http-router.c: matching request paths against route patterns.
 *
 * Patterns are split into segments once, when added. A request's path is
 * matched as sent, segment by segment: a literal segment compares with the
 * percent-decoded segment ("/caf%C3%A9" matches "/café"), and a {name}
 * segment takes the decoded segment as its value. An escaped slash (%2F)
 * stays inside its segment, so decoding can never change which route a
 * path reaches. Routes are tried in the order they were added; the first
 * that matches both path and method wins, a GET route counting as a HEAD
 * route too.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-http-router.h"

#include <string.h>

typedef struct {
  char *text; /* literal text, or the parameter's name */
  gsize len;
  gboolean param;
} Segment;

struct _WeftHttpRoute {
  char *method;      /* NULL: any */
  gsize method_len;
  char *pattern;
  gsize pattern_len; /* compared before the bytes, for literal routes */
  Segment *segs;
  guint n_segs;
  guint n_params;
  gboolean prefix;   /* ended in '*': tail is a raw prefix of the rest */
  gboolean asterisk; /* exactly "*" */
  char *tail;
  gsize tail_len;
  guint flags;
  gpointer handler;
  gpointer data;
  GDestroyNotify notify;
};

/* Routes from which a match uses the index of literal patterns. */
#define INDEX_FROM 8

struct _WeftHttpRouter {
  GPtrArray *routes;
  /* An index for paths without escapes, where a literal route (no
   * {param}, no '*') matches only the path equal to its pattern: pattern
   * -> the literal routes' positions (a GArray of guint, ascending); and
   * the positions of all other routes. With many routes a request tries
   * only these, in the order added, instead of every route. */
  GHashTable *literal;
  GArray *others;
  guint index_from; /* INDEX_FROM, or as weft_http_router_force_index() sets it */
};

static void
route_free (gpointer p)
{
  WeftHttpRoute *r = p;
  if (r->notify != NULL)
    r->notify (r->data);
  for (guint i = 0; i < r->n_segs; i++)
    g_free (r->segs[i].text);
  g_free (r->segs);
  g_free (r->method);
  g_free (r->pattern);
  g_free (r->tail);
  g_free (r);
}

WeftHttpRouter *
weft_http_router_new (void)
{
  WeftHttpRouter *router = g_new0 (WeftHttpRouter, 1);
  router->routes = g_ptr_array_new_with_free_func (route_free);
  router->literal =
      g_hash_table_new_full (g_str_hash, g_str_equal, NULL, (GDestroyNotify) g_array_unref);
  router->others = g_array_new (FALSE, FALSE, sizeof (guint));
  router->index_from = INDEX_FROM;
  return router;
}

void
weft_http_router_force_index (WeftHttpRouter *router, gboolean use)
{
  router->index_from = use ? 0 : G_MAXUINT;
}

void
weft_http_router_free (WeftHttpRouter *router)
{
  if (router == NULL)
    return;
  g_hash_table_unref (router->literal); /* (its keys are the routes' patterns) */
  g_array_unref (router->others);
  g_ptr_array_unref (router->routes);
  g_free (router);
}

gboolean
weft_http_percent_decode (const char *s, gsize len, gboolean plus_is_space, GString *out)
{
  for (gsize i = 0; i < len; i++)
    {
      char c = s[i];
      if (c == '%')
        {
          if (i + 2 >= len)
            return FALSE;
          int h = g_ascii_xdigit_value (s[i + 1]);
          int l = g_ascii_xdigit_value (s[i + 2]);
          if (h < 0 || l < 0 || (h == 0 && l == 0))
            return FALSE;
          c = (char) (h * 16 + l);
          i += 2;
        }
      else if (c == '+' && plus_is_space)
        c = ' ';
      g_string_append_c (out, c);
    }
  return TRUE;
}

gboolean
weft_http_router_add (WeftHttpRouter *router, const char *method, const char *pattern,
                      guint flags, gpointer handler, gpointer data, GDestroyNotify notify)
{
  g_return_val_if_fail (router != NULL && pattern != NULL, FALSE);
  WeftHttpRoute *r = g_new0 (WeftHttpRoute, 1);
  r->pattern = g_strdup (pattern);
  gsize n = strlen (pattern);
  r->pattern_len = n;
  if (strcmp (pattern, "*") == 0)
    r->asterisk = TRUE;
  else
    {
      if (n == 0 || pattern[0] != '/')
        goto bad;
      r->prefix = pattern[n - 1] == '*';
      gsize body_len = r->prefix ? n - 1 : n;
      /* With a prefix the text after the last '/' is a raw prefix of
       * the rest of the path ("/files*" also matches "/files.txt"). */
      gsize segs_end = body_len;
      if (r->prefix)
        {
          const char *last = g_strrstr_len (pattern, (gssize) body_len, "/");
          segs_end = (gsize) (last - pattern);
          r->tail = g_strndup (last + 1, body_len - segs_end - 1);
          r->tail_len = strlen (r->tail);
          if (strpbrk (r->tail, "{}*") != NULL)
            goto bad;
        }
      GArray *segs = g_array_new (FALSE, TRUE, sizeof (Segment));
      const char *p = pattern;
      const char *end = pattern + segs_end;
      while (p < end)
        {
          p++; /* the '/' */
          const char *e = memchr (p, '/', (gsize) (end - p));
          if (e == NULL)
            e = end;
          Segment s = { 0 };
          gsize len = (gsize) (e - p);
          if (len >= 2 && p[0] == '{' && p[len - 1] == '}')
            {
              s.param = TRUE;
              s.text = g_strndup (p + 1, len - 2);
              s.len = len - 2;
              r->n_params++;
            }
          else
            {
              s.text = g_strndup (p, len);
              s.len = len;
            }
          g_array_append_val (segs, s);
          gboolean bad = memchr (s.text, '{', s.len) != NULL || memchr (s.text, '}', s.len) != NULL ||
                         memchr (s.text, '*', s.len) != NULL || (s.param && s.len == 0);
          /* A parameter name may appear once. */
          for (guint i = 0; s.param && i + 1 < segs->len; i++)
            {
              Segment *o = &g_array_index (segs, Segment, i);
              if (o->param && strcmp (o->text, s.text) == 0)
                bad = TRUE;
            }
          p = e;
          if (bad)
            {
              r->n_segs = segs->len;
              r->segs = (Segment *) g_array_free (segs, FALSE);
              goto bad;
            }
        }
      r->n_segs = segs->len;
      r->segs = (Segment *) g_array_free (segs, FALSE);
      if (r->n_params > WEFT_HTTP_MAX_PARAMS)
        goto bad;
    }
  r->method = g_strdup (method);
  r->method_len = method != NULL ? strlen (method) : 0;
  r->flags = flags;
  r->handler = handler;
  r->data = data;
  r->notify = notify;
  guint at = router->routes->len;
  g_ptr_array_add (router->routes, r);
  if (!r->asterisk && !r->prefix && r->n_params == 0)
    {
      GArray *same = g_hash_table_lookup (router->literal, r->pattern);
      if (same == NULL)
        {
          same = g_array_new (FALSE, FALSE, sizeof (guint));
          g_hash_table_insert (router->literal, r->pattern, same);
        }
      g_array_append_val (same, at);
    }
  else
    g_array_append_val (router->others, at);
  return TRUE;

bad:
  route_free (r); /* notify is not set yet: the caller keeps @data */
  return FALSE;
}

/* Compares a raw path segment with a literal, decoding if needed; -1 for a
 * malformed escape. */
static int
segment_equals (const char *raw, gsize len, const Segment *lit, GString *scratch)
{
  if (memchr (raw, '%', len) == NULL)
    return len == lit->len && memcmp (raw, lit->text, len) == 0;
  g_string_truncate (scratch, 0);
  if (!weft_http_percent_decode (raw, len, FALSE, scratch))
    return -1;
  return scratch->len == lit->len && memcmp (scratch->str, lit->text, lit->len) == 0;
}

typedef struct {
  const char *ptr;
  gsize len;
} Raw;

/* @a and @b hold @n bytes each. Methods and most literal paths are
 * short: two overlapping loads from either end cover any length up to 16
 * for less than a call to memcmp (or to strcmp, which also had to find
 * where the strings end). */
static inline gboolean
bytes_equal (const char *a, const char *b, gsize n)
{
  /* Shortest first: "/" and "GET" are the usual ones. */
  if (n < 4)
    {
      if (n < 2)
        return n == 0 || a[0] == b[0];
      guint16 a0, b0, a1, b1;
      memcpy (&a0, a, 2);
      memcpy (&b0, b, 2);
      memcpy (&a1, a + n - 2, 2);
      memcpy (&b1, b + n - 2, 2);
      return ((a0 ^ b0) | (a1 ^ b1)) == 0;
    }
  if (n < 8)
    {
      guint32 a0, b0, a1, b1;
      memcpy (&a0, a, 4);
      memcpy (&b0, b, 4);
      memcpy (&a1, a + n - 4, 4);
      memcpy (&b1, b + n - 4, 4);
      return ((a0 ^ b0) | (a1 ^ b1)) == 0;
    }
  if (n > 16)
    return memcmp (a, b, n) == 0;
  guint64 a0, b0, a1, b1;
  memcpy (&a0, a, 8);
  memcpy (&b0, b, 8);
  memcpy (&a1, a + n - 8, 8);
  memcpy (&b1, b + n - 8, 8);
  return ((a0 ^ b0) | (a1 ^ b1)) == 0;
}

/* 1: the path (@len bytes) matches (raw values of the params in @vals),
 * 0: it does not, -1: a malformed escape where a decoding was needed. */
static int
path_matches (const WeftHttpRoute *r, const char *path, gsize len, Raw *vals, GString *scratch)
{
  if (r->asterisk)
    return len == 1 && path[0] == '*';
  if (r->n_params == 0 && !r->prefix && scratch == NULL)
    {
      /* Literal, nothing to decode: most routes differ in length. */
      return len == r->pattern_len && bytes_equal (path, r->pattern, len);
    }
  const char *p = path;
  guint k = 0;
  for (guint i = 0; i < r->n_segs; i++)
    {
      if (*p != '/')
        return 0;
      p++;
      const char *e = strchrnul (p, '/');
      gsize seg_len = (gsize) (e - p);
      const Segment *s = &r->segs[i];
      if (s->param)
        {
          if (seg_len == 0)
            return 0;
          vals[k].ptr = p;
          vals[k].len = seg_len;
          k++;
        }
      else
        {
          int eq = segment_equals (p, seg_len, s, scratch);
          if (eq <= 0)
            return eq;
        }
      p = e;
    }
  if (r->prefix)
    return *p == '/' && strncmp (p + 1, r->tail, r->tail_len) == 0;
  return *p == '\0';
}

static gboolean
method_matches (const WeftHttpRoute *r, const char *method, gsize len)
{
  return r->method == NULL || (r->method_len == len && bytes_equal (r->method, method, len));
}

static void
add_allowed (GString *allow, const char *method)
{
  /* Each method once. */
  gsize n = strlen (method);
  const char *p = allow->str;
  while ((p = strstr (p, method)) != NULL)
    {
      if ((p == allow->str || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0'))
        return;
      p += n;
    }
  if (allow->len > 0)
    g_string_append (allow, ", ");
  g_string_append (allow, method);
}

WeftHttpRouteResult
weft_http_router_match (const WeftHttpRouter *router, const char *method, const char *path,
                        const WeftHttpRoute **route, WeftHttpParam **params, guint *n_params,
                        GString *allow)
{
  return weft_http_router_match_sized (router, method, strlen (method), path, strlen (path),
                                       strchr (path, '%') != NULL, route, params, n_params,
                                       allow);
}

WeftHttpRouteResult
weft_http_router_match_sized (const WeftHttpRouter *router, const char *method,
                              gsize method_len, const char *path, gsize path_len,
                              gboolean path_escaped, const WeftHttpRoute **route,
                              WeftHttpParam **params, guint *n_params, GString *allow)
{
  *route = NULL;
  *params = NULL;
  *n_params = 0;
  gboolean path_seen = FALSE;
  gboolean is_head = method_len == 4 && memcmp (method, "HEAD", 4) == 0;
  Raw vals[WEFT_HTTP_MAX_PARAMS];
  GString *scratch = NULL;
  WeftHttpRouteResult result = WEFT_HTTP_ROUTE_NOT_FOUND;
  /* Only a path with escapes needs decoding (and a scratch buffer). */
  if (path_escaped)
    scratch = g_string_new (NULL);

  /* Without escapes, a literal route can match only if its pattern is
   * the path: the candidates are those (one lookup) and the other routes,
   * merged in the order added. With escapes, every route; and with a few
   * routes too, where trying them costs less than the lookup (measured:
   * 3 routes, about 140 instructions more per request with it). */
  const GArray *lit = NULL, *rest = NULL;
  if (scratch == NULL && router->routes->len >= router->index_from)
    {
      lit = g_hash_table_lookup (router->literal, path);
      rest = router->others;
    }
  guint li = 0, ri = 0, next = 0;
  for (;;)
    {
      guint i;
      if (rest == NULL)
        {
          if (next >= router->routes->len)
            break;
          i = next++;
        }
      else
        {
          guint a = lit != NULL && li < lit->len ? g_array_index (lit, guint, li) : G_MAXUINT;
          guint b = ri < rest->len ? g_array_index (rest, guint, ri) : G_MAXUINT;
          if (a == G_MAXUINT && b == G_MAXUINT)
            break;
          if (a < b)
            i = a, li++;
          else
            i = b, ri++;
        }
      const WeftHttpRoute *r = router->routes->pdata[i];
      Raw *v = vals;
      int m = path_matches (r, path, path_len, v, scratch);
      if (m < 0)
        {
          result = WEFT_HTTP_ROUTE_BAD_PATH;
          goto out;
        }
      if (m == 0)
        continue;
      path_seen = TRUE;
      if (method_matches (r, method, method_len))
        {
          *route = r;
          break;
        }
      if (is_head && strcmp (r->method, "GET") == 0)
        {
          /* HEAD is GET without the body (RFC 9110 9.3.2): the first of
           * a HEAD, GET or any-method route on the path serves it. */
          *route = r;
          break;
        }
      if (allow != NULL)
        {
          add_allowed (allow, r->method);
          if (strcmp (r->method, "GET") == 0)
            add_allowed (allow, "HEAD");
        }
    }
  if (*route == NULL)
    {
      result = path_seen ? WEFT_HTTP_ROUTE_BAD_METHOD : WEFT_HTTP_ROUTE_NOT_FOUND;
      goto out;
    }
  const WeftHttpRoute *r = *route;
  if (r->n_params > 0)
    {
      WeftHttpParam *ps = g_new0 (WeftHttpParam, r->n_params);
      GString *dec = g_string_new (NULL);
      guint k = 0;
      for (guint i = 0; i < r->n_segs; i++)
        {
          if (!r->segs[i].param)
            continue;
          g_string_truncate (dec, 0);
          if (!weft_http_percent_decode (vals[k].ptr, vals[k].len, FALSE, dec))
            {
              g_string_free (dec, TRUE);
              weft_http_params_free (ps, k);
              *route = NULL;
              result = WEFT_HTTP_ROUTE_BAD_PATH;
              goto out;
            }
          ps[k].name = r->segs[i].text;
          ps[k].value = g_strndup (dec->str, dec->len);
          k++;
        }
      g_string_free (dec, TRUE);
      *params = ps;
      *n_params = k;
    }
  result = WEFT_HTTP_ROUTE_FOUND;

out:
  if (scratch != NULL)
    g_string_free (scratch, TRUE);
  return result;
}

gpointer
weft_http_route_get_handler (const WeftHttpRoute *route)
{
  return route->handler;
}

gpointer
weft_http_route_get_data (const WeftHttpRoute *route)
{
  return route->data;
}

guint
weft_http_route_get_flags (const WeftHttpRoute *route)
{
  return route->flags;
}

void
weft_http_params_free (WeftHttpParam *params, guint n_params)
{
  for (guint i = 0; i < n_params; i++)
    g_free (params[i].value);
  g_free (params);
}

GHashTable *
weft_http_query_parse (const char *query)
{
  GHashTable *t = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  GString *name = g_string_new (NULL);
  GString *value = g_string_new (NULL);
  const char *p = query;
  while (*p != '\0')
    {
      const char *amp = strchrnul (p, '&');
      const char *eq = memchr (p, '=', (gsize) (amp - p));
      const char *name_end = eq != NULL ? eq : amp;
      g_string_truncate (name, 0);
      g_string_truncate (value, 0);
      if (name_end > p &&
          weft_http_percent_decode (p, (gsize) (name_end - p), TRUE, name) &&
          (eq == NULL || weft_http_percent_decode (eq + 1, (gsize) (amp - eq - 1), TRUE, value)) &&
          !g_hash_table_contains (t, name->str))
        g_hash_table_insert (t, g_strndup (name->str, name->len),
                             g_strndup (value->str, value->len));
      p = *amp == '&' ? amp + 1 : amp;
    }
  g_string_free (name, TRUE);
  g_string_free (value, TRUE);
  return t;
}
