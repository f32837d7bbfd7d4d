/* weft-timeout.c: timeouts. A context's timeouts live in its own heap; the
 * engine only tracks each context's earliest deadline (weft-timers.c).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-context-private.h"

/* One cache line each (see WeftSource.heap_index). */
G_STATIC_ASSERT (sizeof (gpointer) != 8 || sizeof (WeftTimeoutSource) == 64);

/* Timeouts run per pass before the context lets other work in. */
#define WEFT_TIMEOUT_BUDGET 256

gboolean
weft__timeout_detach_unlocked (WeftTimeoutSource *t)
{
  if (t->base.heap_index != WEFT_HEAP_NONE)
    weft__heap_remove (&atomic_load_explicit (&t->base.ctx->sched, memory_order_relaxed)->timers,
                       t->base.heap_index);
  /* If it was the earliest, the engine entry fires early, finds nothing
   * due and re-registers the true earliest: cheaper than a lock here. */
  return TRUE;
}

/* Runs every due timeout of @ctx in deadline order (ties: insertion
 * order). Called on the context, for its TIMERS node. */
void
weft__timeouts_dispatch (WeftContext *ctx)
{
  gint64 now = weft__now_ns ();
  guint budget = WEFT_TIMEOUT_BUDGET;
  WeftContextSched *sched = atomic_load (&ctx->sched); /* made before the node was queued */

  WeftLock *lock = weft__context_lock (ctx);
  weft__lock_acquire (lock);
  for (;;)
    {
      WeftHeapEntry *top = weft__heap_peek (&sched->timers);
      if (top == NULL || top->deadline > now)
        break;
      if (budget-- == 0)
        {
          /* More are due: queue the timers node again behind what else is
           * waiting, so a burst of due timeouts cannot hold the worker. */
          if (!atomic_exchange (&sched->timers_queued, 1))
            {
              weft__context_internal_ref (ctx); /* held by the queued node */
              weft__context_push (ctx, &sched->timers_node, FALSE, NULL);
            }
          weft__lock_release (lock);
          return;
        }
      WeftTimeoutSource *t = top->item;
      gint64 deadline = top->deadline;
      weft__heap_remove (&sched->timers, 0);
      weft__source_flag_locked (&t->base, WEFT_SOURCE_RUNNING, TRUE);
      weft__lock_release (lock);

      weft__worker_count_timer ();
      weft__cb_time_set (WEFT_CB_TIME_UNSET); /* each timeout is a callback of its own */
      gboolean keep = ((GSourceFunc) t->base.func) (t->base.user_data);

      weft__lock_acquire (lock);
      weft__source_flag_locked (&t->base, WEFT_SOURCE_RUNNING, FALSE);
      if (!weft__source_is_removed (&t->base) && !keep)
        weft__context_drop_idmap_unlocked (ctx, &t->base);
      if (weft__source_is_removed (&t->base))
        {
          if (t->base.notify == NULL)
            {
              /* Nothing of the caller's to run: free without dropping the
               * lock (the cache is per thread, its depot lock a leaf). */
              weft__cache_free (WEFT_CACHE_TIMEOUT, t);
              continue;
            }
          weft__lock_release (lock);
          weft__source_finalize (&t->base);
          weft__lock_acquire (lock);
          continue;
        }
      /* Repeat one interval after the previous deadline, so the period does
       * not drift; after a stall, one interval after now. The result is
       * always after @now, so this loop ends. */
      deadline += t->interval;
      if (deadline <= now)
        deadline = now + MAX (t->interval, 1);
      weft__heap_insert (&sched->timers, deadline, t);
    }
  WeftHeapEntry *top = weft__heap_peek (&sched->timers);
  if (top != NULL && !(atomic_load (&ctx->state) & WEFT_CTX_CLOSED))
    weft__timers_schedule_context (ctx->engine, ctx, top->deadline);
  weft__lock_release (lock);
}

static guint
add_timeout_ns (WeftContext *self, gint64 base, gint64 interval, GSourceFunc func,
                gpointer user_data, GDestroyNotify notify)
{
  WeftTimeoutSource *t = weft__cache_alloc (WEFT_CACHE_TIMEOUT);
  t->base.kind = WEFT_SOURCE_TIMEOUT;
  atomic_store_explicit (&t->base.rstate, 0, memory_order_relaxed);
  t->base.func = (gpointer) func;
  t->base.user_data = user_data;
  t->base.notify = notify;
  t->interval = interval;
  t->base.heap_index = WEFT_HEAP_NONE;
  gint64 deadline = base + interval;

  WeftLock *lock = weft__context_lock (self);
  weft__lock_acquire (lock);
  guint id = weft__context_add_source_unlocked (self, &t->base);
  if (G_UNLIKELY (id == 0))
    {
      weft__lock_release (lock);
      if (notify != NULL)
        notify (user_data);
      weft__cache_free (WEFT_CACHE_TIMEOUT, t);
      return 0;
    }
  weft__heap_insert (&weft__context_sched_unlocked (self)->timers, deadline, t);
  if (t->base.heap_index == 0) /* new earliest of this context */
    weft__timers_schedule_context (self->engine, self, deadline);
  weft__lock_release (lock);
  return id;
}

/**
 * weft_context_add_timeout:
 * @self: a context
 * @interval_ms: milliseconds until the first call, and between calls
 * @func: (scope notified) (closure user_data) (destroy notify): called on
 *   @self; return %G_SOURCE_CONTINUE to be called again
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data once the source is gone
 *
 * Adds a timeout. Its first deadline is @interval_ms after a clock reading:
 * outside context callbacks, one taken by this call; inside a callback of
 * any context (a job, an fd, timeout, idle or signal callback, or a
 * coroutine a context runs), the one taken by the callback's first timeout
 * add, which its later adds reuse, as libuv's and libevent's loops reuse a
 * cached time. So a timeout never fires before @interval_ms after the
 * start of the callback that added it; one added after long work in a
 * callback that already added a timeout counts from that first add, and can
 * fire that much earlier measured from its own add (post a job and add it
 * from there to count from later). Timeouts added by one callback with the
 * same interval have the same deadline.
 *
 * A repeating timeout keeps its period: the next deadline is one interval
 * after the previous one, not after the callback ran. Due timeouts of one
 * context fire in deadline order, those with the same deadline in the
 * order added. A timeout never fires before its deadline, and at most the
 * engine's timer slack late (1 ms by default, see
 * weft_engine_set_timer_slack()), plus scheduling delay. Safe from any
 * thread.
 *
 * Returns: the source id (> 0), or 0 if @self is destroyed (then @notify
 *   has been called)
 */
guint
weft_context_add_timeout (WeftContext *self, guint interval_ms, GSourceFunc func,
                          gpointer user_data, GDestroyNotify notify)
{
  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (func != NULL, 0);
  return add_timeout_ns (self, weft__timeout_base_ns (), (gint64) interval_ms * 1000000, func,
                         user_data, notify);
}

/**
 * weft_context_add_timeout_us:
 * @self: a context
 * @interval_us: microseconds until the first call, and between calls
 * @func: (scope notified) (closure user_data) (destroy notify): called on
 *   @self; return %G_SOURCE_CONTINUE to be called again
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data once the source is gone
 *
 * Like weft_context_add_timeout(), with microsecond resolution (the engine
 * keeps deadlines in nanoseconds and sets a timerfd to the earliest), and
 * the same base: inside a context callback, the clock reading of the
 * callback's first timeout add.
 *
 * Returns: the source id (> 0), or 0 if @self is destroyed
 */
guint
weft_context_add_timeout_us (WeftContext *self, guint64 interval_us, GSourceFunc func,
                             gpointer user_data, GDestroyNotify notify)
{
  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (func != NULL, 0);
  g_return_val_if_fail (interval_us <= G_MAXINT64 / 4000, 0);
  return add_timeout_ns (self, weft__timeout_base_ns (), (gint64) interval_us * 1000, func,
                         user_data, notify);
}

guint
weft__context_add_timeout_from_now (WeftContext *self, guint interval_ms, GSourceFunc func,
                                    gpointer user_data, GDestroyNotify notify)
{
  return add_timeout_ns (self, weft__now_ns (), (gint64) interval_ms * 1000000, func, user_data,
                         notify);
}
