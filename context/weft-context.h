/* weft-context.h: a serial job queue that owns fds, timeouts, idles and
 * signal subscriptions, run by an engine's workers one callback at a time.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(WEFT_INSIDE) && !defined(WEFT_COMPILATION)
#error "Only <weft.h> can be included directly."
#endif

#include "weft-types.h"

G_BEGIN_DECLS

#define WEFT_TYPE_CONTEXT (weft_context_get_type ())

WEFT_AVAILABLE_IN_ALL
GType weft_context_get_type (void) G_GNUC_CONST;

WEFT_AVAILABLE_IN_ALL
WeftContext *weft_context_new (WeftEngine *engine);
WEFT_AVAILABLE_IN_ALL
WeftContext *weft_context_ref (WeftContext *self);
WEFT_AVAILABLE_IN_ALL
void weft_context_unref (WeftContext *self);

WEFT_AVAILABLE_IN_ALL
void weft_context_dispatch (WeftContext *self);
WEFT_AVAILABLE_IN_ALL
void weft_context_destroy (WeftContext *self);
WEFT_AVAILABLE_IN_ALL
gboolean weft_context_is_destroyed (WeftContext *self);
WEFT_AVAILABLE_IN_ALL
WeftEngine *weft_context_get_engine (WeftContext *self);
WEFT_AVAILABLE_IN_ALL
WeftContext *weft_context_get_current (void);

WEFT_AVAILABLE_IN_ALL
gboolean weft_context_post (WeftContext *self, WeftJobFunc func, gpointer user_data,
                            GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
gboolean weft_context_post_front (WeftContext *self, WeftJobFunc func, gpointer user_data,
                                  GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
gboolean weft_context_post_slot (WeftContext *self, WeftJobSlot *slot, WeftJobFunc func,
                                 gpointer user_data, GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
gboolean weft_context_try_post (WeftContext *self, WeftJobFunc func, gpointer user_data,
                                GDestroyNotify notify, GError **error);
WEFT_AVAILABLE_IN_ALL
void weft_context_set_max_queued (WeftContext *self, guint max_queued);
WEFT_AVAILABLE_IN_ALL
guint weft_context_get_max_queued (WeftContext *self);

WEFT_AVAILABLE_IN_ALL
guint weft_context_add_fd (WeftContext *self, gint fd, GIOCondition events, WeftFdFunc func,
                           gpointer user_data, GDestroyNotify notify, GError **error);
WEFT_AVAILABLE_IN_ALL
gboolean weft_context_modify_fd (WeftContext *self, guint id, GIOCondition events,
                                 GError **error);
WEFT_AVAILABLE_IN_ALL
guint weft_context_add_timeout (WeftContext *self, guint interval_ms, GSourceFunc func,
                                gpointer user_data, GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
guint weft_context_add_timeout_us (WeftContext *self, guint64 interval_us, GSourceFunc func,
                                   gpointer user_data, GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
guint weft_context_add_idle (WeftContext *self, GSourceFunc func, gpointer user_data,
                             GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
guint weft_context_add_signal (WeftContext *self, gint signum, WeftSignalFunc func,
                               gpointer user_data, GDestroyNotify notify, GError **error);
WEFT_AVAILABLE_IN_ALL
gboolean weft_context_remove (WeftContext *self, guint id);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftContext, weft_context_unref)

G_END_DECLS
