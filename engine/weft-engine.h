/* weft-engine.h: the Engine, a thread pool that is also the epoll main loop.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(WEFT_INSIDE) && !defined(WEFT_COMPILATION)
#error "Only <weft.h> can be included directly."
#endif

#include "weft-types.h"

G_BEGIN_DECLS

#define WEFT_TYPE_ENGINE (weft_engine_get_type ())
#define WEFT_TYPE_ENGINE_STATS (weft_engine_stats_get_type ())

/**
 * WeftEngineStats:
 * @n_workers: worker threads running
 * @n_sleeping: workers blocked in the poller right now
 * @n_contexts: contexts alive (created and not yet freed)
 * @jobs_run: jobs, fd callbacks, timeouts, idles and signal callbacks run
 * @polls: calls to the poller (epoll_wait), blocking or not
 * @wakeups: wake-up writes made to rouse a sleeping worker
 * @fd_events: fd readiness events delivered
 * @timers_fired: timeout callbacks run
 *
 * Counters of an engine, read with weft_engine_get_stats(). Each counter is
 * read without stopping the engine, so the set is not one instant's
 * snapshot; each value on its own is exact as of its read.
 */
typedef struct {
  guint n_workers;
  guint n_sleeping;
  guint64 n_contexts;
  guint64 jobs_run;
  guint64 polls;
  guint64 wakeups;
  guint64 fd_events;
  guint64 timers_fired;
} WeftEngineStats;

WEFT_AVAILABLE_IN_ALL
GType weft_engine_get_type (void) G_GNUC_CONST;
WEFT_AVAILABLE_IN_ALL
GType weft_engine_stats_get_type (void) G_GNUC_CONST;

WEFT_AVAILABLE_IN_ALL
WeftEngine *weft_engine_new (guint n_workers, GError **error);
WEFT_AVAILABLE_IN_ALL
WeftEngine *weft_engine_ref (WeftEngine *self);
WEFT_AVAILABLE_IN_ALL
void weft_engine_unref (WeftEngine *self);

WEFT_AVAILABLE_IN_ALL
gboolean weft_engine_start (WeftEngine *self, GError **error);
WEFT_AVAILABLE_IN_ALL
void weft_engine_stop (WeftEngine *self);
WEFT_AVAILABLE_IN_ALL
gboolean weft_engine_shutdown (WeftEngine *self, gint64 timeout_us);
WEFT_AVAILABLE_IN_ALL
gboolean weft_engine_is_running (WeftEngine *self);
WEFT_AVAILABLE_IN_ALL
guint weft_engine_get_n_workers (WeftEngine *self);
WEFT_AVAILABLE_IN_ALL
gboolean weft_engine_is_worker_thread (WeftEngine *self);

WEFT_AVAILABLE_IN_ALL
gboolean weft_engine_post (WeftEngine *self, WeftJobFunc func, gpointer user_data,
                           GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
gboolean weft_engine_post_front (WeftEngine *self, WeftJobFunc func, gpointer user_data,
                                 GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
gboolean weft_engine_post_slot (WeftEngine *self, WeftJobSlot *slot, WeftJobFunc func,
                                gpointer user_data, GDestroyNotify notify);

WEFT_AVAILABLE_IN_ALL
void weft_engine_set_timer_slack (WeftEngine *self, guint64 slack_us);
WEFT_AVAILABLE_IN_ALL
guint64 weft_engine_get_timer_slack (WeftEngine *self);

WEFT_AVAILABLE_IN_ALL
void weft_engine_get_stats (WeftEngine *self, WeftEngineStats *stats);
WEFT_AVAILABLE_IN_ALL
WeftEngineStats *weft_engine_stats_copy (const WeftEngineStats *stats);
WEFT_AVAILABLE_IN_ALL
void weft_engine_stats_free (WeftEngineStats *stats);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftEngine, weft_engine_unref)

G_END_DECLS
