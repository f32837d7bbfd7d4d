/* weft-join.h: fork-join points that run a continuation after the last of
 * several tasks has ended.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(WEFT_INSIDE) && !defined(WEFT_COMPILATION)
#error "Only <weft.h> can be included directly."
#endif

#include "weft-types.h"

G_BEGIN_DECLS

#define WEFT_TYPE_JOIN (weft_join_get_type ())

WEFT_AVAILABLE_IN_ALL
GType weft_join_get_type (void) G_GNUC_CONST;

WEFT_AVAILABLE_IN_ALL
WeftJoin *weft_join_new (guint n_tasks, WeftContext *context, WeftJobFunc continuation,
                         gpointer user_data, GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
WeftJoin *weft_join_ref (WeftJoin *self);
WEFT_AVAILABLE_IN_ALL
void weft_join_unref (WeftJoin *self);

WEFT_AVAILABLE_IN_ALL
void weft_join_add (WeftJoin *self, guint n_tasks);
WEFT_AVAILABLE_IN_ALL
void weft_join_done (WeftJoin *self);
WEFT_AVAILABLE_IN_ALL
gboolean weft_join_is_complete (WeftJoin *self);

WEFT_AVAILABLE_IN_ALL
gboolean weft_join_post (WeftJoin *self, WeftEngine *engine, WeftJobFunc func,
                         gpointer user_data, GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
gboolean weft_join_post_to_context (WeftJoin *self, WeftContext *context, WeftJobFunc func,
                                    gpointer user_data, GDestroyNotify notify);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftJoin, weft_join_unref)

G_END_DECLS
