/* weft-timers.c: the binary heap, and the engine's heap of contexts.
 *
 * Each context keeps its own timeouts in a heap (weft-timeout.c). The engine
 * keeps one entry per context with pending timeouts, keyed by that context's
 * earliest deadline, and sets a timerfd to the earliest of all. So the
 * engine-wide lock is taken only when a context's earliest deadline moves
 * earlier, not per timeout; and the due timeouts of one context fire inside
 * that context, in deadline order.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <errno.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "weft-context-private.h"

/* Linux gives ordinary threads 50 us of timer slack; so do we. */
#define WEFT_DEFAULT_TIMER_SLACK_NS (50 * 1000)

gint64
weft__now_ns (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (gint64) ts.tv_sec * G_GINT64_CONSTANT (1000000000) + ts.tv_nsec;
}

/* ---- heap --------------------------------------------------------------- */

static inline gboolean
entry_less (const WeftHeapEntry *a, const WeftHeapEntry *b)
{
  return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static inline void
heap_place (WeftHeap *h, guint i, WeftHeapEntry e)
{
  h->v[i] = e;
  h->set_index (e.item, i);
}

static void
sift_up (WeftHeap *h, guint i, WeftHeapEntry e)
{
  while (i > 0)
    {
      guint parent = (i - 1) / 2;
      if (!entry_less (&e, &h->v[parent]))
        break;
      heap_place (h, i, h->v[parent]);
      i = parent;
    }
  heap_place (h, i, e);
}

static void
sift_down (WeftHeap *h, guint i, WeftHeapEntry e)
{
  for (;;)
    {
      guint child = 2 * i + 1;
      if (child >= h->len)
        break;
      if (child + 1 < h->len && entry_less (&h->v[child + 1], &h->v[child]))
        child++;
      if (!entry_less (&h->v[child], &e))
        break;
      heap_place (h, i, h->v[child]);
      i = child;
    }
  heap_place (h, i, e);
}

void
weft__heap_init (WeftHeap *h, void (*set_index) (gpointer item, guint index))
{
  h->v = NULL;
  h->len = h->cap = 0;
  h->next_seq = 0;
  h->set_index = set_index;
}

void
weft__heap_clear (WeftHeap *h)
{
  g_free (h->v);
  h->v = NULL;
  h->len = h->cap = 0;
}

void
weft__heap_insert (WeftHeap *h, gint64 deadline, gpointer item)
{
  if (h->len == h->cap)
    {
      h->cap = h->cap ? h->cap * 2 : 16;
      h->v = g_renew (WeftHeapEntry, h->v, h->cap);
    }
  WeftHeapEntry e = { deadline, h->next_seq++, item };
  sift_up (h, h->len++, e);
}

void
weft__heap_remove (WeftHeap *h, guint i)
{
  g_assert (i < h->len);
  h->set_index (h->v[i].item, WEFT_HEAP_NONE);
  WeftHeapEntry last = h->v[--h->len];
  if (i == h->len)
    return;
  if (i > 0 && entry_less (&last, &h->v[(i - 1) / 2]))
    sift_up (h, i, last);
  else
    sift_down (h, i, last);
}

/* ---- the engine's heap of contexts ---------------------------------------- */

static void
ctx_set_index (gpointer item, guint index)
{
  atomic_load_explicit (&((WeftContext *) item)->sched, memory_order_relaxed)->timer_index = index;
}

void
weft__timers_init (WeftEngine *self)
{
  weft__mutex_init (&self->timer_lock);
  weft__heap_init (&self->ctx_heap, ctx_set_index);
  self->timer_fd = timerfd_create (CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  self->timer_fd_errno = self->timer_fd < 0 ? errno : 0;
  self->timer_armed = G_MAXINT64;
  self->timer_slack = WEFT_DEFAULT_TIMER_SLACK_NS;
}

void
weft__timers_fini (WeftEngine *self)
{
  g_assert (self->ctx_heap.len == 0);
  weft__heap_clear (&self->ctx_heap);
  if (self->timer_fd >= 0)
    close (self->timer_fd);
  weft__mutex_clear (&self->timer_lock);
}

/* When the timerfd should fire for an earliest deadline of @deadline: up
 * to the slack later, so timeouts due close together share one wake-up. */
static inline gint64
wake_time (WeftEngine *self, gint64 deadline)
{
  return deadline > G_MAXINT64 - self->timer_slack ? G_MAXINT64 : deadline + self->timer_slack;
}

/* HOLDS: timer_lock */
static void
rearm_unlocked (WeftEngine *self)
{
  WeftHeapEntry *top = weft__heap_peek (&self->ctx_heap);
  gint64 want = top ? wake_time (self, top->deadline) : G_MAXINT64;
  if (want == self->timer_armed)
    return;
  struct itimerspec its = { 0 };
  if (want != G_MAXINT64)
    {
      gint64 d = MAX (want, 1);
      its.it_value.tv_sec = d / 1000000000;
      its.it_value.tv_nsec = d % 1000000000;
    }
  /* A disarm (all zero) is only worth a syscall when nothing else is due;
   * an early wake-up is harmless: the due check finds nothing. */
  if (timerfd_settime (self->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
    g_critical ("timerfd_settime: %s", g_strerror (errno));
  self->timer_armed = want;
}

void
weft__timers_schedule_context (WeftEngine *self, WeftContext *ctx, gint64 deadline)
{
  /* (Called under the context's lock, which made sched.) */
  WeftContextSched *sched = atomic_load_explicit (&ctx->sched, memory_order_relaxed);
  weft__mutex_lock (&self->timer_lock);
  if (sched->timer_index != WEFT_HEAP_NONE)
    {
      WeftHeapEntry *e = &self->ctx_heap.v[sched->timer_index];
      if (e->deadline <= deadline)
        {
          /* Already due earlier: it will look again when that fires. */
          weft__mutex_unlock (&self->timer_lock);
          return;
        }
      weft__heap_remove (&self->ctx_heap, sched->timer_index);
    }
  else
    weft__context_internal_ref (ctx); /* held by the heap entry */
  weft__heap_insert (&self->ctx_heap, deadline, ctx);
  if (wake_time (self, deadline) < self->timer_armed)
    rearm_unlocked (self);
  weft__mutex_unlock (&self->timer_lock);
}

void
weft__timers_unschedule_context (WeftEngine *self, WeftContext *ctx)
{
  gboolean was = FALSE;
  /* Called after the context's locked close: no timeout can make sched
   * any more, and one made before is seen through that lock. */
  WeftContextSched *sched = atomic_load_explicit (&ctx->sched, memory_order_acquire);
  if (sched == NULL)
    return; /* never had a timeout */
  weft__mutex_lock (&self->timer_lock);
  if (sched->timer_index != WEFT_HEAP_NONE)
    {
      weft__heap_remove (&self->ctx_heap, sched->timer_index);
      was = TRUE;
    }
  weft__mutex_unlock (&self->timer_lock);
  if (was)
    weft__context_internal_unref (ctx);
}

void
weft__timers_expire (WeftEngine *self, WeftContext **local)
{
  WeftContext *due[64];
  guint n;

  do
    {
      n = 0;
      gint64 now = weft__now_ns ();
      weft__mutex_lock (&self->timer_lock);
      WeftHeapEntry *top;
      while (n < G_N_ELEMENTS (due) && (top = weft__heap_peek (&self->ctx_heap)) != NULL &&
             top->deadline <= now)
        {
          due[n++] = top->item;
          weft__heap_remove (&self->ctx_heap, 0);
        }
      /* The timerfd has fired (or we are about to look again): force a
       * fresh setting even when the earliest deadline did not change. */
      self->timer_armed = G_MININT64;
      rearm_unlocked (self);
      weft__mutex_unlock (&self->timer_lock);

      for (guint i = 0; i < n; i++)
        {
          WeftContext *ctx = due[i];
          /* The heap's reference moves to the queued node, or is dropped. */
          WeftContextSched *sched = atomic_load_explicit (&ctx->sched, memory_order_relaxed);
          if (!atomic_exchange (&sched->timers_queued, 1))
            weft__context_push_ref (ctx, &sched->timers_node, FALSE, local);
          else
            weft__context_internal_unref (ctx);
        }
    }
  while (n == G_N_ELEMENTS (due));
}

gint64
weft__timers_next_wake (WeftEngine *self)
{
  weft__mutex_lock (&self->timer_lock);
  WeftHeapEntry *top = weft__heap_peek (&self->ctx_heap);
  gint64 wake = top != NULL ? wake_time (self, top->deadline) : G_MAXINT64;
  weft__mutex_unlock (&self->timer_lock);
  return wake;
}

/**
 * weft_engine_set_timer_slack:
 * @self: an engine
 * @slack_us: how late, in microseconds, a timeout may fire so that
 *   timeouts due close together share one wake-up; 0 for none
 *
 * Sets the engine's timer slack (default 50 us, the kernel's default for
 * ordinary threads). The engine arms its timerfd for the earliest deadline
 * plus the slack, then fires everything due by then, in deadline order: a
 * timeout never fires early, and at most @slack_us (plus scheduling delay)
 * late. A server with many connection timeouts wants 1000 or more; a
 * program that needs precise timing wants 0.
 */
void
weft_engine_set_timer_slack (WeftEngine *self, guint64 slack_us)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (slack_us <= G_MAXINT64 / 4000);

  weft__mutex_lock (&self->timer_lock);
  self->timer_slack = (gint64) slack_us * 1000;
  rearm_unlocked (self);
  weft__mutex_unlock (&self->timer_lock);
}

/**
 * weft_engine_get_timer_slack:
 * @self: an engine
 *
 * Gets how late a timeout may fire so that timeouts due close together
 * share one wake-up, as set with weft_engine_set_timer_slack() (default
 * 50 us). Safe from any thread.
 *
 * Returns: the timer slack in microseconds
 */
guint64
weft_engine_get_timer_slack (WeftEngine *self)
{
  g_return_val_if_fail (self != NULL, 0);
  weft__mutex_lock (&self->timer_lock);
  guint64 slack = (guint64) self->timer_slack / 1000;
  weft__mutex_unlock (&self->timer_lock);
  return slack;
}
