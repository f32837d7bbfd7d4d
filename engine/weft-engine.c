/* weft-engine.c: engine lifecycle, posting, stats.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <errno.h>
#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "weft-context-private.h"

/**
 * WeftEngine:
 *
 * A pool of worker threads that is also the epoll main loop: every worker
 * both polls and runs callbacks. An engine runs many #WeftContext serial
 * queues and parallel jobs from weft_engine_post(). Reference-counted and
 * thread-safe; see `docs/architecture.md` for the threading rules.
 */
G_DEFINE_BOXED_TYPE (WeftEngine, weft_engine, weft_engine_ref, weft_engine_unref)
G_DEFINE_BOXED_TYPE (WeftEngineStats, weft_engine_stats, weft_engine_stats_copy,
                     weft_engine_stats_free)

static void drop_queued (WeftEngine *self, gboolean keep_contexts);

/**
 * weft_engine_new:
 * @n_workers: worker threads to run; 0 means one per CPU
 * @error: return location for a #GError
 *
 * Creates an engine and starts its workers. The engine is one epoll set,
 * one timerfd, and @n_workers threads that each both poll and run
 * callbacks: there is no separate loop thread.
 *
 * Returns: (transfer full) (nullable): a running engine, or %NULL with
 *   @error set when a system resource (epoll, eventfd, timerfd, thread)
 *   could not be had.
 */
WeftEngine *
weft_engine_new (guint n_workers, GError **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  g_return_val_if_fail (n_workers <= 4096, NULL);

  WeftEngine *self = weft__engine_new_unstarted (n_workers, error);
  if (self != NULL && !weft_engine_start (self, error))
    {
      weft_engine_unref (self);
      return NULL;
    }
  return self;
}

WeftEngine *
weft__engine_new_unstarted (guint n_workers, GError **error)
{
  WeftEngine *self = weft__aligned_alloc (1, sizeof (WeftEngine), 64, TRUE);
  self->ref_count = 1;
  self->internal_refs = 1;
  weft__mpsc_init (&self->urgent);
  weft__mpsc_init (&self->runq);
  weft__mutex_init (&self->lock);
  weft__mutex_init (&self->ctx_lock);
  self->ctx_locks = weft__aligned_alloc (WEFT_CTX_LOCK_STRIPES, sizeof (WeftLockStripe),
                                          G_ALIGNOF (WeftLockStripe), TRUE);
  for (guint i = 0; i < WEFT_CTX_LOCK_STRIPES; i++)
    weft__lock_init (&self->ctx_locks[i].l);
  weft__cond_init (&self->cond);
  self->n_workers = n_workers ? n_workers : (guint) g_get_num_processors ();
  self->fdtable = weft__fdtable_new ();
  self->pfd = self->wake_fd = self->stop_fd = -1;
  weft__timers_init (self);
  weft__signals_init (self);

  const char *what = NULL;
  int r = 0;
  if ((self->pfd = weft__poll_create ()) < 0)
    r = self->pfd, what = "epoll_create1";
  else if ((self->wake_fd = weft__eventfd_new ()) < 0)
    r = self->wake_fd, what = "eventfd";
  else if ((self->stop_fd = weft__eventfd_new ()) < 0)
    r = self->stop_fd, what = "eventfd";
  else if (self->timer_fd < 0)
    r = -self->timer_fd_errno, what = "timerfd_create";
  /* wake: edge-triggered and never read, so each write wakes exactly one
   * sleeping worker (epoll_wait waiters are woken exclusively). stop:
   * level-triggered, so every worker that polls after the write sees it. */
  else if ((r = weft__poll_add (self->pfd, self->wake_fd, EPOLLIN | EPOLLET, WEFT_KEY_WAKE,
                                FALSE)) < 0 ||
           (r = weft__poll_add (self->pfd, self->stop_fd, EPOLLIN, WEFT_KEY_STOP, FALSE)) < 0 ||
           (r = weft__poll_add (self->pfd, self->timer_fd, EPOLLIN | EPOLLET, WEFT_KEY_TIMER,
                                FALSE)) < 0)
    what = "epoll_ctl";

  if (what != NULL)
    {
      g_set_error (error, WEFT_ERROR, WEFT_ERROR_FAILED, "%s: %s", what, g_strerror (-r));
      weft_engine_unref (self);
      return NULL;
    }
  return self;
}

/**
 * weft_engine_ref:
 * @self: an engine
 *
 * Takes a reference on @self; drop it with weft_engine_unref(). Safe from
 * any thread.
 *
 * Returns: (transfer full): @self
 */
WeftEngine *
weft_engine_ref (WeftEngine *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (g_atomic_int_get (&self->ref_count) > 0, NULL);
  g_atomic_int_inc (&self->ref_count);
  return self;
}

WeftEngine *
weft__engine_internal_ref (WeftEngine *self)
{
  g_atomic_int_inc (&self->internal_refs);
  return self;
}

void
weft__engine_internal_unref (WeftEngine *self)
{
  if (!g_atomic_int_dec_and_test (&self->internal_refs))
    return;
  g_assert (!self->running);
  weft__timers_fini (self);
  weft__signals_fini (self);
  weft__fdtable_free (self->fdtable);
  if (self->pfd >= 0)
    close (self->pfd);
  if (self->wake_fd >= 0)
    close (self->wake_fd);
  if (self->stop_fd >= 0)
    close (self->stop_fd);
  weft__mutex_clear (&self->lock);
  weft__mutex_clear (&self->ctx_lock);
  g_aligned_free (self->ctx_locks);
  weft__cond_clear (&self->cond);
  if (self->bridge != NULL)
    weft__gmain_bridge_free (self->bridge);
  g_aligned_free (self->workers);
  g_aligned_free (self);
}

/**
 * weft_engine_unref:
 * @self: (nullable) (transfer full): an engine
 *
 * Drops a reference. The last one stops the engine as weft_engine_stop()
 * does, drops every job still queued, on the engine and on its contexts,
 * and destroys every context (weft_context_destroy()), running the
 * destroy notifies of jobs and sources on this thread: a connection still
 * open is closed. Contexts you still hold stay valid (their posts return
 * %FALSE from then on) until you unref them.
 * Must not drop the last reference from one of the engine's own workers.
 */
void
weft_engine_unref (WeftEngine *self)
{
  if (self == NULL)
    return;
  if (!g_atomic_int_dec_and_test (&self->ref_count))
    return;
  if (weft_engine_is_worker_thread (self))
    {
      g_critical ("weft_engine_unref: the last reference of an engine was dropped on one "
                  "of its own workers; the engine is leaked");
      return;
    }
  weft_engine_stop (self);
  atomic_store (&self->dead, 1);
  drop_queued (self, FALSE);
  weft__engine_destroy_contexts (self);

  /* Contexts waiting for a timeout hold references on themselves through
   * the engine heap: release them, nothing will fire any more. */
  for (;;)
    {
      WeftContext *ctx = NULL;
      weft__mutex_lock (&self->timer_lock);
      WeftHeapEntry *top = weft__heap_peek (&self->ctx_heap);
      if (top != NULL)
        {
          ctx = ((WeftContextSched *) top->item)->ctx; /* items are scheds */
          weft__heap_remove (&self->ctx_heap, 0);
        }
      weft__mutex_unlock (&self->timer_lock);
      if (ctx == NULL)
        break;
      weft__context_internal_unref (ctx);
    }
  weft__engine_internal_unref (self);
}

static void
block_async_signals (sigset_t *old)
{
  sigset_t all;
  sigfillset (&all);
  /* Faults must still reach the faulting thread. */
  sigdelset (&all, SIGSEGV);
  sigdelset (&all, SIGBUS);
  sigdelset (&all, SIGFPE);
  sigdelset (&all, SIGILL);
  sigdelset (&all, SIGTRAP);
  sigdelset (&all, SIGABRT);
  pthread_sigmask (SIG_SETMASK, &all, old);
}

/**
 * weft_engine_start:
 * @self: an engine
 * @error: return location for a #GError
 *
 * Starts the workers of an engine that weft_engine_stop() stopped. An
 * engine from weft_engine_new() is already running; starting a running
 * engine does nothing and returns %TRUE.
 *
 * Returns: %TRUE on success, %FALSE with @error set if a thread could not
 *   be created (the engine is then stopped).
 */
gboolean
weft_engine_start (WeftEngine *self, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (!atomic_load (&self->dead), FALSE);

  weft__mutex_lock (&self->lock);
  while (self->joining)
    pthread_cond_wait (&self->cond, &self->lock);
  if (self->running)
    {
      weft__mutex_unlock (&self->lock);
      return TRUE;
    }
  /* Reset the level-triggered stop fd left readable by the last stop. */
  guint64 v;
  while (read (self->stop_fd, &v, sizeof v) > 0)
    ;
  atomic_store (&self->stopping, 0);
  atomic_store (&self->refusing, 0);
  /* Reused across restarts, so the counters keep counting. */
  if (self->workers == NULL)
    self->workers = weft__aligned_alloc (self->n_workers, sizeof (WeftWorker), 64, TRUE);

  gboolean ok = TRUE;
  if (self->bridge != NULL)
    {
      /* No threads: workers[0]'s loop body runs from a GSource. */
      self->workers[0].engine = self;
      self->workers[0].run_streak = 0;
      ok = weft__gmain_bridge_start (self, error);
      self->running = TRUE;
      weft__mutex_unlock (&self->lock);
      if (!ok)
        weft_engine_stop (self);
      return ok;
    }

  sigset_t old;
  block_async_signals (&old); /* inherited by the new threads */
  guint started = 0;
  for (guint i = 0; i < self->n_workers; i++)
    {
      WeftWorker *w = &self->workers[i];
      w->engine = self;
      w->index = i;
      w->run_streak = 0;
      char name[16];
      g_snprintf (name, sizeof name, "weft-worker-%u", i);
      w->thread = g_thread_try_new (name, weft__worker_main, w, error);
      if (w->thread == NULL)
        {
          ok = FALSE;
          break;
        }
      started++;
    }
  pthread_sigmask (SIG_SETMASK, &old, NULL);
  self->running = TRUE;
  weft__mutex_unlock (&self->lock);

  if (!ok)
    weft_engine_stop (self);
  return ok;
}

/* Pops every runnable; jobs get their notify, contexts are either put back
 * (a restartable stop) or drained (the engine is dead). Called with no
 * worker running; once the engine is dead a late poster may drain beside
 * the last unref, so pops go through the pop lock. */
static void
drop_queued (WeftEngine *self, gboolean keep_contexts)
{
  GPtrArray *contexts = g_ptr_array_new ();
  guint spins = 0;

  for (;;)
    {
      WeftNode *n = weft__engine_pop (self);
      if (n == NULL)
        {
          if (weft__mpsc_nonempty (&self->urgent) || weft__mpsc_nonempty (&self->runq))
            {
              weft__spin_wait (&spins); /* a post is between its two stores */
              continue;
            }
          break;
        }
      if (n->kind == WEFT_NODE_JOB)
        weft__job_finish ((WeftJob *) n, FALSE);
      else
        g_ptr_array_add (contexts, n);
    }
  for (guint i = 0; i < contexts->len; i++)
    {
      WeftContext *ctx = contexts->pdata[i];
      if (keep_contexts)
        weft__mpsc_push (&self->runq, &ctx->run_node);
      else
        weft__context_run_dropping (ctx);
    }
  g_ptr_array_unref (contexts);
}

static gboolean drained (WeftEngine *self);
static void stop (WeftEngine *self, int drained_hint);

/**
 * weft_engine_stop:
 * @self: an engine
 *
 * Hard stop: each worker finishes the callback it is in, then exits; this
 * call returns when all have exited. Jobs posted with weft_engine_post()
 * that have not started are dropped (their destroy notifies run here).
 * Contexts keep their queues, fds and timeouts and resume after
 * weft_engine_start(). Must not be called from a worker of @self.
 */
void
weft_engine_stop (WeftEngine *self)
{
  g_return_if_fail (self != NULL);
  if (weft_engine_is_worker_thread (self))
    {
      g_critical ("weft_engine_stop: called from a worker of the same engine; a worker "
                  "cannot join itself");
      return;
    }
  stop (self, -1);
}

/* The hard stop. @drained_hint: whether the queues had drained, from the
 * shutdown that stops (a bridged engine's drain leaves its one worker
 * counted awake, so drained() cannot tell afterwards), or -1 to look. */
static void
stop (WeftEngine *self, int drained_hint)
{
  weft__mutex_lock (&self->lock);
  /* A second stopper waits for the first instead of joining twice. */
  while (self->joining)
    pthread_cond_wait (&self->cond, &self->lock);
  if (!self->running)
    {
      weft__mutex_unlock (&self->lock);
      return;
    }
  self->joining = TRUE;
  self->stop_drained = drained_hint >= 0 ? drained_hint : drained (self);
  atomic_store (&self->stopping, 1);
  weft__eventfd_signal (self->stop_fd);
  weft__mutex_unlock (&self->lock);

  if (self->bridge != NULL)
    weft__gmain_bridge_stop (self);
  else
    for (guint i = 0; i < self->n_workers; i++)
      if (self->workers[i].thread != NULL)
        g_thread_join (self->workers[i].thread);

  drop_queued (self, TRUE);

  weft__mutex_lock (&self->lock);
  for (guint i = 0; i < self->n_workers; i++)
    self->workers[i].thread = NULL;
  self->running = FALSE;
  self->joining = FALSE;
  weft__cond_broadcast (&self->cond);
  weft__mutex_unlock (&self->lock);
}

static gboolean
drained (WeftEngine *self)
{
  return atomic_load (&self->n_sleeping) == (int) self->n_workers &&
         !weft__mpsc_nonempty (&self->urgent) && !weft__mpsc_nonempty (&self->runq);
}

/**
 * weft_engine_shutdown:
 * @self: an engine
 * @timeout_us: how long to wait for the queues to drain, in microseconds;
 *   negative waits without limit
 *
 * Soft stop. From now on, posts from threads that are not workers of @self
 * are refused (they return %FALSE after calling their destroy notify);
 * work already queued, and whatever it posts from inside the engine, keeps
 * running, as do fd and timeout callbacks. What continues accepted work
 * from another thread is not refused: a coroutine's resume, a lazy join's
 * continuation, an HTTP answer, the connections' and listeners' own steps.
 * Once no job is queued or running — or once @timeout_us has passed — the
 * engine stops as with weft_engine_stop(). Must not be called from a
 * worker of @self. Several threads may stop and shut down the engine at
 * once: a shutdown whose engine another thread stops meanwhile returns
 * once that stop is done.
 *
 * Returns: %TRUE if the engine drained before the deadline (or, when
 *   another thread stopped it first, before that stop began).
 */
gboolean
weft_engine_shutdown (WeftEngine *self, gint64 timeout_us)
{
  g_return_val_if_fail (self != NULL, FALSE);
  if (weft_engine_is_worker_thread (self))
    {
      g_critical ("weft_engine_shutdown: called from a worker of the same engine");
      return FALSE;
    }

  gboolean ok;
  gint64 deadline = timeout_us < 0 ? G_MAXINT64 : g_get_monotonic_time () + timeout_us;

  weft__mutex_lock (&self->lock);
  if (!self->running)
    {
      weft__mutex_unlock (&self->lock);
      return TRUE;
    }
  atomic_store (&self->refusing, 1);
  int drained_here = -1;
  if (self->bridge != NULL)
    {
      /* Nobody may be iterating the GMainContext (the usual case: the main
       * loop has returned): then this thread runs the queued work. */
      weft__mutex_unlock (&self->lock);
      drained_here = weft__gmain_bridge_drain (self, deadline);
      weft__mutex_lock (&self->lock);
    }
  if (drained_here >= 0)
    ok = drained_here;
  else
    /* Workers signal the condition as they go to sleep while refusing; the
     * 10 ms bound covers a worker that slept before the flag was set. A
     * stop from another thread ends the wait: its exiting workers never
     * count as asleep, so drained() would not come true again. */
    while (!(ok = drained (self)) && self->running && !self->joining &&
           g_get_monotonic_time () < deadline)
      weft__cond_wait_until (&self->cond, &self->lock,
                         MIN (deadline, g_get_monotonic_time () + 10 * G_TIME_SPAN_MILLISECOND));
  if (!ok && (self->joining || !self->running))
    {
      /* Stopped (or being stopped) by another thread: wait for that stop,
       * and answer whether the queues had drained when it began. */
      while (self->joining)
        pthread_cond_wait (&self->cond, &self->lock);
      ok = self->stop_drained;
      weft__mutex_unlock (&self->lock);
      return ok;
    }
  weft__mutex_unlock (&self->lock);

  stop (self, ok);
  return ok;
}

/**
 * weft_engine_is_running:
 * @self: an engine
 *
 * Tells whether the engine's workers are running. An engine from
 * weft_engine_new() is running; weft_engine_stop(),
 * weft_engine_shutdown() and the last unref stop it, and
 * weft_engine_start() runs it again. Safe from any thread.
 *
 * Returns: %TRUE between a start and a stop.
 */
gboolean
weft_engine_is_running (WeftEngine *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  weft__mutex_lock (&self->lock);
  gboolean r = self->running;
  weft__mutex_unlock (&self->lock);
  return r;
}

/**
 * weft_engine_get_n_workers:
 * @self: an engine
 *
 * Gets the size of the worker pool, fixed at weft_engine_new() (one per
 * CPU if 0 was given there). It never changes, even while the engine is
 * stopped; see #WeftEngineStats for the workers actually running. Safe
 * from any thread.
 *
 * Returns: the number of worker threads the engine runs when started.
 */
guint
weft_engine_get_n_workers (WeftEngine *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_workers;
}

/**
 * weft_engine_is_worker_thread:
 * @self: an engine
 *
 * Tells whether the calling thread is one of @self's workers, for
 * example to avoid calls that must not be made from a worker of the same
 * engine (weft_engine_stop(), weft_engine_shutdown()). Safe from any
 * thread.
 *
 * For an engine from weft_engine_new_for_main_context(), the thread that
 * dispatches its GMainContext counts as its worker while it runs the
 * engine's callbacks; so does the thread running the callbacks of a
 * context from weft_context_new_for_main_context() on @self.
 *
 * Returns: %TRUE if the calling thread is one of @self's workers.
 */
gboolean
weft_engine_is_worker_thread (WeftEngine *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  WeftWorker *w = weft__worker_current ();
  return w != NULL && w->engine == self;
}

gboolean
weft__engine_refuses_slow (WeftEngine *self)
{
  return atomic_load (&self->dead) || !weft_engine_is_worker_thread (self);
}

void
weft__engine_wake (WeftEngine *self)
{
  /* Only a sleeping worker needs a syscall, and one outstanding wake is
   * enough: the woken worker passes the baton on if more work is queued. */
  if (atomic_load (&self->n_sleeping) > 0 &&
      !atomic_load_explicit (&self->wake_pending, memory_order_relaxed) &&
      !atomic_exchange (&self->wake_pending, 1))
    {
      atomic_fetch_add_explicit (&self->wakeups, 1, memory_order_relaxed);
      weft__eventfd_signal (self->wake_fd);
    }
}

void
weft__engine_enqueue (WeftEngine *self, WeftNode *node, gboolean urgent)
{
  if (G_UNLIKELY (atomic_load_explicit (&self->dead, memory_order_acquire)))
    {
      if (node->kind == WEFT_NODE_JOB)
        weft__job_finish ((WeftJob *) node, FALSE);
      else
        weft__context_run_dropping ((WeftContext *) node);
      return;
    }
  weft__mpsc_push (urgent ? &self->urgent : &self->runq, node);
  weft__engine_wake (self);
  /* The last unref may have set dead and drained between our check and our
   * push: the push is seq_cst, so either it saw our node or we see dead. */
  if (G_UNLIKELY (atomic_load (&self->dead)))
    drop_queued (self, FALSE);
}

void
weft__engine_requeue (WeftEngine *self, WeftNode *node)
{
  if (G_UNLIKELY (atomic_load_explicit (&self->dead, memory_order_acquire)))
    {
      weft__context_run_dropping ((WeftContext *) node);
      return;
    }
  weft__mpsc_push (&self->runq, node);
}

static gboolean
post (WeftEngine *self, WeftJobSlot *slot, WeftJobFunc func, gpointer user_data,
      GDestroyNotify notify, gboolean urgent)
{
  if (G_UNLIKELY (weft__engine_refuses (self)))
    {
      if (notify != NULL)
        notify (user_data);
      return FALSE;
    }
  WeftJob *job = slot != NULL ? weft__job_init_slot (slot, func, user_data, notify, 0)
                              : weft__job_new (func, user_data, notify, 0);
  weft__engine_enqueue (self, &job->node, urgent);
  return TRUE;
}

/**
 * weft_engine_post:
 * @self: an engine
 * @func: (scope notified) (closure user_data) (destroy notify): the job
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data after @func ran, or when the
 *   job is dropped
 *
 * Runs @func on some worker, in parallel with other engine jobs and with
 * contexts: no serialisation. Jobs start in post order but may overlap.
 * Safe to call from any thread; costs no syscall unless a worker sleeps.
 *
 * Returns: %TRUE if queued; %FALSE if the engine refuses work (soft stop
 *   from a foreign thread, or the engine is gone), in which case @notify
 *   has already been called.
 */
gboolean
weft_engine_post (WeftEngine *self, WeftJobFunc func, gpointer user_data, GDestroyNotify notify)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (func != NULL, FALSE);
  return post (self, NULL, func, user_data, notify, FALSE);
}

/**
 * weft_engine_post_front:
 * @self: an engine
 * @func: (scope notified) (closure user_data) (destroy notify): the job
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data after @func ran, or when the
 *   job is dropped
 *
 * Like weft_engine_post(), but the job starts before anything queued with
 * weft_engine_post() and before any context waiting to run: for the
 * latency-critical parts of parallel work. Front jobs keep their order
 * among themselves.
 *
 * Returns: %TRUE if queued; %FALSE as for weft_engine_post().
 */
gboolean
weft_engine_post_front (WeftEngine *self, WeftJobFunc func, gpointer user_data,
                        GDestroyNotify notify)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (func != NULL, FALSE);
  return post (self, NULL, func, user_data, notify, TRUE);
}

/**
 * weft_engine_post_slot: (skip)
 * @self: an engine
 * @slot: a #WeftJobSlot that is not busy, inside memory of yours
 * @func: the job
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data after @func ran, or when the
 *   job is dropped
 *
 * Like weft_engine_post(), but the job is queued in @slot instead of a node
 * the engine allocates: see #WeftJobSlot for when the slot is yours again.
 * Posting a busy slot is a programmer error: the post is refused with a
 * critical warning and @notify is not called.
 *
 * Returns: %TRUE if queued; %FALSE as for weft_engine_post() (then @slot
 *   is not busy and @notify has already been called).
 */
gboolean
weft_engine_post_slot (WeftEngine *self, WeftJobSlot *slot, WeftJobFunc func,
                       gpointer user_data, GDestroyNotify notify)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (slot != NULL, FALSE);
  g_return_val_if_fail (func != NULL, FALSE);
  g_return_val_if_fail (!weft__job_slot_busy (slot), FALSE);
  return post (self, slot, func, user_data, notify, FALSE);
}

/**
 * weft_engine_get_stats:
 * @self: an engine
 * @stats: (out caller-allocates): where to store the counters
 *
 * Reads the engine's counters. Safe from any thread; takes no lock the hot
 * path takes.
 */
void
weft_engine_get_stats (WeftEngine *self, WeftEngineStats *stats)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (stats != NULL);

  memset (stats, 0, sizeof *stats);
  weft__mutex_lock (&self->lock);
  stats->n_workers = self->running ? self->n_workers : 0;
  for (guint i = 0; self->workers != NULL && i < self->n_workers; i++)
    {
      WeftCounters *c = &self->workers[i].counters;
      stats->jobs_run += atomic_load_explicit (&c->jobs_run, memory_order_relaxed);
      stats->polls += atomic_load_explicit (&c->polls, memory_order_relaxed);
      stats->fd_events += atomic_load_explicit (&c->fd_events, memory_order_relaxed);
      stats->timers_fired += atomic_load_explicit (&c->timers_fired, memory_order_relaxed);
    }
  weft__mutex_unlock (&self->lock);
  stats->n_sleeping = (guint) MAX (0, atomic_load (&self->n_sleeping));
  stats->n_contexts = atomic_load (&self->n_contexts);
  stats->wakeups = atomic_load (&self->wakeups);
}

/**
 * weft_engine_stats_copy:
 * @stats: counters
 *
 * Copies counters read with weft_engine_get_stats() to the heap (the
 * boxed type's copy function); free the copy with weft_engine_stats_free().
 *
 * Returns: (transfer full): a copy of @stats
 */
WeftEngineStats *
weft_engine_stats_copy (const WeftEngineStats *stats)
{
  g_return_val_if_fail (stats != NULL, NULL);
  return g_memdup2 (stats, sizeof *stats);
}

/**
 * weft_engine_stats_free:
 * @stats: (transfer full): counters from weft_engine_stats_copy()
 *
 * Frees a copy.
 */
void
weft_engine_stats_free (WeftEngineStats *stats)
{
  g_free (stats);
}
