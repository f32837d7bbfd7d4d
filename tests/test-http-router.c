/* test-http-router.c: route patterns, matching, percent-decoding and query
 * parsing (the internal router, without sockets), one named row per case.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <glib.h>
#include <string.h>

#include "weft-http-router.h"

/* Handlers are just tags here. */
#define H(n) GINT_TO_POINTER (n)

/* Rows named "...catch-all..." get a final any-method "/" + "*" route as well. */
static WeftHttpRouter *
make_router (gboolean catch_all)
{
  WeftHttpRouter *r = weft_http_router_new ();
  g_assert_true (weft_http_router_add (r, "GET", "/", 0, H (1), NULL, NULL));
  g_assert_true (weft_http_router_add (r, "GET", "/users/{id}", 0, H (2), NULL, NULL));
  g_assert_true (weft_http_router_add (r, "PUT", "/users/{id}", 0, H (3), NULL, NULL));
  g_assert_true (weft_http_router_add (r, "GET", "/users/{id}/posts/{post}", 0, H (4), NULL, NULL));
  g_assert_true (weft_http_router_add (r, NULL, "/static/*", 0, H (5), NULL, NULL));
  g_assert_true (weft_http_router_add (r, "GET", "/files*", 0, H (6), NULL, NULL));
  g_assert_true (weft_http_router_add (r, "OPTIONS", "*", 0, H (7), NULL, NULL));
  g_assert_true (weft_http_router_add (r, "GET", "/caf\xc3\xa9", 0, H (8), NULL, NULL));
  g_assert_true (weft_http_router_add (r, "POST", "/echo", 0, H (9), NULL, NULL));
  g_assert_true (weft_http_router_add (r, "GET", "/a/{x}/c", 0, H (10), NULL, NULL));
  g_assert_true (weft_http_router_add (r, "GET", "/a/b/c", 0, H (11), NULL, NULL));
  g_assert_true (weft_http_router_add (r, "GET", "/h", 0, H (12), NULL, NULL));
  g_assert_true (weft_http_router_add (r, "HEAD", "/h", 0, H (13), NULL, NULL));
  g_assert_true (weft_http_router_add (r, "HEAD", "/h2", 0, H (14), NULL, NULL));
  g_assert_true (weft_http_router_add (r, "GET", "/h2", 0, H (15), NULL, NULL));
  if (catch_all)
    g_assert_true (weft_http_router_add (r, NULL, "/*", 0, H (16), NULL, NULL));
  return r;
}

typedef struct {
  const char *name;
  const char *method;
  const char *path;
  WeftHttpRouteResult result;
  gint handler;        /* FOUND: which */
  const char *params;  /* FOUND: "name=value;..." expected, NULL: none */
  const char *allow;   /* BAD_METHOD: the Allow list */
} Row;

static const Row rows[] = {
  { "root", "GET", "/", WEFT_HTTP_ROUTE_FOUND, 1, NULL, NULL },
  { "head-falls-back-to-get", "HEAD", "/", WEFT_HTTP_ROUTE_FOUND, 1, NULL, NULL },
  { "param", "GET", "/users/42", WEFT_HTTP_ROUTE_FOUND, 2, "id=42", NULL },
  { "param-decoded", "GET", "/users/a%20b%2Fc", WEFT_HTTP_ROUTE_FOUND, 2, "id=a b/c", NULL },
  { "param-plus-stays", "GET", "/users/a+b", WEFT_HTTP_ROUTE_FOUND, 2, "id=a+b", NULL },
  { "param-method", "PUT", "/users/7", WEFT_HTTP_ROUTE_FOUND, 3, "id=7", NULL },
  { "two-params", "GET", "/users/7/posts/x%41", WEFT_HTTP_ROUTE_FOUND, 4, "id=7;post=xA", NULL },
  { "param-empty-segment", "GET", "/users/", WEFT_HTTP_ROUTE_NOT_FOUND, 0, NULL, NULL },
  { "param-extra-segment", "GET", "/users/7/x", WEFT_HTTP_ROUTE_NOT_FOUND, 0, NULL, NULL },
  { "encoded-slash-no-new-segment", "GET", "/users/7%2Fposts%2F8", WEFT_HTTP_ROUTE_FOUND, 2, "id=7/posts/8", NULL },
  { "prefix", "DELETE", "/static/a/b.css", WEFT_HTTP_ROUTE_FOUND, 5, NULL, NULL },
  { "prefix-itself", "GET", "/static/", WEFT_HTTP_ROUTE_FOUND, 5, NULL, NULL },
  { "prefix-needs-slash", "GET", "/static", WEFT_HTTP_ROUTE_NOT_FOUND, 0, NULL, NULL },
  { "prefix-partial-segment", "GET", "/files.txt", WEFT_HTTP_ROUTE_FOUND, 6, NULL, NULL },
  { "prefix-partial-segment-2", "GET", "/files/x", WEFT_HTTP_ROUTE_FOUND, 6, NULL, NULL },
  { "asterisk", "OPTIONS", "*", WEFT_HTTP_ROUTE_FOUND, 7, NULL, NULL },
  { "asterisk-other-method", "GET", "*", WEFT_HTTP_ROUTE_BAD_METHOD, 0, NULL, "OPTIONS" },
  { "literal-decoded", "GET", "/caf%C3%A9", WEFT_HTTP_ROUTE_FOUND, 8, NULL, NULL },
  { "literal-decoded-lowercase-hex", "GET", "/caf%c3%a9", WEFT_HTTP_ROUTE_FOUND, 8, NULL, NULL },
  { "literal-raw-utf8", "GET", "/caf\xc3\xa9", WEFT_HTTP_ROUTE_FOUND, 8, NULL, NULL },
  { "literal-encoded-letter", "POST", "/%65cho", WEFT_HTTP_ROUTE_FOUND, 9, NULL, NULL },
  { "method-not-allowed", "GET", "/echo", WEFT_HTTP_ROUTE_BAD_METHOD, 0, NULL, "POST" },
  { "method-not-allowed-list", "DELETE", "/users/1", WEFT_HTTP_ROUTE_BAD_METHOD, 0, NULL, "GET, HEAD, PUT" },
  { "not-found", "GET", "/nope", WEFT_HTTP_ROUTE_NOT_FOUND, 0, NULL, NULL },
  { "trailing-slash-differs", "POST", "/echo/", WEFT_HTTP_ROUTE_NOT_FOUND, 0, NULL, NULL },
  { "first-added-wins", "GET", "/a/b/c", WEFT_HTTP_ROUTE_FOUND, 10, "x=b", NULL },
  { "head-get-first-wins", "HEAD", "/h", WEFT_HTTP_ROUTE_FOUND, 12, NULL, NULL },
  { "head-head-first-wins", "HEAD", "/h2", WEFT_HTTP_ROUTE_FOUND, 14, NULL, NULL },
  { "head-before-catch-all", "HEAD", "/", WEFT_HTTP_ROUTE_FOUND, 1, NULL, NULL },
  { "catch-all-other-method", "DELETE", "/echo", WEFT_HTTP_ROUTE_FOUND, 16, NULL, NULL },
  { "catch-all", "GET", "/nope", WEFT_HTTP_ROUTE_FOUND, 16, NULL, NULL },
  { "bad-escape", "GET", "/users/%zz", WEFT_HTTP_ROUTE_BAD_PATH, 0, NULL, NULL },
  { "truncated-escape", "GET", "/users/%4", WEFT_HTTP_ROUTE_BAD_PATH, 0, NULL, NULL },
  { "nul-escape", "GET", "/users/a%00b", WEFT_HTTP_ROUTE_BAD_PATH, 0, NULL, NULL },
  { "bad-escape-in-literal", "POST", "/ech%6", WEFT_HTTP_ROUTE_BAD_PATH, 0, NULL, NULL },
};

static void
match_row (const Row *row, gboolean index)
{
  WeftHttpRouter *r = make_router (strstr (row->name, "catch-all") != NULL);
  weft_http_router_force_index (r, index);
  const WeftHttpRoute *route = NULL;
  WeftHttpParam *params = NULL;
  guint n = 0;
  GString *allow = g_string_new (NULL);
  WeftHttpRouteResult res = weft_http_router_match (r, row->method, row->path, &route, &params,
                                                    &n, allow);
  g_assert_cmpint (res, ==, row->result);
  if (res == WEFT_HTTP_ROUTE_FOUND)
    {
      g_assert_nonnull (route);
      g_assert_cmpint (GPOINTER_TO_INT (weft_http_route_get_handler (route)), ==, row->handler);
      GString *got = g_string_new (NULL);
      for (guint i = 0; i < n; i++)
        g_string_append_printf (got, "%s%s=%s", i > 0 ? ";" : "", params[i].name,
                                params[i].value);
      g_assert_cmpstr (got->str, ==, row->params != NULL ? row->params : "");
      g_string_free (got, TRUE);
    }
  else
    {
      g_assert_null (route);
      g_assert_cmpuint (n, ==, 0);
    }
  if (res == WEFT_HTTP_ROUTE_BAD_METHOD)
    g_assert_cmpstr (allow->str, ==, row->allow);
  weft_http_params_free (params, n);
  g_string_free (allow, TRUE);
  weft_http_router_free (r);
}

/* The same rows through the index of literal patterns (used from 8
 * routes on) and through the plain scan: the same answers. */
static void
test_row (gconstpointer data)
{
  match_row (data, TRUE);
}

static void
test_row_scan (gconstpointer data)
{
  match_row (data, FALSE);
}

static void
test_bad_patterns (void)
{
  static const char *const bad[] = { "", "users", "/{}", "/{a", "/a}", "/x{a}", "/{a}/{a}",
                                     "/a*b", "/{a}*x{", "/files{x}*" };
  WeftHttpRouter *r = weft_http_router_new ();
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_test_message ("pattern \"%s\"", bad[i]);
      g_assert_false (weft_http_router_add (r, "GET", bad[i], 0, H (1), NULL, NULL));
    }
  /* 17 parameters is one too many. */
  GString *p = g_string_new (NULL);
  for (guint i = 0; i < WEFT_HTTP_MAX_PARAMS + 1; i++)
    g_string_append_printf (p, "/{p%u}", i);
  g_assert_false (weft_http_router_add (r, "GET", p->str, 0, H (1), NULL, NULL));
  g_string_free (p, TRUE);
  /* Nothing was added. */
  const WeftHttpRoute *route;
  WeftHttpParam *params;
  guint n;
  g_assert_cmpint (weft_http_router_match (r, "GET", "/", &route, &params, &n, NULL), ==,
                   WEFT_HTTP_ROUTE_NOT_FOUND);
  weft_http_router_free (r);
}

static void
count_free (gpointer data)
{
  (*(gint *) data)++;
}

/* Each route's notify runs once, when the router goes. */
static void
test_notify (void)
{
  gint freed = 0;
  WeftHttpRouter *r = weft_http_router_new ();
  g_assert_true (weft_http_router_add (r, "GET", "/a", 0, H (1), &freed, count_free));
  g_assert_true (weft_http_router_add (r, "GET", "/b/{x}", 0, H (2), &freed, count_free));
  g_assert_false (weft_http_router_add (r, "GET", "/{", 0, H (3), &freed, count_free));
  g_assert_cmpint (freed, ==, 0);
  weft_http_router_free (r);
  g_assert_cmpint (freed, ==, 2);
}

static void
test_percent_decode (void)
{
  static const struct {
    const char *in;
    gboolean plus;
    const char *out; /* NULL: refused */
  } cases[] = {
    { "abc", FALSE, "abc" },
    { "a%20b", FALSE, "a b" },
    { "a+b", FALSE, "a+b" },
    { "a+b", TRUE, "a b" },
    { "%2B", TRUE, "+" },
    { "%41%42", FALSE, "AB" },
    { "%", FALSE, NULL },
    { "%4", FALSE, NULL },
    { "%g0", FALSE, NULL },
    { "%00", FALSE, NULL },
    { "100%", FALSE, NULL },
    { "%ff", FALSE, "\xff" },
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      GString *out = g_string_new (NULL);
      gboolean ok = weft_http_percent_decode (cases[i].in, strlen (cases[i].in), cases[i].plus,
                                              out);
      g_test_message ("decode \"%s\"", cases[i].in);
      if (cases[i].out == NULL)
        g_assert_false (ok);
      else
        {
          g_assert_true (ok);
          g_assert_cmpstr (out->str, ==, cases[i].out);
        }
      g_string_free (out, TRUE);
    }
}

static void
test_query (void)
{
  GHashTable *t = weft_http_query_parse ("a=1&b=x+y%21&a=2&&flag&bad=%zz&=novalue&e=&u=%C3%A9");
  g_assert_cmpstr (g_hash_table_lookup (t, "a"), ==, "1"); /* the first */
  g_assert_cmpstr (g_hash_table_lookup (t, "b"), ==, "x y!");
  g_assert_cmpstr (g_hash_table_lookup (t, "flag"), ==, "");
  g_assert_cmpstr (g_hash_table_lookup (t, "e"), ==, "");
  g_assert_cmpstr (g_hash_table_lookup (t, "u"), ==, "\xc3\xa9");
  g_assert_false (g_hash_table_contains (t, "bad"));
  g_assert_false (g_hash_table_contains (t, ""));
  g_assert_cmpuint (g_hash_table_size (t), ==, 5);
  g_hash_table_unref (t);
  t = weft_http_query_parse ("");
  g_assert_cmpuint (g_hash_table_size (t), ==, 0);
  g_hash_table_unref (t);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (rows); i++)
    {
      gchar *path = g_strdup_printf ("/http-router/match/%s", rows[i].name);
      g_test_add_data_func (path, &rows[i], test_row);
      g_free (path);
      path = g_strdup_printf ("/http-router/match-scan/%s", rows[i].name);
      g_test_add_data_func (path, &rows[i], test_row_scan);
      g_free (path);
    }
  g_test_add_func ("/http-router/bad-patterns", test_bad_patterns);
  g_test_add_func ("/http-router/notify-once", test_notify);
  g_test_add_func ("/http-router/percent-decode", test_percent_decode);
  g_test_add_func ("/http-router/query", test_query);
  return g_test_run ();
}
