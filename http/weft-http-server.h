/* weft-http-server.h: an HTTP/1.1 server on a listener, one context per
 * connection.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(WEFT_INSIDE) && !defined(WEFT_COMPILATION)
#error "Only <weft.h> can be included directly."
#endif

#include "weft-types.h"
#include "weft-listener.h"

G_BEGIN_DECLS

#define WEFT_TYPE_HTTP_SERVER (weft_http_server_get_type ())
#define WEFT_TYPE_HTTP_REQUEST (weft_http_request_get_type ())

typedef struct _WeftHttpServer WeftHttpServer;
typedef struct _WeftHttpRequest WeftHttpRequest;

/**
 * WeftHttpHandler:
 * @server: the server
 * @request: the request, with its whole body; answer it with one of the
 *   weft_http_request_respond() functions, now or later and from any
 *   thread (keep a reference with weft_http_request_ref() to answer later)
 * @user_data: the data given with the handler
 *
 * Handles a request. Runs on the connection's context.
 */
typedef void (*WeftHttpHandler) (WeftHttpServer *server, WeftHttpRequest *request,
                                 gpointer user_data);

WEFT_AVAILABLE_IN_ALL
GType weft_http_server_get_type (void) G_GNUC_CONST;
WEFT_AVAILABLE_IN_ALL
GType weft_http_request_get_type (void) G_GNUC_CONST;

WEFT_AVAILABLE_IN_ALL
WeftHttpServer *weft_http_server_new (WeftEngine *engine);
WEFT_AVAILABLE_IN_ALL
WeftHttpServer *weft_http_server_ref (WeftHttpServer *self);
WEFT_AVAILABLE_IN_ALL
void weft_http_server_unref (WeftHttpServer *self);
WEFT_AVAILABLE_IN_ALL
WeftListener *weft_http_server_get_listener (WeftHttpServer *self);
WEFT_AVAILABLE_IN_ALL
void weft_http_server_add_handler (WeftHttpServer *self, const gchar *method, const gchar *path,
                                   WeftHttpHandler func, gpointer user_data,
                                   GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
void weft_http_server_set_max_body (WeftHttpServer *self, guint64 max_bytes);
WEFT_AVAILABLE_IN_ALL
void weft_http_server_set_timeouts (WeftHttpServer *self, guint request_ms, guint keepalive_ms);
WEFT_AVAILABLE_IN_ALL
gboolean weft_http_server_start (WeftHttpServer *self, GError **error);
WEFT_AVAILABLE_IN_ALL
guint64 weft_http_server_get_n_requests (WeftHttpServer *self);
WEFT_AVAILABLE_IN_ALL
void weft_http_server_shutdown (WeftHttpServer *self, guint timeout_ms,
                                WeftListenerDoneFunc func, gpointer user_data,
                                GDestroyNotify notify);

WEFT_AVAILABLE_IN_ALL
WeftHttpRequest *weft_http_request_ref (WeftHttpRequest *self);
WEFT_AVAILABLE_IN_ALL
void weft_http_request_unref (WeftHttpRequest *self);
WEFT_AVAILABLE_IN_ALL
const gchar *weft_http_request_get_method (WeftHttpRequest *self);
WEFT_AVAILABLE_IN_ALL
const gchar *weft_http_request_get_path (WeftHttpRequest *self);
WEFT_AVAILABLE_IN_ALL
const gchar *weft_http_request_get_query (WeftHttpRequest *self);
WEFT_AVAILABLE_IN_ALL
const gchar *weft_http_request_get_header (WeftHttpRequest *self, const gchar *name);
WEFT_AVAILABLE_IN_ALL
GBytes *weft_http_request_get_body (WeftHttpRequest *self);
WEFT_AVAILABLE_IN_ALL
void weft_http_request_add_response_header (WeftHttpRequest *self, const gchar *name,
                                            const gchar *value);
WEFT_AVAILABLE_IN_ALL
void weft_http_request_respond (WeftHttpRequest *self, guint status, const gchar *content_type,
                                const guint8 *body, gsize len);
WEFT_AVAILABLE_IN_ALL
void weft_http_request_respond_bytes (WeftHttpRequest *self, guint status,
                                      const gchar *content_type, GBytes *body);
WEFT_AVAILABLE_IN_ALL
void weft_http_request_respond_file (WeftHttpRequest *self, guint status,
                                     const gchar *content_type, gint fd, guint64 offset,
                                     guint64 length);
WEFT_AVAILABLE_IN_ALL
gboolean weft_http_server_add_directory (WeftHttpServer *self, const gchar *url_prefix,
                                         const gchar *root, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftHttpServer, weft_http_server_unref)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftHttpRequest, weft_http_request_unref)

G_END_DECLS
