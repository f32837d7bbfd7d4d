/* weft-context.c: the serial queue. Posting, scheduling, the run loop,
 * destruction.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <sched.h>

#include "weft-context-private.h"

/**
 * WeftContext:
 *
 * A serial job queue on a #WeftEngine that owns fds, timeouts, idle
 * handlers and signal subscriptions. Its callbacks run on the engine's
 * workers, one at a time and in order, so the data it owns needs no lock.
 * Nothing runs before weft_context_dispatch(). Reference-counted; every
 * function is safe from any thread unless its documentation says
 * otherwise.
 */
G_DEFINE_BOXED_TYPE (WeftContext, weft_context, weft_context_ref, weft_context_unref)

/* The layout of WeftContext (see there): for any 16-byte-aligned start,
 * what the runner touches on every node is on other lines than what posts
 * touch. */
#define WEFT_CTX_APART(a, b) (G_STRUCT_OFFSET (WeftContext, b) >= \
                              (G_STRUCT_OFFSET (WeftContext, a) & ~15) + 64)
G_STATIC_ASSERT (WEFT_CTX_APART (back_stub, back_tail));
G_STATIC_ASSERT (G_STRUCT_OFFSET (WeftContext, back_head) > G_STRUCT_OFFSET (WeftContext, state) &&
                 G_STRUCT_OFFSET (WeftContext, back_head) > G_STRUCT_OFFSET (WeftContext, engine) &&
                 G_STRUCT_OFFSET (WeftContext, back_head) > G_STRUCT_OFFSET (WeftContext, max_queued));
G_STATIC_ASSERT (G_STRUCT_OFFSET (WeftContext, back_stub) > G_STRUCT_OFFSET (WeftContext, back_head) &&
                 G_STRUCT_OFFSET (WeftContext, back_tail) < G_STRUCT_OFFSET (WeftContext, front) &&
                 G_STRUCT_OFFSET (WeftContext, front) < G_STRUCT_OFFSET (WeftContext, idles_due) &&
                 G_STRUCT_OFFSET (WeftContext, idles_due) < G_STRUCT_OFFSET (WeftContext, closed));

/* Nodes run before a context yields its worker to other runnables. */
#define RUN_BUDGET 256

static _Thread_local WEFT_TLS_IE WeftContext *tls_current;

static void close_context (WeftContext *self);

/* Takes the engine's ctx_lock, counted as a waiter while it blocks. */
static void
ctx_list_lock (WeftEngine *engine)
{
  if (pthread_mutex_trylock (&engine->ctx_lock) == 0)
    return;
  atomic_fetch_add (&engine->ctx_lock_waiters, 1);
  weft__mutex_lock (&engine->ctx_lock);
  atomic_fetch_sub (&engine->ctx_lock_waiters, 1);
}

/**
 * weft_context_new:
 * @engine: the engine whose workers will run the context
 *
 * Creates an inactive context. Nothing of it runs — no posted job, no fd,
 * no timeout — until weft_context_dispatch(), so the creating thread can
 * add its sources first without racing the first callback.
 *
 * Returns: (transfer full): a new context
 */
WeftContext *
weft_context_new (WeftEngine *engine)
{
  g_return_val_if_fail (engine != NULL, NULL);
  g_return_val_if_fail (!atomic_load (&engine->dead), NULL);
  return weft__context_new_with_tail (engine, 0);
}

WeftContext *
weft__context_new_with_tail (WeftEngine *engine, gsize tail_size)
{
  G_STATIC_ASSERT (sizeof (gpointer) != 8 || WEFT_CONTEXT_TAIL_OFFSET == sizeof (WeftContext));
  WeftContext *self = g_malloc0 (WEFT_CONTEXT_TAIL_OFFSET + tail_size);
  self->run_node.kind = WEFT_NODE_CONTEXT;
  self->ref_count = 1;
  self->internal_refs = 2; /* the public side, and the creator's hold of SCHEDULED */
  self->engine = weft__engine_internal_ref (engine);
  atomic_init (&self->state, WEFT_CTX_SCHEDULED);
  weft__mpsc_init_at (&self->back_head, &self->back_tail, &self->back_stub);
  weft__idmap_init (&self->ids);
  atomic_fetch_add (&engine->n_contexts, 1);
  ctx_list_lock (engine);
  gsize bytes = MIN (WEFT_CONTEXT_TAIL_OFFSET + tail_size, WEFT_RUN_HINT_MAX);
  if (tail_size > 0 && bytes > atomic_load_explicit (&engine->run_hint_bytes, memory_order_relaxed))
    atomic_store_explicit (&engine->run_hint_bytes, (guint) bytes, memory_order_relaxed);
  self->reg_next = engine->contexts;
  if (engine->contexts != NULL)
    engine->contexts->reg_prev = self;
  engine->contexts = self;
  weft__mutex_unlock (&engine->ctx_lock);
  return self;
}

void
weft__context_mark_tail_conn (WeftContext *self)
{
  atomic_fetch_or (&self->state, WEFT_CTX_TAIL_CONN);
}

/* An internal reference unless the last one is gone already (then the
 * context waits for ctx_lock to leave the list). */
static gboolean
context_try_internal_ref (WeftContext *self)
{
  gint n = g_atomic_int_get (&self->internal_refs);
  while (n > 0)
    if (__atomic_compare_exchange_n (&self->internal_refs, &n, n + 1, TRUE, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
      return TRUE;
  return FALSE;
}

/* The walk drops ctx_lock after this many contexts, so that making and
 * freeing contexts (an accept, a connection's end) wait for at most one
 * batch, not for a walk over every idle connection (~1 ms per 10,000). */
#define FOREACH_TAIL_BATCH 256
#define FOREACH_TAIL_YIELD_US 200

void (*weft__foreach_tail_unlocked_hook) (gpointer next_tail);

void
weft__engine_foreach_tail (WeftEngine *engine, void (*func) (gpointer tail, gpointer data),
                           gpointer data)
{
  /* The cursor between batches is the next context to visit, held by an
   * internal reference: a context leaves the list only when its last one
   * goes, so the cursor stays linked while the lock is dropped, and the
   * list before it may change (contexts are added at the head, removed
   * anywhere) without breaking the walk. A context in the list for the
   * whole walk is visited once; one added meanwhile is not. */
  WeftContext *pinned = NULL;
  weft__mutex_lock (&engine->ctx_lock);
  WeftContext *c = engine->contexts;
  for (;;)
    {
      for (guint n = 0; c != NULL && n < FOREACH_TAIL_BATCH; n++, c = c->reg_next)
        if (atomic_load (&c->state) & WEFT_CTX_TAIL_CONN)
          func (weft__context_tail (c), data);
      /* A context whose last reference went cannot be pinned: visit it
       * now, under the lock, as its memory is still there. */
      while (c != NULL && !context_try_internal_ref (c))
        {
          if (atomic_load (&c->state) & WEFT_CTX_TAIL_CONN)
            func (weft__context_tail (c), data);
          c = c->reg_next;
        }
      weft__mutex_unlock (&engine->ctx_lock);
      /* Outside the lock: the last reference frees and unlinks. */
      if (pinned != NULL)
        weft__context_internal_unref (pinned);
      pinned = c;
      if (c == NULL)
        return;
      if (G_UNLIKELY (weft__foreach_tail_unlocked_hook != NULL))
        weft__foreach_tail_unlocked_hook (weft__context_tail (c));
      /* pthread mutexes are not fair: locking again at once would take
       * the lock back before a waiter, being woken, could. Let those
       * blocked now go first (bounded: new ones may keep coming). */
      gint64 until = 0;
      while (atomic_load (&engine->ctx_lock_waiters) != 0)
        {
          gint64 now = g_get_monotonic_time ();
          if (until == 0)
            until = now + FOREACH_TAIL_YIELD_US;
          else if (now >= until)
            break;
          sched_yield ();
        }
      weft__mutex_lock (&engine->ctx_lock);
    }
}

/* When the engine dies: destroys every context still open, so their
 * sources' notifies run (nothing will ever dispatch them again). */
void
weft__engine_destroy_contexts (WeftEngine *engine)
{
  GPtrArray *open = g_ptr_array_new ();
  ctx_list_lock (engine);
  for (WeftContext *c = engine->contexts; c != NULL; c = c->reg_next)
    if (!(atomic_load (&c->state) & WEFT_CTX_CLOSED))
      {
        weft__context_internal_ref (c);
        g_ptr_array_add (open, c);
      }
  weft__mutex_unlock (&engine->ctx_lock);
  for (guint i = 0; i < open->len; i++)
    {
      close_context (open->pdata[i]);
      weft__context_internal_unref (open->pdata[i]);
    }
  g_ptr_array_unref (open);
}

/**
 * weft_context_ref:
 * @self: a context
 *
 * Takes a reference on @self; drop it with weft_context_unref(). Safe
 * from any thread.
 *
 * Returns: (transfer full): @self
 */
WeftContext *
weft_context_ref (WeftContext *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (g_atomic_int_get (&self->ref_count) > 0, NULL);
  g_atomic_int_inc (&self->ref_count);
  return self;
}

/**
 * weft_context_unref:
 * @self: (nullable) (transfer full): a context
 *
 * Drops a reference; the last one destroys the context as
 * weft_context_destroy() does.
 */
void
weft_context_unref (WeftContext *self)
{
  if (self == NULL)
    return;
  if (!g_atomic_int_dec_and_test (&self->ref_count))
    return;
  close_context (self);
  weft__context_internal_unref (self);
}

WeftContext *
weft__context_internal_ref (WeftContext *self)
{
  g_atomic_int_inc (&self->internal_refs);
  return self;
}

void
weft__context_internal_unref (WeftContext *self)
{
  if (!g_atomic_int_dec_and_test (&self->internal_refs))
    return;
  WeftMpscTight *front = atomic_load (&self->front);
  WeftContextSched *sched = atomic_load (&self->sched);
  g_assert ((front == NULL || !weft__mpsc_nonempty (front)) &&
            !weft__context_back_nonempty (self));
  g_assert (weft__idmap_size (&self->ids) == 0);
  g_assert (sched == NULL || (sched->timers.len == 0 && sched->idles == NULL));
  weft__idmap_clear (&self->ids);
  if (sched != NULL)
    {
      weft__heap_clear (&sched->timers);
      g_free (sched);
    }
  g_free (front);
  WeftEngine *engine = self->engine;
  ctx_list_lock (engine);
  if (self->reg_prev != NULL)
    self->reg_prev->reg_next = self->reg_next;
  else
    engine->contexts = self->reg_next;
  if (self->reg_next != NULL)
    self->reg_next->reg_prev = self->reg_prev;
  weft__mutex_unlock (&engine->ctx_lock);
  atomic_fetch_sub (&self->engine->n_contexts, 1);
  if (self->main_queue != NULL)
    weft__main_queue_unref (self->main_queue);
  weft__engine_internal_unref (self->engine);
  g_free (self);
}

WeftContextSched *
weft__context_sched_unlocked (WeftContext *self)
{
  WeftContextSched *sched = atomic_load_explicit (&self->sched, memory_order_relaxed);
  if (G_LIKELY (sched != NULL))
    return sched;
  sched = g_new0 (WeftContextSched, 1);
  weft__heap_init (&sched->timers, G_STRUCT_OFFSET (WeftTimeoutSource, base.heap_index),
                   G_STRUCT_OFFSET (WeftTimeoutSource, heap_seq));
  sched->timers_node.kind = WEFT_NODE_TIMERS;
  sched->idle_node.kind = WEFT_NODE_IDLE;
  sched->timer_link.index = WEFT_HEAP_NONE;
  sched->ctx = self;
  atomic_store_explicit (&self->sched, sched, memory_order_release);
  return sched;
}

/* The post_front queue, made by the first push to it (from any thread: the
 * loser of a race frees its copy). */
static WeftMpscTight *
front_queue (WeftContext *self)
{
  WeftMpscTight *q = atomic_load (&self->front);
  if (G_LIKELY (q != NULL))
    return q;
  WeftMpscTight *mine = g_new (WeftMpscTight, 1);
  weft__mpsc_init (mine);
  if (atomic_compare_exchange_strong (&self->front, &q, mine))
    return mine;
  g_free (mine);
  return q;
}

/* Whether either inbox holds a node (weft__mpsc_nonempty()). The front
 * queue's pointer is read sequentially consistent, like the heads: a
 * poster makes the queue before it pushes and reads the state word. */
static inline gboolean
inbox_nonempty (WeftContext *self)
{
  WeftMpscTight *front = atomic_load (&self->front);
  return (front != NULL && weft__mpsc_nonempty (front)) || weft__context_back_nonempty (self);
}

/* Gives up the consumer right. Returns TRUE if work arrived meanwhile and
 * the right was taken back (the caller keeps running or queues the
 * context); FALSE if released, after which @self may be gone unless the
 * caller holds it otherwise. @has_ref: the right came with a reference of
 * its own, dropped with it (a direct run's does not: see run()). */
static inline gboolean
release_as (WeftContext *self, gboolean has_ref)
{
  atomic_fetch_and (&self->state, ~WEFT_CTX_SCHEDULED);
  /* Pairs with the poster's push-then-load: we store, then look. */
  if (!inbox_nonempty (self))
    {
      if (has_ref)
        weft__context_internal_unref (self);
      return FALSE;
    }
  guint old = atomic_fetch_or (&self->state, WEFT_CTX_SCHEDULED);
  if (old & WEFT_CTX_SCHEDULED)
    {
      if (has_ref)
        weft__context_internal_unref (self); /* the other claimer took its own */
      return FALSE;
    }
  return TRUE;
}

static gboolean
release (WeftContext *self)
{
  return release_as (self, TRUE);
}

/* Hands a claimed context (with the reference SCHEDULED holds) to whoever
 * runs it: the engine's run queue, or for a bound context its
 * GMainContext. */
static inline void
schedule (WeftContext *self, gboolean front)
{
  if (G_UNLIKELY (self->main_queue != NULL))
    weft__main_queue_push_context (self->main_queue, self);
  else
    weft__engine_enqueue (self->engine, &self->run_node, front);
}

void
weft__context_enqueue (WeftContext *self)
{
  schedule (self, FALSE);
}

static inline void
push (WeftContext *self, WeftNode *node, gboolean front, WeftContext **local, gboolean have_ref)
{
  if (front)
    weft__mpsc_push (front_queue (self), node);
  else
    weft__context_back_push (self, node);

  /* Whoever holds SCHEDULED will see the node before releasing (see
   * release()); only an idle context needs claiming. */
  guint s = atomic_load (&self->state);
  if (!(s & WEFT_CTX_SCHEDULED) &&
      !(atomic_fetch_or (&self->state, WEFT_CTX_SCHEDULED) & WEFT_CTX_SCHEDULED))
    {
      /* Claimed: the reference goes with SCHEDULED. */
      if (!have_ref)
        weft__context_internal_ref (self);
      if (local != NULL && *local == NULL && self->main_queue == NULL &&
          !atomic_load_explicit (&self->engine->dead, memory_order_relaxed))
        *local = self;
      else
        schedule (self, front);
      return;
    }
  if (have_ref)
    weft__context_internal_unref (self);
}

void
weft__context_push (WeftContext *self, WeftNode *node, gboolean front, WeftContext **local)
{
  push (self, node, front, local, FALSE);
}

void
weft__context_push_ref (WeftContext *self, WeftNode *node, gboolean front, WeftContext **local)
{
  /* Once the node is in, its consumer may finish with it and drop the last
   * reference before this thread reads the state word: hold one across. */
  weft__context_internal_ref (self);
  push (self, node, front, local, TRUE);
}

static inline WeftNode *
pop (WeftContext *self)
{
  WeftMpscTight *front = atomic_load_explicit (&self->front, memory_order_acquire);
  WeftNode *n = front != NULL ? weft__mpsc_pop (front) : NULL;
  return n ? n : weft__context_back_pop (self);
}

/* Runs or drops one node; @drop when the context is closed or the engine
 * gone. */
static void
process (WeftContext *self, WeftNode *n, gboolean drop)
{
  switch ((WeftNodeKind) n->kind)
    {
    case WEFT_NODE_JOB:
      if (n->flags & WEFT_JOB_COUNTED)
        atomic_fetch_sub (&self->n_queued, 1);
      if (!drop)
        weft__worker_count_job ();
      weft__job_finish ((WeftJob *) n, !drop);
      break;
    case WEFT_NODE_FD:
      weft__fd_source_dispatch (
          (WeftFdSource *) ((char *) n - G_STRUCT_OFFSET (WeftFdSource, node)), drop);
      break;
    case WEFT_NODE_SIGNAL:
      weft__signal_source_dispatch (
          (WeftSignalSource *) ((char *) n - G_STRUCT_OFFSET (WeftSignalSource, node)), drop);
      break;
    case WEFT_NODE_TIMERS:
      atomic_store (&atomic_load (&self->sched)->timers_queued, 0);
      if (!drop)
        weft__timeouts_dispatch (self);
      weft__context_internal_unref (self); /* the engine heap's reference */
      break;
    case WEFT_NODE_IDLE:
      atomic_store (&atomic_load (&self->sched)->idle_queued, 0);
      break;
    default:
      g_assert_not_reached ();
    }
}

/* Whether nothing is linked behind either inbox's tail (weft__mpsc_quiet():
 * the consumer's side only, never the heads the posters exchange). */
static inline gboolean
inbox_quiet (WeftContext *self)
{
  WeftMpscTight *front = atomic_load_explicit (&self->front, memory_order_acquire);
  return (front == NULL || weft__mpsc_quiet (front)) && weft__context_back_quiet (self);
}

/* How long a worker keeps a context whose inboxes ran dry, when it has
 * nothing else to run, and how often it looks at them meanwhile. A producer
 * posting in a stream then finds the context still scheduled: no claim, no
 * run-queue push, no wake-up write (which also gave the woken worker the
 * producer's CPU). Between looks the producer fills lines nobody reads, and
 * the runner takes them as a batch instead of following it job by job.
 * Short against a sleep and wake (~25 us here). */
#define LINGER_NS 10000
#define LOOK_NS 250

/* Waits, with the consumer right kept, for a node to arrive: TRUE when one
 * did, FALSE when the linger is over or something else wants this worker
 * (a runnable on the run queue, a stop, a close). Only on a worker thread
 * of the context's engine (a GMainContext's thread has its own sources to
 * dispatch), and only while another worker sleeps in the poller: that one
 * takes fd readiness and timers meanwhile, and the run queue wakes it. */
/* Whether a lingering worker must let go: it is needed elsewhere. */
static inline gboolean
linger_over (WeftContext *self, WeftEngine *e)
{
  return atomic_load_explicit (&e->n_sleeping, memory_order_relaxed) == 0 ||
         weft__engine_runq_nonempty (e) ||
         atomic_load_explicit (&e->stopping, memory_order_relaxed) ||
         atomic_load_explicit (&self->closed, memory_order_relaxed);
}

static gboolean
linger (WeftContext *self, gint64 *until)
{
  WeftEngine *e = self->engine;

  /* The cheap looks first: with every worker busy (posting to many
   * contexts in turn) this is all a drained context costs. */
  if (linger_over (self, e))
    return FALSE;
  WeftWorker *w = weft__worker_current ();
  if (w == NULL || w->engine != e || e->bridge != NULL || self->main_queue != NULL)
    return FALSE;
  gint64 now = weft__now_ns ();
  if (*until == 0)
    *until = now + LINGER_NS;
  while (now < *until)
    {
      /* A thread waiting for this CPU (on 2 CPUs, often the producer
       * itself) gets it: lingering must not keep out what it waits for. */
      sched_yield ();
      gint64 look = now + LOOK_NS;
      while ((now = weft__now_ns ()) < look)
        weft__cpu_relax ();
      if (!inbox_quiet (self))
        return TRUE;
      if (linger_over (self, e))
        return FALSE;
    }
  return FALSE;
}

/* Runs a claimed context. @direct (nullable): a readiness of one of its fd
 * sources, with the fd table's reference, to run first without passing
 * through the inbox (weft__context_claim_for_fd()). That claim took no
 * reference on the context: the source's registration holds one as long
 * as the source lives, so the fd table's reference on it is kept until the
 * run ends instead (two locked instructions fewer per readiness). */
static inline __attribute__ ((always_inline)) void
run (WeftContext *self, WeftFdSource *direct, guint32 direct_events)
{
  WeftContext *prev = tls_current;
  guint budget = RUN_BUDGET;
  guint spins = 0;
  gint64 linger_until = 0;
  guint stream = 0;   /* jobs posted from outside any context's callbacks,
                       * run since this run began or last lingered */

  /* Back to this after the run: a run nested in a callback (of a
   * GMainContext, say) leaves its caller a time to read again. */
  gint64 time_after = prev != NULL ? WEFT_CB_TIME_UNSET : WEFT_CB_TIME_OFF;

  tls_current = self;
  if (direct != NULL)
    {
      weft__cb_time_set (WEFT_CB_TIME_UNSET); /* a callback starts */
      weft__fd_source_dispatch_direct (direct, direct_events,
                                       atomic_load_explicit (&self->closed, memory_order_relaxed));
      /* (Keeps the fd table's reference: see above.) */
      self->idles_due = TRUE;
      budget--;
    }
  for (;;)
    {
      WeftNode *n = pop (self);
      if (n != NULL)
        {
          gboolean drop = atomic_load_explicit (&self->closed, memory_order_relaxed);
          if (n->kind == WEFT_NODE_JOB && (n->flags & WEFT_JOB_OUTSIDE))
            stream++;
          weft__cb_time_set (WEFT_CB_TIME_UNSET); /* a callback starts */
          process (self, n, drop);
          self->idles_due = TRUE;
          spins = 0;
          linger_until = 0;
          if (--budget == 0)
            {
              /* Keep SCHEDULED and its reference; go to the back of the line.
               * No wake-up: this worker is awake and looks at the queue next,
               * and whatever else is queued already had its wake. */
              tls_current = prev;
              weft__cb_time_set (time_after);
              if (direct != NULL)
                weft__context_internal_ref (self); /* SCHEDULED's, queued */
              if (self->main_queue != NULL)
                weft__main_queue_push_context (self->main_queue, self);
              else
                weft__engine_requeue (self->engine, &self->run_node);
              if (direct != NULL)
                weft__source_unref (&direct->base);
              return;
            }
          continue;
        }
      /* A look that stays off the heads the posters exchange. */
      if (!inbox_quiet (self))
        {
          weft__spin_wait (&spins); /* a producer is between its exchange and its link */
          continue;
        }
      /* When no handler ran (a context that never had one: every readiness
       * of a connection) this thread queued nothing meanwhile, and the
       * looks below see what others did: no pop again first. */
      if (self->idles_due)
        {
          self->idles_due = FALSE;
          if (!(atomic_load (&self->state) & WEFT_CTX_CLOSED) && weft__idles_dispatch (self))
            continue;
        }
      /* Only for a stream from outside: more than one job posted by a
       * thread that runs no context callback (an application thread). A
       * context that got one node (one of many contexts posted to in turn,
       * a lone request) is not being streamed to, and waiting on it only
       * delays the next runnable; nodes from the engine's own threads (fd
       * readiness, timers, posts between contexts) come from a worker that
       * needs no wake-up to reach it, and lingering for them cost an HTTP
       * server 7-9 % more CPU per request on 2 workers. */
      if (stream > 1 && linger (self, &linger_until))
        {
          stream = 0;
          continue;
        }
      /* The exact look, heads included: a push that exchanged but has not
       * linked yet behind the stub. */
      if (inbox_nonempty (self))
        {
          weft__spin_wait (&spins);
          continue;
        }
      tls_current = prev;
      weft__cb_time_set (time_after);
      if (!release_as (self, direct == NULL))
        {
          if (direct != NULL)
            weft__source_unref (&direct->base); /* (@self may go with it) */
          return;
        }
      tls_current = self;
    }
}

void
weft__context_run (WeftContext *self)
{
  run (self, NULL, 0);
}

/* An idle context is claimed here for one readiness, which then runs at
 * once on this worker (weft__context_run_fd()). The queued way costs a
 * push and a pop on the context's inbox and, for all but one context of a
 * poll batch, on the engine's run queue: eight locked instructions more
 * per readiness (with the queued flag and a context reference), at ~10 ns
 * each on these machines. Not taken for a context
 * that is held (running, queued, not yet dispatched: its holder will see
 * the node in the inbox), runs on a GMainContext, or belongs to a dead
 * engine; nor while @src has a node in the inbox (a readiness then joins
 * it, as before, instead of overtaking it). */
gboolean
weft__context_claim_for_fd (WeftFdSource *src)
{
  WeftContext *self = src->base.ctx;
  if (self->main_queue != NULL ||
      atomic_load_explicit (&self->engine->dead, memory_order_relaxed) ||
      (atomic_load_explicit (&src->revents, memory_order_relaxed) & WEFT_FD_QUEUED))
    return FALSE;
  /* The same claim as push()'s; the reference that goes with it is the
   * caller's on @src (see run()). */
  return !(atomic_load (&self->state) & WEFT_CTX_SCHEDULED) &&
         !(atomic_fetch_or (&self->state, WEFT_CTX_SCHEDULED) & WEFT_CTX_SCHEDULED);
}

void
weft__context_run_fd (WeftFdSource *src, guint32 events)
{
  run (src->base.ctx, src, events);
}

void
weft__context_run_dropping (WeftContext *self)
{
  guint spins = 0;

  do
    {
      WeftNode *n;
      while ((n = pop (self)) != NULL || inbox_nonempty (self))
        if (n != NULL)
          process (self, n, TRUE);
        else
          weft__spin_wait (&spins);
    }
  while (release (self));
}

/**
 * weft_context_dispatch:
 * @self: a context from weft_context_new()
 *
 * Activates @self: from now on its callbacks run on the engine's workers,
 * starting with whatever queued up since creation. Call it once, from the
 * creating thread, after adding the first sources.
 */
void
weft_context_dispatch (WeftContext *self)
{
  g_return_if_fail (self != NULL);
  guint old = atomic_fetch_or (&self->state, WEFT_CTX_ACTIVE);
  if (old & WEFT_CTX_CLOSED)
    return; /* destroyed before dispatch: the closer drains it */
  g_return_if_fail (!(old & WEFT_CTX_ACTIVE));
  if (release (self))
    weft__context_enqueue (self);
}

/**
 * weft_context_destroy:
 * @self: a context
 *
 * Closes @self: every source is removed (their destroy notifies run once
 * each, never beside a callback of @self: here if none runs or waits to,
 * else on its worker after the running callback returns), every
 * queued job is dropped (its notify runs, its function does not), and from
 * now on posts return %FALSE and weft_context_add_timeout() and friends
 * return 0. Safe from any thread, including from @self's own callbacks.
 * Jobs queued on a dispatched context are dropped by the worker that next
 * runs it, so their notifies may run shortly after this returns. Does not
 * drop a reference.
 */
void
weft_context_destroy (WeftContext *self)
{
  g_return_if_fail (self != NULL);
  close_context (self);
}

/* Runs the notifies of the sources in @data (a GPtrArray close_context()
 * took them into) and frees it. */
static void
finalize_now (gpointer data)
{
  GPtrArray *finalize = data;
  for (guint i = 0; i < finalize->len; i++)
    weft__source_finalize (finalize->pdata[i]);
  g_ptr_array_unref (finalize);
}

static void
finalize_job (gpointer data)
{
  /* (Never run: the context is closed, so the job is dropped, and its
   * notify, finalize_now(), does the work.) */
}

/* The sources of a closing context go with their notifies, which must not
 * run beside a callback of the context that may be running on a worker
 * right now (a job, another source's): a connection's closes the
 * connection such a callback is using. If nobody holds the context (no
 * callback runs, none is queued to), claim it and finalize here; else the
 * finalization is a job, which whoever holds it drops (running its
 * notify) once its callback returns, or at once if none runs. */
static void
finalize_sources (WeftContext *self, GPtrArray *finalize)
{
  weft__context_internal_ref (self); /* SCHEDULED's, if we get it */
  guint old = atomic_fetch_or (&self->state, WEFT_CTX_SCHEDULED);
  if (!(old & WEFT_CTX_SCHEDULED))
    {
      finalize_now (finalize);
      if (release (self))
        schedule (self, FALSE); /* nodes came meanwhile: dropped by a worker */
      return;
    }
  weft__context_internal_unref (self);
  WeftJob *job = weft__job_new (finalize_job, finalize, finalize_now, 0);
  weft__context_push_ref (self, &job->node, FALSE, NULL);
}

static void
close_context (WeftContext *self)
{
  /* The runner's copy, set first: whoever sees CLOSED in the state word
   * (weft_context_is_destroyed()) and then lets a callback return knows
   * the runner drops the next node. Set after it, a runner could read
   * the copy still clear while a destroy was under way and run a node
   * queued behind the callback (/context/destroy-while-running, TSan). */
  atomic_store (&self->closed, TRUE);
  guint old = atomic_fetch_or (&self->state, WEFT_CTX_CLOSED);
  if (old & WEFT_CTX_CLOSED)
    return;

  GPtrArray *all = g_ptr_array_new ();
  GPtrArray *finalize = g_ptr_array_new ();
  weft__lock_acquire (weft__context_lock (self));
  weft__idmap_steal_all (&self->ids, all);
  for (guint i = 0; i < all->len; i++)
    {
      WeftSource *src = all->pdata[i];
      if (weft__source_mark_removed (src))
        weft__source_unwatch_running_unlocked (src);
      else if (weft__source_detach_unlocked (src))
        g_ptr_array_add (finalize, src);
    }
  weft__lock_release (weft__context_lock (self));
  /* After the locked section: every schedule happens under the lock after a
   * CLOSED check, so none can follow this. */
  weft__timers_unschedule_context (self->engine, self);
  if (finalize->len > 0)
    finalize_sources (self, finalize);
  else
    g_ptr_array_unref (finalize);
  g_ptr_array_unref (all);

  /* Before dispatch the creator's hold makes this thread the consumer:
   * mark the context active and drain it here, which also gives up the
   * hold. Afterwards the worker holding SCHEDULED drops what is queued. */
  if (!(old & WEFT_CTX_ACTIVE))
    {
      atomic_fetch_or (&self->state, WEFT_CTX_ACTIVE);
      weft__context_run_dropping (self);
    }
}

/**
 * weft_context_is_destroyed:
 * @self: a context
 *
 * Tells whether @self is closed: once it is, posts are refused and no
 * source can be added. Safe from any thread; a %FALSE may be stale by the
 * time it is read if another thread destroys @self concurrently.
 *
 * Returns: %TRUE once weft_context_destroy() or the last unref closed @self.
 */
gboolean
weft_context_is_destroyed (WeftContext *self)
{
  g_return_val_if_fail (self != NULL, TRUE);
  return (atomic_load (&self->state) & WEFT_CTX_CLOSED) != 0;
}

/**
 * weft_context_get_engine:
 * @self: a context
 *
 * Gets the engine given to weft_context_new(). No reference is added:
 * take one with weft_engine_ref() to keep the engine. Safe from any
 * thread.
 *
 * Returns: (transfer none): the engine that runs @self
 */
WeftEngine *
weft_context_get_engine (WeftContext *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->engine;
}

/**
 * weft_context_get_current:
 *
 * Finds the context running the calling code: inside a job, fd, timeout,
 * idle or signal callback of a context (or a coroutine it runs), that
 * context; anywhere else, such as a job from weft_engine_post() or a
 * thread of your own, %NULL. The context is not referenced.
 *
 * Returns: (transfer none) (nullable): the context whose callback is
 *   running on this thread, or %NULL outside context callbacks
 */
WeftContext *
weft_context_get_current (void)
{
  return tls_current;
}

/* Whether a post to @self must be refused: @self is closed, or its engine
 * refuses new work (a soft stop, from a foreign thread) or is gone. An
 * internal post (@continuation: the rest of work already accepted, such as
 * a coroutine's resume) is refused only for the first and the last. */
static inline gboolean
post_refused (WeftContext *self, gboolean continuation)
{
  if (atomic_load_explicit (&self->state, memory_order_relaxed) & WEFT_CTX_CLOSED)
    return TRUE;
  return continuation ? atomic_load (&self->engine->dead) : weft__engine_refuses (self->engine);
}

static gboolean
post_full (WeftContext *self, WeftJobSlot *slot, WeftJobFunc func, gpointer user_data,
           GDestroyNotify notify, gboolean front, gboolean bounded, gboolean continuation,
           GError **error)
{
  if (G_UNLIKELY (post_refused (self, continuation)))
    {
      g_set_error_literal (error, WEFT_ERROR, WEFT_ERROR_CLOSED,
                           "the context is destroyed or its engine refuses work");
      if (notify != NULL)
        notify (user_data);
      return FALSE;
    }

  /* Marks the jobs a runner may linger for (see linger()). */
  guint32 flags = tls_current == NULL ? WEFT_JOB_OUTSIDE : 0;
  if (self->max_queued > 0)
    {
      if (!bounded)
        atomic_fetch_add (&self->n_queued, 1);
      else
        {
          /* Counted only if taken: an add undone on refusal made the
           * count pass the bound for a moment, so a try_post racing with
           * it could be refused while the queue had room. */
          guint n = atomic_load_explicit (&self->n_queued, memory_order_relaxed);
          do
            {
              if (n >= self->max_queued)
                {
                  g_set_error (error, WEFT_ERROR, WEFT_ERROR_QUEUE_FULL,
                               "the context already has %u jobs queued", self->max_queued);
                  if (notify != NULL)
                    notify (user_data);
                  return FALSE;
                }
            }
          while (!atomic_compare_exchange_weak (&self->n_queued, &n, n + 1));
        }
      flags |= WEFT_JOB_COUNTED;
    }

  WeftJob *job = slot != NULL ? weft__job_init_slot (slot, func, user_data, notify, flags)
                              : weft__job_new (func, user_data, notify, flags);
  weft__context_push (self, &job->node, front, NULL);
  return TRUE;
}

static inline __attribute__ ((always_inline)) gboolean
post (WeftContext *self, WeftJobSlot *slot, WeftJobFunc func, gpointer user_data,
      GDestroyNotify notify, gboolean front, gboolean bounded, GError **error)
{
  return post_full (self, slot, func, user_data, notify, front, bounded, FALSE, error);
}

gboolean
weft__context_post_continuation (WeftContext *self, WeftJobFunc func, gpointer user_data,
                                 GDestroyNotify notify)
{
  return post_full (self, NULL, func, user_data, notify, FALSE, FALSE, TRUE, NULL);
}

/**
 * weft_context_post:
 * @self: a context
 * @func: (scope notified) (closure user_data) (destroy notify): the job
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data after @func ran, or when the
 *   job is dropped
 *
 * Runs @func on @self after every job posted before it; callbacks of one
 * context never overlap. Safe to call from any thread; lock-free, and no
 * syscall unless a worker must be woken.
 *
 * Returns: %TRUE if queued; %FALSE if @self is destroyed or its engine
 *   refuses work, in which case @notify has already been called.
 */
gboolean
weft_context_post (WeftContext *self, WeftJobFunc func, gpointer user_data,
                   GDestroyNotify notify)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (func != NULL, FALSE);
  return post (self, NULL, func, user_data, notify, FALSE, FALSE, NULL);
}

/**
 * weft_context_post_front:
 * @self: a context
 * @func: (scope notified) (closure user_data) (destroy notify): the job
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data after @func ran, or when the
 *   job is dropped
 *
 * Like weft_context_post(), but @func runs before every job queued with
 * weft_context_post() and not yet started; front jobs keep their order
 * among themselves. If @self was idle it is also queued ahead of other
 * contexts.
 *
 * Returns: %TRUE if queued; %FALSE as for weft_context_post().
 */
gboolean
weft_context_post_front (WeftContext *self, WeftJobFunc func, gpointer user_data,
                         GDestroyNotify notify)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (func != NULL, FALSE);
  return post (self, NULL, func, user_data, notify, TRUE, FALSE, NULL);
}

/**
 * weft_context_post_slot: (skip)
 * @self: a context
 * @slot: a #WeftJobSlot that is not busy, inside memory of yours
 * @func: the job
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data after @func ran, or when the
 *   job is dropped
 *
 * Like weft_context_post(), but the job is queued in @slot instead of a
 * node the library allocates: no allocation and no free, and nothing
 * shared with other threads' posts but the queue itself. See #WeftJobSlot
 * for when the slot is yours again. A bound set with
 * weft_context_set_max_queued() counts the job but never refuses it.
 * Posting a busy slot is a programmer error: the post is refused with a
 * critical warning and @notify is not called.
 *
 * Returns: %TRUE if queued; %FALSE as for weft_context_post() (then @slot
 *   is not busy and @notify has already been called).
 */
gboolean
weft_context_post_slot (WeftContext *self, WeftJobSlot *slot, WeftJobFunc func,
                        gpointer user_data, GDestroyNotify notify)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (slot != NULL, FALSE);
  g_return_val_if_fail (func != NULL, FALSE);
  g_return_val_if_fail (!weft__job_slot_busy (slot), FALSE);
  return post (self, slot, func, user_data, notify, FALSE, FALSE, NULL);
}

/**
 * weft_context_try_post:
 * @self: a context
 * @func: (scope notified) (closure user_data) (destroy notify): the job
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data after @func ran, or when the
 *   job is dropped or refused
 * @error: return location for a #GError
 *
 * Like weft_context_post(), but refuses the job when @self already holds
 * the number of jobs set with weft_context_set_max_queued(): the
 * producer's signal to slow down.
 *
 * Returns: %TRUE if queued; %FALSE with %WEFT_ERROR_QUEUE_FULL or
 *   %WEFT_ERROR_CLOSED, after calling @notify.
 */
gboolean
weft_context_try_post (WeftContext *self, WeftJobFunc func, gpointer user_data,
                       GDestroyNotify notify, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (func != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return post (self, NULL, func, user_data, notify, FALSE, TRUE, error);
}

/**
 * weft_context_set_max_queued:
 * @self: a context, not yet dispatched
 * @max_queued: the bound; 0 for none (the default)
 *
 * Bounds the jobs queued on @self for weft_context_try_post(). Jobs from
 * weft_context_post() are counted but never refused. Counting costs an
 * atomic add per post, so it is only done for bounded contexts; set the
 * bound before weft_context_dispatch(), and before any other thread may
 * post to @self (the bound is read by every post without a lock).
 */
void
weft_context_set_max_queued (WeftContext *self, guint max_queued)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (!(atomic_load (&self->state) & WEFT_CTX_ACTIVE));
  self->max_queued = max_queued;
}

/**
 * weft_context_get_max_queued:
 * @self: a context
 *
 * Gets the bound weft_context_try_post() enforces on the jobs queued on
 * @self. Safe from any thread once the bound is set (see
 * weft_context_set_max_queued()).
 *
 * Returns: the bound from weft_context_set_max_queued(), 0 for none
 */
guint
weft_context_get_max_queued (WeftContext *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->max_queued;
}
