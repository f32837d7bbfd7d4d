/* weft-gmain.h: the GLib main-context bridge. An engine driven by a
 * GMainContext, contexts whose callbacks run on a GMainContext, and posting
 * jobs to a GMainContext.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(WEFT_INSIDE) && !defined(WEFT_COMPILATION)
#error "Only <weft.h> can be included directly."
#endif

#include "weft-types.h"

G_BEGIN_DECLS

WEFT_AVAILABLE_IN_ALL
WeftEngine *weft_engine_new_for_main_context (GMainContext *main_context, GError **error);

WEFT_AVAILABLE_IN_ALL
WeftContext *weft_context_new_for_main_context (WeftEngine *engine, GMainContext *main_context);

WEFT_AVAILABLE_IN_ALL
gboolean weft_main_context_post (GMainContext *main_context, WeftJobFunc func, gpointer user_data,
                                 GDestroyNotify notify);

G_END_DECLS
