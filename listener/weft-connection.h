/* weft-connection.h: a socket owned by a context: buffered reads with
 * read-waiting helpers, a bounded write queue, timeouts, TLS.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(WEFT_INSIDE) && !defined(WEFT_COMPILATION)
#error "Only <weft.h> can be included directly."
#endif

#include <gio/gio.h>

#include "weft-types.h"

G_BEGIN_DECLS

#define WEFT_TYPE_CONNECTION (weft_connection_get_type ())
#define WEFT_TYPE_CONNECTION_EVENT (weft_connection_event_get_type ())

/**
 * WeftConnection:
 *
 * A connected stream socket (TCP or Unix) owned by a #WeftContext, whose
 * callbacks it runs: buffered reads (raw, exact-length or up to a
 * delimiter), a write queue with high and low water marks, idle and write
 * timeouts, and optional TLS. Reference-counted; unless documented
 * otherwise, call its functions on the owning context (from its callbacks,
 * or before the context is dispatched).
 */
typedef struct _WeftConnection WeftConnection;

/**
 * WeftTlsConfig:
 *
 * TLS settings (OpenSSL 3), for servers (weft_tls_config_new_server()) or
 * clients (weft_tls_config_new_client()). Set it up on one thread, then
 * share it read-only among any number of connections on any threads.
 * Reference-counted.
 */
typedef struct _WeftTlsConfig WeftTlsConfig;

/**
 * WeftConnectionEvent:
 * @WEFT_CONNECTION_EVENT_PEER_CLOSED: the peer shut down its sending side
 *   (read end of file); writing may still work
 * @WEFT_CONNECTION_EVENT_DRAINED: the write queue, having been above its high
 *   water mark, fell to its low water mark or below; never emitted from
 *   inside a write call, so a producer may simply write again
 * @WEFT_CONNECTION_EVENT_ERROR: a read, write, TLS or timeout error; the
 *   connection is closed right after this event
 * @WEFT_CONNECTION_EVENT_CLOSED: the socket is closed (after a graceful or
 *   abortive close, an error, or the peer's reset); the last event
 *
 * What a #WeftConnectionEventFunc is told.
 */
typedef enum {
  WEFT_CONNECTION_EVENT_PEER_CLOSED,
  WEFT_CONNECTION_EVENT_DRAINED,
  WEFT_CONNECTION_EVENT_ERROR,
  WEFT_CONNECTION_EVENT_CLOSED,
} WeftConnectionEvent;

/**
 * WeftConnectionReadFunc:
 * @conn: the connection
 * @data: (array length=len) (element-type guint8): the bytes available, which
 *   stay valid until the callback returns
 * @len: how many
 * @user_data: the data given with the callback
 *
 * Receives bytes on the connection's context. For
 * weft_connection_start_reading() the return value is how many bytes of
 * @data were consumed; the rest are presented again, followed by more, on
 * the next call. For the one-shot helpers (weft_connection_read_exactly(),
 * weft_connection_read_until()) it is ignored: exactly @len bytes are
 * consumed.
 *
 * Returns: bytes consumed (at most @len)
 */
typedef gsize (*WeftConnectionReadFunc) (WeftConnection *conn, const guint8 *data, gsize len,
                                         gpointer user_data);

/**
 * WeftConnectionEventFunc:
 * @conn: the connection
 * @event: what happened
 * @error: (nullable): for %WEFT_CONNECTION_EVENT_ERROR, why
 * @user_data: the data given with the callback
 *
 * Called on the connection's context.
 */
typedef void (*WeftConnectionEventFunc) (WeftConnection *conn, WeftConnectionEvent event,
                                         const GError *error, gpointer user_data);

/**
 * WeftConnectFunc:
 * @conn: (nullable): the connected connection (the callback gets a
 *   reference it may keep with weft_connection_ref()), or %NULL on failure
 * @error: (nullable): why the connection failed
 * @user_data: the data given with the callback
 *
 * Called on the context given to weft_connection_connect_async().
 */
typedef void (*WeftConnectFunc) (WeftConnection *conn, const GError *error, gpointer user_data);

WEFT_AVAILABLE_IN_ALL
GType weft_connection_get_type (void) G_GNUC_CONST;
WEFT_AVAILABLE_IN_ALL
GType weft_connection_event_get_type (void) G_GNUC_CONST;

WEFT_AVAILABLE_IN_ALL
WeftConnection *weft_connection_new (WeftContext *ctx, gint fd, GError **error);
WEFT_AVAILABLE_IN_ALL
WeftConnection *weft_connection_ref (WeftConnection *self);
WEFT_AVAILABLE_IN_ALL
void weft_connection_unref (WeftConnection *self);
WEFT_AVAILABLE_IN_ALL
WeftContext *weft_connection_get_context (WeftConnection *self);
WEFT_AVAILABLE_IN_ALL
gint weft_connection_get_fd (WeftConnection *self);

WEFT_AVAILABLE_IN_ALL
void weft_connection_set_event_func (WeftConnection *self, WeftConnectionEventFunc func,
                                     gpointer user_data, GDestroyNotify notify);

WEFT_AVAILABLE_IN_ALL
void weft_connection_start_reading (WeftConnection *self, WeftConnectionReadFunc func,
                                    gpointer user_data, GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
void weft_connection_read_exactly (WeftConnection *self, gsize n, WeftConnectionReadFunc func,
                                   gpointer user_data, GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
void weft_connection_read_until (WeftConnection *self, const guint8 *delimiter,
                                 gsize delimiter_len, gsize max_len,
                                 WeftConnectionReadFunc func, gpointer user_data,
                                 GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
void weft_connection_stop_reading (WeftConnection *self);
WEFT_AVAILABLE_IN_ALL
void weft_connection_set_max_read_buffer (WeftConnection *self, gsize max_bytes);

WEFT_AVAILABLE_IN_ALL
gboolean weft_connection_write (WeftConnection *self, const guint8 *data, gsize len);
WEFT_AVAILABLE_IN_ALL
gboolean weft_connection_write_bytes (WeftConnection *self, GBytes *bytes);
WEFT_AVAILABLE_IN_ALL
gboolean weft_connection_send_file (WeftConnection *self, gint fd, guint64 offset,
                                    guint64 length, GError **error);
WEFT_AVAILABLE_IN_ALL
gsize weft_connection_get_write_queued (WeftConnection *self);
WEFT_AVAILABLE_IN_ALL
void weft_connection_set_write_watermarks (WeftConnection *self, gsize high, gsize low);
WEFT_AVAILABLE_IN_ALL
gboolean weft_connection_is_write_blocked (WeftConnection *self);

WEFT_AVAILABLE_IN_ALL
void weft_connection_set_idle_timeout (WeftConnection *self, guint timeout_ms);
WEFT_AVAILABLE_IN_ALL
void weft_connection_set_write_timeout (WeftConnection *self, guint timeout_ms);

WEFT_AVAILABLE_IN_ALL
void weft_connection_shutdown_write (WeftConnection *self);
WEFT_AVAILABLE_IN_ALL
void weft_connection_close (WeftConnection *self);
WEFT_AVAILABLE_IN_ALL
void weft_connection_abort (WeftConnection *self);
WEFT_AVAILABLE_IN_ALL
gboolean weft_connection_is_closed (WeftConnection *self);

WEFT_AVAILABLE_IN_ALL
GSocketAddress *weft_connection_get_peer_address (WeftConnection *self);
WEFT_AVAILABLE_IN_ALL
GSocketAddress *weft_connection_get_local_address (WeftConnection *self);

WEFT_AVAILABLE_IN_ALL
void weft_connection_connect_async (WeftContext *ctx, const gchar *host, guint16 port,
                                    guint timeout_ms, WeftTlsConfig *tls,
                                    WeftConnectFunc func, gpointer user_data,
                                    GDestroyNotify notify);

WEFT_AVAILABLE_IN_ALL
gboolean weft_connection_is_tls (WeftConnection *self);
WEFT_AVAILABLE_IN_ALL
const gchar *weft_connection_get_alpn_protocol (WeftConnection *self);
WEFT_AVAILABLE_IN_ALL
const gchar *weft_connection_get_server_name (WeftConnection *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftConnection, weft_connection_unref)

G_END_DECLS
