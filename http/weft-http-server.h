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

/**
 * WeftHttpServer:
 *
 * An HTTP/1.1 server on a #WeftListener: each connection runs on a
 * #WeftContext of its own, requests are routed to handlers by method and
 * path pattern, and answers go out in request order (pipelining). Set it
 * up (sockets, handlers, limits) before weft_http_server_start().
 * Reference-counted.
 */
typedef struct _WeftHttpServer WeftHttpServer;

/**
 * WeftHttpRequest:
 *
 * One request received by a #WeftHttpServer, handed to a
 * #WeftHttpHandler: its method, target, headers and body, and the means to
 * answer it (whole, from a file, or streamed). Its getters and the
 * weft_http_request_respond() functions work from any thread; see each
 * function for the others. Reference-counted; every request must be
 * answered.
 */
typedef struct _WeftHttpRequest WeftHttpRequest;

/**
 * WeftHttpHandler:
 * @server: the server
 * @request: the request, with its whole body; answer it with one of the
 *   weft_http_request_respond() functions, now or later and from any
 *   thread (keep a reference with weft_http_request_ref() to answer later)
 * @user_data: the data given with the handler
 *
 * Handles a request. Runs on the connection's context. Keep it short:
 * the requests of one read (a pipeline) are dispatched one after another
 * and their answers written together after the last, so a slow handler
 * delays the answers before it too; long work belongs on another thread
 * or in a coroutine handler that waits.
 */
typedef void (*WeftHttpHandler) (WeftHttpServer *server, WeftHttpRequest *request,
                                 gpointer user_data);

/**
 * WeftHttpHandlerFlags:
 * @WEFT_HTTP_HANDLER_DEFAULT: the handler runs once the whole body has
 *   arrived (weft_http_request_get_body())
 * @WEFT_HTTP_HANDLER_STREAM_BODY: the handler runs as soon as the head has
 *   arrived; it reads the body piece by piece with
 *   weft_http_request_read_body(), or answers without reading it (for
 *   example 413 or 417 to an `Expect: 100-continue` request, which then
 *   gets no 100; the connection closes after such an answer)
 * @WEFT_HTTP_HANDLER_COROUTINE: the handler runs as a coroutine in the
 *   connection's context, so it may wait (weft_coro_sleep(),
 *   weft_coro_read() on a backend socket, a channel, ...) before
 *   answering, written top to bottom; a request it leaves unanswered when
 *   it returns gets 500. The coroutine starts at once, inside the
 *   connection's callback; one whose handler returned without waiting
 *   may serve the next pipelined requests of the same read for coroutine
 *   handlers too (weft_coro_self() is then the same for them), each
 *   starting without coroutine-locals or a pending interrupt, unless
 *   someone else holds a reference to it. With
 *   %WEFT_HTTP_HANDLER_STREAM_BODY the body's pieces arrive as callbacks
 *   of the same context, so the coroutine can wait for them (for example
 *   on a #WeftCoroCond with a %NULL mutex); an answer given before asking
 *   for the body is held until the handler returns (it may still ask).
 *
 * How a handler gets the request body, and how it runs.
 */
typedef enum {
  WEFT_HTTP_HANDLER_DEFAULT = 0,
  WEFT_HTTP_HANDLER_STREAM_BODY = 1 << 0,
  WEFT_HTTP_HANDLER_COROUTINE = 1 << 1,
} WeftHttpHandlerFlags;

/**
 * WeftHttpLimit:
 * @WEFT_HTTP_LIMIT_MAX_TARGET_BYTES: request-target bytes (default 8 KiB);
 *   over it: 414
 * @WEFT_HTTP_LIMIT_MAX_HEAD_BYTES: request line and header section bytes
 *   (default 16 KiB); over it: 431
 * @WEFT_HTTP_LIMIT_MAX_HEADERS: header lines (default 100, at most 256);
 *   over it: 431
 * @WEFT_HTTP_LIMIT_MAX_BODY_BYTES: request body bytes (default 8 MiB);
 *   over it: 413
 * @WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS: time from a request's first byte to
 *   the end of its head (default 20 s; 0: none); over it: 408 and close.
 *   A connection that sends nothing at all is closed, without an answer,
 *   after this (or the keep-alive timeout, if shorter), 1 to 1.25 times it
 * @WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS: time without a body byte while a body
 *   is expected (default 20 s; 0: none); over it: 408 and close
 * @WEFT_HTTP_LIMIT_BODY_MIN_RATE: bytes per second a body must average
 *   once it has taken longer than the body timeout (10 s without one);
 *   default 256, 0: none; below it: 408 and close
 * @WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS: how long a connection with no
 *   request in progress is kept (default 30 s; 0: for ever); one sweep
 *   every quarter of the shorter of this and the header timeout closes
 *   it, so between 1 and 1.25 times this
 * @WEFT_HTTP_LIMIT_WRITE_TIMEOUT_MS: how long output may wait with the
 *   peer taking none of it (default 60 s; 0: none); then the connection
 *   is aborted, checked every half period: 1.5 to 2 times this after the
 *   peer last took output
 * @WEFT_HTTP_LIMIT_MAX_CONNECTIONS: live connections (default 16384);
 *   accepting pauses at the limit. weft_http_server_start() sets it on the
 *   server's listener, over any value set there directly
 * @WEFT_HTTP_LIMIT_MAX_PIPELINE: parsed, unanswered requests on one
 *   connection (default 32); reading pauses at the limit
 *
 * The limits of weft_http_server_set_limit().
 */
typedef enum {
  WEFT_HTTP_LIMIT_MAX_TARGET_BYTES,
  WEFT_HTTP_LIMIT_MAX_HEAD_BYTES,
  WEFT_HTTP_LIMIT_MAX_HEADERS,
  WEFT_HTTP_LIMIT_MAX_BODY_BYTES,
  WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS,
  WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS,
  WEFT_HTTP_LIMIT_BODY_MIN_RATE,
  WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS,
  WEFT_HTTP_LIMIT_WRITE_TIMEOUT_MS,
  WEFT_HTTP_LIMIT_MAX_CONNECTIONS,
  WEFT_HTTP_LIMIT_MAX_PIPELINE,
} WeftHttpLimit;

/**
 * WeftHttpProducer:
 * @request: the request whose streamed answer wants more
 * @user_data: the data given with the producer
 *
 * Produces a streamed answer's body (weft_http_request_respond_stream()).
 * Called on the connection's context once the answer's head is on its
 * way, and again each time the connection can take more, for as long as
 * it returns %TRUE. It writes with weft_http_request_write() and ends
 * with weft_http_request_finish().
 *
 * Returns: %TRUE if it wrote something and has more to write; %FALSE to
 *   be called no more (it finished, or other code writes from now on)
 */
typedef gboolean (*WeftHttpProducer) (WeftHttpRequest *request, gpointer user_data);

/**
 * WeftHttpBodyFunc:
 * @request: the request
 * @data: (array length=len) (element-type guint8): the next piece of the
 *   body, de-chunked, valid during the call
 * @len: its length (0 only with @done)
 * @done: %TRUE on the last call: the body is complete
 * @user_data: the data given to weft_http_request_read_body()
 *
 * Receives a streamed request body on the connection's context.
 */
typedef void (*WeftHttpBodyFunc) (WeftHttpRequest *request, const guint8 *data, gsize len,
                                  gboolean done, gpointer user_data);

WEFT_AVAILABLE_IN_ALL
GType weft_http_handler_flags_get_type (void) G_GNUC_CONST;
WEFT_AVAILABLE_IN_ALL
GType weft_http_limit_get_type (void) G_GNUC_CONST;
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
void weft_http_server_add_handler_full (WeftHttpServer *self, const gchar *method,
                                        const gchar *path, WeftHttpHandlerFlags flags,
                                        WeftHttpHandler func, gpointer user_data,
                                        GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
void weft_http_server_set_limit (WeftHttpServer *self, WeftHttpLimit limit, guint64 value);
WEFT_AVAILABLE_IN_ALL
guint64 weft_http_server_get_limit (WeftHttpServer *self, WeftHttpLimit limit);
WEFT_AVAILABLE_IN_ALL
gboolean weft_http_server_set_access_log (WeftHttpServer *self, const gchar *path,
                                          GError **error);
WEFT_AVAILABLE_IN_ALL
gchar *weft_http_server_get_status_json (WeftHttpServer *self);
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
const gchar *weft_http_request_get_param (WeftHttpRequest *self, const gchar *name);
WEFT_AVAILABLE_IN_ALL
const gchar *weft_http_request_get_query_param (WeftHttpRequest *self, const gchar *name);
WEFT_AVAILABLE_IN_ALL
GHashTable *weft_http_request_get_query_params (WeftHttpRequest *self);
WEFT_AVAILABLE_IN_ALL
GBytes *weft_http_request_get_body (WeftHttpRequest *self);
WEFT_AVAILABLE_IN_ALL
void weft_http_request_read_body (WeftHttpRequest *self, WeftHttpBodyFunc func,
                                  gpointer user_data, GDestroyNotify notify);
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
void weft_http_request_respond_stream (WeftHttpRequest *self, guint status,
                                       const gchar *content_type, WeftHttpProducer producer,
                                       gpointer user_data, GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
gboolean weft_http_request_write (WeftHttpRequest *self, const guint8 *data, gsize len);
WEFT_AVAILABLE_IN_ALL
gboolean weft_http_request_write_bytes (WeftHttpRequest *self, GBytes *bytes);
WEFT_AVAILABLE_IN_ALL
void weft_http_request_finish (WeftHttpRequest *self);
WEFT_AVAILABLE_IN_ALL
gboolean weft_http_server_add_directory (WeftHttpServer *self, const gchar *url_prefix,
                                         const gchar *root, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftHttpServer, weft_http_server_unref)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftHttpRequest, weft_http_request_unref)

G_END_DECLS
