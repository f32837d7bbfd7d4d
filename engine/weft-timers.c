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
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "weft-context-private.h"

/* 1 ms, the resolution GLib and libuv timers have. A wake-up costs 15-20
 * us of CPU on the VMs we measure on, timer expiry and scheduling alone:
 * with the kernel's 50 us, 100k timeouts spread over a second took 11,000
 * wake-ups and 3x the CPU. Precise timing is one call away (slack 0). */
#define WEFT_DEFAULT_TIMER_SLACK_NS (1000 * 1000)

gint64
weft__now_ns (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (gint64) ts.tv_sec * G_GINT64_CONSTANT (1000000000) + ts.tv_nsec;
}

_Thread_local WEFT_TLS_IE gint64 weft__tls_cb_time = WEFT_CB_TIME_OFF;

/* A clock read is 25-35 ns on the VMs we measure on, a quarter of a
 * timeout's insert: a callback that adds many timeouts reads it once. */
gint64
weft__timeout_base_ns (void)
{
  gint64 t = weft__tls_cb_time;
  if (t > 0)
    return t;
  gint64 now = weft__now_ns ();
  if (t == WEFT_CB_TIME_UNSET)
    weft__tls_cb_time = MAX (now, 1); /* (0 means unset) */
  return now;
}

/* ---- heap --------------------------------------------------------------- */

/* Four children per node: half the levels of a binary heap, and with
 * 16-byte entries aligned below, the four children sit in one cache line,
 * so a level costs one miss instead of two. */
#define ARITY 4

static inline guint *
index_of (const WeftHeap *h, gpointer item)
{
  return (guint *) ((char *) item + h->index_offset);
}

static inline guint64
seq_of (const WeftHeap *h, gpointer item)
{
  return *(guint64 *) ((char *) item + h->seq_offset);
}

static inline gboolean
entry_less (const WeftHeap *h, const WeftHeapEntry *a, const WeftHeapEntry *b)
{
  if (a->deadline != b->deadline)
    return a->deadline < b->deadline;
  return seq_of (h, a->item) < seq_of (h, b->item);
}

static inline void
heap_place (WeftHeap *h, guint i, WeftHeapEntry e)
{
  h->v[i] = e;
  *index_of (h, e.item) = i;
}

static void
sift_up (WeftHeap *h, guint i, WeftHeapEntry e)
{
  while (i > 0)
    {
      guint parent = (i - 1) / ARITY;
      if (!entry_less (h, &e, &h->v[parent]))
        break;
      heap_place (h, i, h->v[parent]);
      i = parent;
    }
  heap_place (h, i, e);
}

static void
sift_down (WeftHeap *h, guint i, WeftHeapEntry e)
{
  WeftHeapEntry *v = h->v;
  guint len = h->len;

  for (;;)
    {
      guint first = ARITY * i + 1, best;
      if (G_LIKELY (first + ARITY <= len))
        {
          /* All four: a tournament of two pairs, whose outcomes the
           * compiler can turn into conditional moves instead of branches
           * that random deadlines mispredict half the time. */
          guint a = first + entry_less (h, &v[first + 1], &v[first]);
          guint b = first + 2 + entry_less (h, &v[first + 3], &v[first + 2]);
          best = entry_less (h, &v[b], &v[a]) ? b : a;
        }
      else if (first < len)
        {
          best = first;
          for (guint c = first + 1; c < len; c++)
            if (entry_less (h, &v[c], &v[best]))
              best = c;
        }
      else
        break;
      if (!entry_less (h, &v[best], &e))
        break;
      heap_place (h, i, v[best]);
      i = best;
    }
  heap_place (h, i, e);
}

void
weft__heap_init (WeftHeap *h, gsize index_offset, gsize seq_offset)
{
  g_assert (index_offset <= G_MAXUINT16 && seq_offset <= G_MAXUINT16);
  h->v = h->block = NULL;
  h->len = h->cap = 0;
  h->next_seq = 0;
  h->index_offset = (guint16) index_offset;
  h->seq_offset = (guint16) seq_offset;
}

void
weft__heap_clear (WeftHeap *h)
{
  g_free (h->block);
  h->v = h->block = NULL;
  h->len = h->cap = 0;
}

static void
grow (WeftHeap *h)
{
  guint cap = h->cap ? h->cap * 2 : 16;
  gsize old_shift = h->block != NULL ? (gsize) (h->v - h->block) : 0;
  /* Three spare entries, so that v can start where v[1], the root's first
   * child, begins a cache line: then every group of siblings (4i+1 ..
   * 4i+4) fills exactly one line. realloc keeps only malloc's alignment,
   * so the entries move when the block's offset in its line changed. */
  WeftHeapEntry *block = g_renew (WeftHeapEntry, h->block, cap + 3);
  gsize shift = 0;
  if (sizeof (WeftHeapEntry) == 16 && ((guintptr) block & 15) == 0)
    shift = ((64 - ((guintptr) (block + 1) & 63)) & 63) / 16;
  if (shift != old_shift && h->len > 0)
    memmove (block + shift, block + old_shift, h->len * sizeof (WeftHeapEntry));
  h->block = block;
  h->v = block + shift;
  h->cap = cap;
}

void
weft__heap_insert (WeftHeap *h, gint64 deadline, gpointer item)
{
  if (G_UNLIKELY (h->len == h->cap))
    grow (h);
  *(guint64 *) ((char *) item + h->seq_offset) = h->next_seq++;
  WeftHeapEntry e = { deadline, item };
  sift_up (h, h->len++, e);
}

void
weft__heap_remove (WeftHeap *h, guint i)
{
  g_assert (i < h->len);
  *index_of (h, h->v[i].item) = WEFT_HEAP_NONE;
  WeftHeapEntry last = h->v[--h->len];
  if (i == h->len)
    return;
  if (i > 0 && entry_less (h, &last, &h->v[(i - 1) / ARITY]))
    sift_up (h, i, last);
  else
    sift_down (h, i, last);
}

/* ---- the engine's heap of contexts ---------------------------------------- */

void
weft__timers_init (WeftEngine *self)
{
  weft__mutex_init (&self->timer_lock);
  /* Items are WeftContextSched, which hold the link (see there). */
  weft__heap_init_link (&self->ctx_heap, WeftContextSched, timer_link);
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
  if (sched->timer_link.index != WEFT_HEAP_NONE)
    {
      WeftHeapEntry *e = &self->ctx_heap.v[sched->timer_link.index];
      if (e->deadline <= deadline)
        {
          /* Already due earlier: it will look again when that fires. */
          weft__mutex_unlock (&self->timer_lock);
          return;
        }
      weft__heap_remove (&self->ctx_heap, sched->timer_link.index);
    }
  else
    weft__context_internal_ref (ctx); /* held by the heap entry */
  weft__heap_insert (&self->ctx_heap, deadline, sched);
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
  if (sched->timer_link.index != WEFT_HEAP_NONE)
    {
      weft__heap_remove (&self->ctx_heap, sched->timer_link.index);
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
          due[n++] = ((WeftContextSched *) top->item)->ctx;
          weft__heap_remove (&self->ctx_heap, 0);
        }
      /* The timerfd has fired, and a fired one-shot timer is disarmed: set
       * it again only if something is left. Not disarming it explicitly
       * saves a syscall per wake-up; if it was re-armed after firing, the
       * worst case is one early wake-up that finds nothing due. */
      self->timer_armed = G_MAXINT64;
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
 * Sets the engine's timer slack (default 1000 us, 1 ms). The engine arms
 * its timerfd for the earliest deadline plus the slack, then fires
 * everything due by then, in deadline order: a timeout never fires early,
 * and at most @slack_us (plus scheduling delay) late. The default lets
 * timeouts due within the same millisecond share one wake-up, as
 * millisecond timers (GLib, libuv) do, but with microsecond deadlines that
 * are never rounded down. A program that needs precise timing sets 0:
 * then the timerfd is set for the earliest deadline exactly.
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
 * 1000 us). Safe from any thread.
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
