/* weft-connection-private.h: what the listener and the connect code use of
 * a connection.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "weft-context-private.h"
#include "weft-connection.h"
#include "weft-tls-private.h"

/* Called once on the connection's context when its socket is closed, after
 * the CLOSED event: the listener counts live connections with it. */
typedef void (*WeftConnectionCloseHook) (WeftConnection *conn, gpointer data);

void weft__connection_set_close_hook (WeftConnection *self, WeftConnectionCloseHook hook,
                                      gpointer data);
/* TRUE if the application installed a read or event callback. */
gboolean weft__connection_has_callbacks (WeftConnection *self);
/* Makes a connection for an accepted or connected socket; @fd must be
 * non-blocking. Takes the fd even on failure (closes it). */
WeftConnection *weft__connection_new (WeftContext *ctx, int fd, GError **error);
