/* weft-worker.c: the loop every worker runs. Take a runnable from the run
 * queue; when there is none, poll; a readiness found by polling is run by
 * the worker that found it. The loop body is also run, one turn at a time,
 * by the GMainContext bridge (context/weft-gmain.c).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <sched.h>

#include "weft-context-private.h"

/* After this many runnables in a row without a poll, poll once without
 * blocking, so a queue that never empties cannot starve fds and timers. */
#define POLL_EVERY 64

static _Thread_local WEFT_TLS_IE WeftWorker *tls_worker;

WeftWorker *
weft__worker_current (void)
{
  return tls_worker;
}

void
weft__worker_count_job (void)
{
  WeftWorker *w = tls_worker;
  if (w != NULL)
    weft__own_counter_add (&w->counters.jobs_run, 1);
}

void
weft__worker_count_timer (void)
{
  WeftWorker *w = tls_worker;
  if (w != NULL)
    {
      weft__own_counter_add (&w->counters.jobs_run, 1);
      weft__own_counter_add (&w->counters.timers_fired, 1);
    }
}


/* Cache hints for the runnable after the one just popped, while this one
 * runs: with many connections, handle_events()' hints for a whole epoll
 * batch are evicted (by the batch's own callbacks and their system calls)
 * before the last of its contexts runs, and each pop then waited for its
 * context's lines. The queue's next node is read without touching it: if
 * it is a context, its allocation and lock stripe; if it is a job, the
 * hints are wasted, never wrong. */
static inline void
hint_next (WeftEngine *e)
{
  guint span = atomic_load_explicit (&e->run_hint_bytes, memory_order_relaxed);
  /* Only when the connections' allocations together are too large to stay
   * in cache: with 50 connections the hints only cost (about 5 % more CPU
   * per request pipelined, in interleaved pairs). */
  if (atomic_load_explicit (&e->n_contexts, memory_order_relaxed) * span < WEFT_RUN_HINT_MIN_SET)
    return;
  WeftNode *next = atomic_load_explicit (&e->runq.tail, memory_order_relaxed);
  if (next == &e->runq.stub)
    return;
  const char *p = (const char *) next;
  for (guint off = 0; off < span; off += 64)
    __builtin_prefetch (p + off, 1);
  if (span > 0)
    __builtin_prefetch (p + span - 1, 1);
  __builtin_prefetch (weft__engine_ctx_lock (e, (WeftContext *) next), 1);
}

/* Takes the next runnable, one per hold of the pop lock: a worker never
 * keeps runnables aside, since one it kept while running a long callback
 * would wait although another worker is idle. The lock covers a few
 * pointer moves on the consumer side of the queues; their heads, which
 * every post writes, are read only when a queue looks drained. */
static inline __attribute__ ((always_inline)) WeftNode *
engine_pop (WeftEngine *e)
{
  guint spins = 0;

  /* The holder moves a few pointers and leaves. */
  while (atomic_exchange_explicit (&e->pop_lock, 1, memory_order_acquire))
    weft__spin_wait (&spins);
  WeftNode *n = weft__mpsc_pop (&e->urgent);
  if (n == NULL)
    {
      n = weft__mpsc_pop (&e->runq);
      if (n != NULL)
        hint_next (e);
    }
  atomic_store_explicit (&e->pop_lock, 0, memory_order_release);
  return n;
}

WeftNode *
weft__engine_pop (WeftEngine *e)
{
  return engine_pop (e);
}

static void
run_node (WeftWorker *w, WeftNode *n)
{
  if (n->kind == WEFT_NODE_JOB)
    {
      weft__own_counter_add (&w->counters.jobs_run, 1);
      weft__job_finish ((WeftJob *) n, TRUE);
    }
  else
    weft__context_run ((WeftContext *) n);
}

static void
handle_events (WeftWorker *w, WeftPollEvent *ev, int n)
{
  WeftEngine *e = w->engine;
  WeftContext *local = NULL;
  WeftFdSource *src[WEFT_POLL_BATCH];

  g_assert (n <= (int) G_N_ELEMENTS (src));
  /* With many connections each one's slot, source, context and state are
   * out of cache: the lookups hint them in rounds, before the pushes. */
  weft__fdtable_lookup_batch (e->fdtable, e, ev, n, src);
  guint fd_events = 0;
  /* A readiness whose context is idle runs without queueing (see
   * weft__context_claim_for_fd()). With one worker every such readiness
   * runs here at once, in batch order: there is nobody to hand any to.
   * With more, only the first does, after the others are queued for the
   * workers the queueing wakes, in place of the local context below. */
  gboolean all_direct = e->n_workers == 1;
  WeftFdSource *direct = NULL;
  guint32 direct_events = 0;
  for (int i = 0; i < n; i++)
    {
      if (src[i] != NULL)
        {
          fd_events++;
          if ((all_direct || (direct == NULL && local == NULL)) &&
              weft__context_claim_for_fd (src[i]))
            {
              if (all_direct)
                weft__context_run_fd (src[i], ev[i].events);
              else
                {
                  direct = src[i];
                  direct_events = ev[i].events;
                }
              continue;
            }
          weft__fd_source_ready (src[i], ev[i].events, direct == NULL ? &local : NULL);
          continue;
        }
      guint64 key = ev[i].key;
      if (key >> 32)
        continue; /* a source removed meanwhile */
      switch (key)
        {
        case WEFT_KEY_WAKE:
          atomic_store (&e->wake_pending, 0);
          break;
        case WEFT_KEY_TIMER:
          weft__timers_expire (e, direct == NULL ? &local : NULL);
          break;
        case WEFT_KEY_SIGNAL:
          weft__signals_read (e, direct == NULL ? &local : NULL);
          break;
        default: /* WEFT_KEY_STOP: the loop checks e->stopping */
          break;
        }
    }
  /* Once per batch: the stats are summed with relaxed loads, no snapshot. */
  weft__own_counter_add (&w->counters.fd_events, fd_events);
  /* The first context made runnable here runs on this worker, with no
   * hand-off; any others went to the run queue and woke a sleeper. */
  if (local != NULL || direct != NULL)
    {
      /* This worker is about to be busy with @local: if it consumed the wake
       * (or other runnables were queued while a wake was pending), pass the
       * baton before running it. */
      if (atomic_load (&e->n_sleeping) > 0 && weft__engine_runq_nonempty (e))
        weft__engine_wake (e);
      if (direct != NULL)
        weft__context_run_fd (direct, direct_events);
      else
        weft__context_run (local);
    }
}

WeftWorker *
weft__worker_enter (WeftWorker *w)
{
  WeftWorker *previous = tls_worker;
  tls_worker = w;
  return previous;
}

void
weft__worker_leave (WeftWorker *previous)
{
  tls_worker = previous;
}

/* The loop body, shared by the worker threads (weft__worker_main) and the
 * GMainContext bridge (weft__worker_turn): inlined into the worker loop so
 * that its hot path is what it was before the bridge existed. */
static inline __attribute__ ((always_inline)) gboolean
turn (WeftWorker *w, gboolean may_block)
{
  WeftEngine *e = w->engine;
  WeftPollEvent ev[WEFT_POLL_BATCH];

  if (w->run_streak < POLL_EVERY)
    {
      /* Inline: once per runnable, and the call's frame cost a quarter of
       * the pop. */
      WeftNode *n = engine_pop (e);
      if (n != NULL)
        {
          w->run_streak++;
          /* More queued and somebody asleep: hand them the rest. The
           * sleeper count is read first: it changes rarely, while the
           * queue heads change with every post. */
          if (atomic_load_explicit (&e->n_sleeping, memory_order_relaxed) > 0 &&
              weft__engine_runq_nonempty (e))
            weft__engine_wake (e);
          run_node (w, n);
          return TRUE;
        }
    }

  int timeout = 0;
  gboolean sleeping = FALSE;
  if (w->run_streak >= POLL_EVERY)
    w->run_streak = 0;
  else if (may_block)
    {
      /* Announce the sleep, then look once more: a poster pushes and
       * then reads n_sleeping, so one of the two sees the other. */
      atomic_fetch_add (&e->n_sleeping, 1);
      if (weft__engine_runq_nonempty (e) || atomic_load (&e->stopping))
        {
          atomic_fetch_sub (&e->n_sleeping, 1);
          weft__cpu_relax ();
          return TRUE;
        }
      if (atomic_load_explicit (&e->refusing, memory_order_relaxed))
        {
          weft__mutex_lock (&e->lock);
          weft__cond_broadcast (&e->cond);
          weft__mutex_unlock (&e->lock);
        }
      timeout = -1;
      sleeping = TRUE;
    }

  int r = weft__poll_wait (e->pfd, ev, G_N_ELEMENTS (ev), timeout);
  weft__own_counter_add (&w->counters.polls, 1);
  if (sleeping)
    atomic_fetch_sub (&e->n_sleeping, 1);
  if (r < 0)
    {
      g_critical ("epoll_wait: %s", g_strerror (-r));
      return TRUE;
    }
  handle_events (w, ev, r);
  return r > 0;
}

gboolean
weft__worker_turn (WeftWorker *w, gboolean may_block)
{
  return turn (w, may_block);
}

gboolean
weft__worker_prepare_sleep (WeftWorker *w)
{
  WeftEngine *e = w->engine;

  /* A store, not an increment: this is the engine's only worker, and its
   * poller may prepare several times per sleep. The Dekker pairing is the
   * one of turn(): we store, then look; a poster pushes, then looks. */
  atomic_store (&e->n_sleeping, 1);
  if (weft__engine_runq_nonempty (e))
    {
      atomic_store (&e->n_sleeping, 0);
      return FALSE;
    }
  if (atomic_load_explicit (&e->refusing, memory_order_relaxed))
    {
      weft__mutex_lock (&e->lock);
      weft__cond_broadcast (&e->cond);
      weft__mutex_unlock (&e->lock);
    }
  return TRUE;
}

void
weft__worker_end_sleep (WeftWorker *w)
{
  atomic_store (&w->engine->n_sleeping, 0);
}

gpointer
weft__worker_main (gpointer data)
{
  WeftWorker *w = data;
  WeftEngine *e = w->engine;

  tls_worker = w;
  while (!atomic_load_explicit (&e->stopping, memory_order_acquire))
    turn (w, TRUE);
  tls_worker = NULL;
  return NULL;
}
