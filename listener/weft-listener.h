/* weft-listener.h: listening sockets that give every accepted connection a
 * context of its own.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(WEFT_INSIDE) && !defined(WEFT_COMPILATION)
#error "Only <weft.h> can be included directly."
#endif

#include "weft-types.h"
#include "weft-connection.h"
#include "weft-tls.h"

G_BEGIN_DECLS

#define WEFT_TYPE_LISTENER (weft_listener_get_type ())

/**
 * WeftListener:
 *
 * Listening sockets (TCP, Unix, or adopted from a parent or a service
 * manager) that accept on a context of their own and give every accepted
 * #WeftConnection a new #WeftContext, so connections spread over the
 * engine's workers. Optionally does the TLS handshake before handing a
 * connection over. Reference-counted; its functions may be called from
 * any thread.
 */
typedef struct _WeftListener WeftListener;

/**
 * WeftListenerFunc:
 * @listener: the listener
 * @conn: the accepted connection, on a new context of its own (with TLS,
 *   after a successful handshake); the callback may keep a reference
 * @user_data: the data given to weft_listener_new()
 *
 * Called on @conn's context for each accepted connection. Install the
 * connection's callbacks here; if the callback installs none and keeps no
 * reference, the connection is closed.
 */
typedef void (*WeftListenerFunc) (WeftListener *listener, WeftConnection *conn,
                                  gpointer user_data);

/**
 * WeftListenerDoneFunc:
 * @listener: the listener
 * @drained: %TRUE if every connection finished before the deadline
 * @user_data: the data given to weft_listener_shutdown()
 *
 * Called once the listener has no live connection left.
 */
typedef void (*WeftListenerDoneFunc) (WeftListener *listener, gboolean drained,
                                      gpointer user_data);

WEFT_AVAILABLE_IN_ALL
GType weft_listener_get_type (void) G_GNUC_CONST;

WEFT_AVAILABLE_IN_ALL
WeftListener *weft_listener_new (WeftEngine *engine, WeftListenerFunc func, gpointer user_data,
                                 GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
WeftListener *weft_listener_ref (WeftListener *self);
WEFT_AVAILABLE_IN_ALL
void weft_listener_unref (WeftListener *self);

WEFT_AVAILABLE_IN_ALL
void weft_listener_set_reuse_port (WeftListener *self, gboolean reuse_port);
WEFT_AVAILABLE_IN_ALL
void weft_listener_set_backlog (WeftListener *self, gint backlog);
WEFT_AVAILABLE_IN_ALL
void weft_listener_set_max_connections (WeftListener *self, guint max_connections);
WEFT_AVAILABLE_IN_ALL
void weft_listener_set_tls (WeftListener *self, WeftTlsConfig *tls);

WEFT_AVAILABLE_IN_ALL
gboolean weft_listener_add_address (WeftListener *self, const gchar *address, GError **error);
WEFT_AVAILABLE_IN_ALL
gboolean weft_listener_add_tcp (WeftListener *self, const gchar *host, guint16 port,
                                GError **error);
WEFT_AVAILABLE_IN_ALL
gboolean weft_listener_add_unix (WeftListener *self, const gchar *path, GError **error);
WEFT_AVAILABLE_IN_ALL
gboolean weft_listener_add_fd (WeftListener *self, gint fd, GError **error);
WEFT_AVAILABLE_IN_ALL
gint weft_listener_add_systemd (WeftListener *self, GError **error);
WEFT_AVAILABLE_IN_ALL
guint weft_listener_get_n_sockets (WeftListener *self);
WEFT_AVAILABLE_IN_ALL
guint16 weft_listener_get_port (WeftListener *self, guint index);

WEFT_AVAILABLE_IN_ALL
gboolean weft_listener_start (WeftListener *self, GError **error);
WEFT_AVAILABLE_IN_ALL
void weft_listener_shutdown (WeftListener *self, guint timeout_ms, WeftListenerDoneFunc func,
                             gpointer user_data, GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
guint weft_listener_get_n_connections (WeftListener *self);
WEFT_AVAILABLE_IN_ALL
guint64 weft_listener_get_n_accepted (WeftListener *self);
WEFT_AVAILABLE_IN_ALL
guint64 weft_listener_get_n_tls_failed (WeftListener *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftListener, weft_listener_unref)

G_END_DECLS
