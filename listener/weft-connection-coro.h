/* weft-connection-coro.h: a connection driven from a coroutine.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(WEFT_INSIDE) && !defined(WEFT_COMPILATION)
#error "Only <weft.h> can be included directly."
#endif

#include "weft-connection.h"
#include "weft-coro.h"

G_BEGIN_DECLS

WEFT_AVAILABLE_IN_ALL
WeftCoro *weft_connection_coro_spawn (WeftConnection *self, WeftCoroFunc func,
                                      gpointer user_data, GDestroyNotify notify,
                                      gsize stack_size);
WEFT_AVAILABLE_IN_ALL
GBytes *weft_connection_coro_read (WeftConnection *self, gsize max_len, gint timeout_ms,
                                   GError **error);
WEFT_AVAILABLE_IN_ALL
GBytes *weft_connection_coro_read_exactly (WeftConnection *self, gsize n, gint timeout_ms,
                                           GError **error);
WEFT_AVAILABLE_IN_ALL
GBytes *weft_connection_coro_read_until (WeftConnection *self, const guint8 *delimiter,
                                         gsize delimiter_len, gsize max_len, gint timeout_ms,
                                         GError **error);
WEFT_AVAILABLE_IN_ALL
gchar *weft_connection_coro_read_line (WeftConnection *self, gsize max_len, gint timeout_ms,
                                       gsize *length, GError **error);
WEFT_AVAILABLE_IN_ALL
gboolean weft_connection_coro_write (WeftConnection *self, const guint8 *data, gsize len,
                                     gint timeout_ms, GError **error);

G_END_DECLS
