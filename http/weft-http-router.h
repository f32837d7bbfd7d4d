/* weft-http-router.h: route patterns and percent-decoding (internal).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define WEFT_HTTP_MAX_PARAMS 16 /* {name} segments in one pattern */

typedef struct _WeftHttpRouter WeftHttpRouter;
typedef struct _WeftHttpRoute WeftHttpRoute;

/* A {name} segment's value, percent-decoded; name belongs to the route. */
typedef struct {
  const char *name;
  char *value;
} WeftHttpParam;

typedef enum {
  WEFT_HTTP_ROUTE_FOUND,
  WEFT_HTTP_ROUTE_NOT_FOUND,      /* 404 */
  WEFT_HTTP_ROUTE_BAD_METHOD,     /* 405: the path has routes, not for this method */
  WEFT_HTTP_ROUTE_BAD_PATH,       /* 400: a malformed or NUL percent-escape */
} WeftHttpRouteResult;

WeftHttpRouter *weft_http_router_new (void);
void weft_http_router_free (WeftHttpRouter *router);

/* For the tests: whether a match uses the index of literal patterns
 * always (TRUE) or never (FALSE), instead of from 8 routes on. */
void weft_http_router_force_index (WeftHttpRouter *router, gboolean use);

/* Adds a route; FALSE (router unchanged) if @pattern is malformed. The
 * pattern: '/'-separated segments, each literal or a whole "{name}"
 * segment, optionally ending in '*' (a prefix); or exactly "*" (the
 * asterisk-form of OPTIONS). @method NULL matches any. */
gboolean weft_http_router_add (WeftHttpRouter *router, const char *method, const char *pattern,
                               guint flags, gpointer handler, gpointer data,
                               GDestroyNotify notify);

/* Finds the first route matching @method and the raw (as sent) @path. On
 * FOUND, *route is set and *params / *n_params hold the decoded {name}
 * values (free with weft_http_params_free); on BAD_METHOD, @allow (if not
 * NULL) receives the allowed methods, comma-separated. */
WeftHttpRouteResult weft_http_router_match (const WeftHttpRouter *router, const char *method,
                                            const char *path, const WeftHttpRoute **route,
                                            WeftHttpParam **params, guint *n_params,
                                            GString *allow);

/* weft_http_router_match() for a caller that knows more than the strings
 * say: @method_len and @path_len are their lengths (they are still
 * NUL-terminated there), @path_escaped whether @path holds a '%'. The
 * server has these from the parser. */
WeftHttpRouteResult weft_http_router_match_sized (const WeftHttpRouter *router,
                                                  const char *method, gsize method_len,
                                                  const char *path, gsize path_len,
                                                  gboolean path_escaped,
                                                  const WeftHttpRoute **route,
                                                  WeftHttpParam **params, guint *n_params,
                                                  GString *allow);

gpointer weft_http_route_get_handler (const WeftHttpRoute *route);
gpointer weft_http_route_get_data (const WeftHttpRoute *route);
guint weft_http_route_get_flags (const WeftHttpRoute *route);

void weft_http_params_free (WeftHttpParam *params, guint n_params);

/* Appends the decoding of @s[0..len) to @out; '+' becomes a space if
 * @plus_is_space. FALSE (out partly written) on a malformed escape or one
 * that decodes to NUL. */
gboolean weft_http_percent_decode (const char *s, gsize len, gboolean plus_is_space,
                                   GString *out);

/* The pairs of an application/x-www-form-urlencoded @query, decoded, as a
 * table of the first value of each name; malformed pairs are skipped. */
GHashTable *weft_http_query_parse (const char *query);

G_END_DECLS
