/* weft-gmain.c: the GLib main-context bridge.
 *
 * Three things, two GSource types:
 *
 * - An engine driven by a GMainContext (weft_engine_new_for_main_context):
 *   no worker threads. A BridgeSource watches the engine's epoll fd (the
 *   wake eventfd, the timerfd, the signalfd and every fd source are in
 *   that set, so the epoll fd turns readable for all of them), takes its
 *   poll timeout from the engine's timer heap, and in dispatch runs turns
 *   of the worker loop body (weft__worker_turn, never blocking) as
 *   workers[0], a bounded number per dispatch. Its prepare announces the
 *   sleep in n_sleeping like a worker does, so a post from another thread
 *   writes the wake eventfd and the epoll fd wakes the GMainContext.
 *
 * - A queue per GMainContext (WeftMainQueue), run by a MainSource attached
 *   to it: a lock-free MPSC of job nodes (weft_main_context_post) and of
 *   the run nodes of bound contexts (weft_context_new_for_main_context).
 *   A bound context is scheduled exactly like any other (its SCHEDULED
 *   bit, its reference), but when claimed it is pushed here instead of on
 *   the engine's run queue, and it runs on the thread iterating the
 *   GMainContext. A readiness or timeout found by a worker takes the same
 *   path: the worker pushes the node into the context's inbox, claims it,
 *   and hands it here instead of running it.
 *
 * - Waking a GMainContext costs one eventfd write, made only when the
 *   queue's consumer may be asleep: 'awake' is cleared by prepare just
 *   before it reports nothing to do, and the first poster that sets it
 *   again writes the eventfd. The queue owns that eventfd (not GLib's
 *   wakeup) so that a worker pushing for a bound context never touches a
 *   GMainContext that may be finalizing under it.
 *
 * Lifetimes. The MainSource holds a queue reference, and so does every
 * bound context. When the GMainContext is finalized, GLib destroys the
 * MainSource: the queue is marked dead, everything in it is dropped (job
 * notifies run, bound contexts drop what they hold), and from then on a
 * push is dropped by its pusher. The engine's BridgeSource holds an
 * internal engine reference, the bridge holds the GMainContext and the
 * attached source until the engine stops.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <errno.h>
#include <unistd.h>

#include "weft-context-private.h"
#include "weft-gmain.h"

/* Per BridgeSource dispatch: at most this many loop turns, and no new turn
 * after this long, so that the GMainContext's other sources (a GTK
 * thread's input and drawing) get their turn. Each turn runs one runnable
 * (a context runs at most 256 nodes) or one poll batch. */
#define BRIDGE_TURNS 64
#define BRIDGE_BUDGET_US 2000
/* Per MainSource dispatch: nodes run (jobs or bound context runs). */
#define MAIN_NODES 256
#define MAIN_BUDGET_US 2000

/* ---- the engine bridge -------------------------------------------------- */

struct _WeftGMainBridge {
  GMainContext *main_context;  /* (owned) */
  WeftMutex lock;
  WeftCond cond;
  GSource *source;             /* HOLDS: lock; (owned) (nullable) attached while running */
  gboolean dispatching;        /* HOLDS: lock; the loop body runs on some thread */
};

/* GLib locks a GMainContext with a futex that ThreadSanitizer cannot see,
 * so whatever GLib allocates on one thread and frees on another (poll
 * records, the source itself) looks racy unless Weft's own atomics order
 * the two. Hence: the pointer to Weft's side is published (release) only
 * after g_source_attach() returned, and the callbacks treat a source that
 * is not published yet as not ready; and a running engine's source is
 * destroyed by the thread iterating the GMainContext (see
 * weft__gmain_bridge_stop()). The same holds for MainSource. */
typedef struct {
  GSource base;
  WeftEngine *_Atomic engine;  /* (owned) internal reference; NULL until attached */
  gpointer tag;                /* the epoll fd's poll record */
} BridgeSource;

static inline WeftEngine *
bridge_engine (GSource *source)
{
  return atomic_load_explicit (&((BridgeSource *) source)->engine, memory_order_acquire);
}

static inline gboolean
runq_nonempty (WeftEngine *e)
{
  return weft__mpsc_nonempty (&e->urgent) || weft__mpsc_nonempty (&e->runq);
}

static gboolean
bridge_prepare (GSource *source, gint *timeout)
{
  WeftEngine *e = bridge_engine (source);

  *timeout = -1;
  if (G_UNLIKELY (e == NULL))
    {
      *timeout = 0; /* being attached: look again */
      return FALSE;
    }
  if (!weft__worker_prepare_sleep (&e->workers[0]))
    {
      *timeout = 0;
      return TRUE;
    }
  /* The timerfd (in the epoll set) wakes the poll too; the timeout makes
   * the GMainContext's own idea of the next deadline right, rounded up so
   * that the poll does not return before the timerfd fires. */
  gint64 wake = weft__timers_next_wake (e);
  if (wake != G_MAXINT64)
    {
      gint64 now = weft__now_ns ();
      if (wake <= now)
        {
          *timeout = 0;
          return TRUE;
        }
      *timeout = (gint) MIN ((wake - now + 999999) / 1000000, G_MAXINT);
    }
  return FALSE;
}

static gboolean
bridge_check (GSource *source)
{
  BridgeSource *bs = (BridgeSource *) source;
  WeftEngine *e = bridge_engine (source);

  if (G_UNLIKELY (e == NULL))
    return FALSE;
  if (g_source_query_unix_fd (source, bs->tag) != 0 || runq_nonempty (e))
    return TRUE;
  return weft__timers_next_wake (e) <= weft__now_ns ();
}

static gboolean
bridge_dispatch (GSource *source, GSourceFunc callback, gpointer user_data)
{
  WeftEngine *e = bridge_engine (source);
  /* Not published yet, yet dispatched: GLib dispatches a source whose fd
   * polled ready even when check() said no, and a restarted engine's
   * epoll fd may be ready already. */
  if (G_UNLIKELY (e == NULL))
    return G_SOURCE_CONTINUE;
  WeftGMainBridge *b = e->bridge;
  WeftWorker *w = &e->workers[0];

  weft__mutex_lock (&b->lock);
  /* GLib may dispatch a source once more after another thread destroyed
   * it: a stopped engine (or one restarted with a new source) is left
   * alone. */
  if (b->source != source)
    {
      weft__mutex_unlock (&b->lock);
      return G_SOURCE_REMOVE;
    }
  /* A stop is waiting for this thread to remove the source (its stop_fd
   * made the epoll fd readable): hand the bridge's reference back and let
   * GLib destroy the source here. */
  if (atomic_load (&e->stopping))
    {
      b->source = NULL;
      weft__cond_broadcast (&b->cond);
      weft__mutex_unlock (&b->lock);
      g_source_unref (source); /* GLib holds one across the dispatch */
      return G_SOURCE_REMOVE;
    }
  b->dispatching = TRUE;
  weft__mutex_unlock (&b->lock);

  weft__worker_end_sleep (w);
  WeftWorker *previous = weft__worker_enter (w);
  /* Due by the clock but the timerfd not seen yet: expire from here. */
  if (weft__timers_next_wake (e) <= weft__now_ns ())
    weft__timers_expire (e, NULL);
  gint64 until = g_get_monotonic_time () + BRIDGE_BUDGET_US;
  for (guint i = 0; i < BRIDGE_TURNS; i++)
    if (atomic_load_explicit (&e->stopping, memory_order_acquire) ||
        !weft__worker_turn (w, FALSE) || g_get_monotonic_time () >= until)
      break;
  weft__worker_leave (previous);

  weft__mutex_lock (&b->lock);
  b->dispatching = FALSE;
  weft__cond_broadcast (&b->cond);
  weft__mutex_unlock (&b->lock);
  /* More to do: the next prepare sees the run queue, or the epoll fd is
   * still readable. */
  return G_SOURCE_CONTINUE;
}

static void
bridge_finalize (GSource *source)
{
  WeftEngine *e = bridge_engine (source);
  if (e != NULL)
    weft__engine_internal_unref (e);
}

static GSourceFuncs bridge_funcs = {
  .prepare = bridge_prepare,
  .check = bridge_check,
  .dispatch = bridge_dispatch,
  .finalize = bridge_finalize,
};

gboolean
weft__gmain_bridge_start (WeftEngine *self, GError **error)
{
  WeftGMainBridge *b = self->bridge;
  GSource *source = g_source_new (&bridge_funcs, sizeof (BridgeSource));
  BridgeSource *bs = (BridgeSource *) source;

  g_source_set_static_name (source, "WeftEngine");
  /* Not published yet, and said so with a store the callbacks' acquire
   * loads can read: the zeroing inside g_source_new() is no such store. */
  atomic_store_explicit (&bs->engine, NULL, memory_order_release);
  bs->tag = g_source_add_unix_fd (source, self->pfd, G_IO_IN);
  WeftEngine *ref = weft__engine_internal_ref (self);
  weft__mutex_lock (&b->lock);
  g_assert (b->source == NULL);
  b->source = source;
  weft__mutex_unlock (&b->lock);
  g_source_attach (source, b->main_context);
  atomic_store_explicit (&bs->engine, ref, memory_order_release); /* see BridgeSource */
  return TRUE;
}

/* How long a stop waits for the thread iterating the GMainContext to
 * remove the source before it destroys the source itself. Only a thread
 * that holds the GMainContext without iterating it (blocked in a callback)
 * makes it wait that long. */
#define STOP_PATIENCE_US (1 * G_USEC_PER_SEC)

void
weft__gmain_bridge_stop (WeftEngine *self)
{
  WeftGMainBridge *b = self->bridge;
  gint64 give_up = g_get_monotonic_time () + STOP_PATIENCE_US;

  /* 'stopping' is set and the stop eventfd written: the epoll fd is
   * readable, so the iterating thread dispatches the source, which then
   * removes itself (GLib's structures stay with that thread). If nobody
   * iterates (or this thread is the one that does, inside another source's
   * callback), acquiring the GMainContext succeeds and the source is
   * destroyed here. */
  weft__mutex_lock (&b->lock);
  while (b->source != NULL)
    {
      gboolean acquired = g_main_context_acquire (b->main_context);
      if (acquired || g_get_monotonic_time () >= give_up)
        {
          GSource *source = b->source;
          b->source = NULL;
          weft__mutex_unlock (&b->lock);
          g_source_destroy (source);
          g_source_unref (source);
          if (acquired)
            g_main_context_release (b->main_context);
          weft__mutex_lock (&b->lock);
          break;
        }
      weft__cond_wait_until (&b->cond, &b->lock,
                             MIN (give_up, g_get_monotonic_time () + 10 * G_TIME_SPAN_MILLISECOND));
    }
  /* A dispatch that started before the destroy finishes its callback and
   * sees 'stopping'. */
  while (b->dispatching)
    pthread_cond_wait (&b->cond, &b->lock);
  weft__mutex_unlock (&b->lock);
}

int
weft__gmain_bridge_drain (WeftEngine *self, gint64 deadline)
{
  WeftGMainBridge *b = self->bridge;
  if (!g_main_context_acquire (b->main_context))
    return -1;

  /* This thread owns the GMainContext, so the source cannot dispatch
   * meanwhile; 'dispatching' makes a concurrent stop wait for us. */
  weft__mutex_lock (&b->lock);
  gboolean running = b->source != NULL;
  b->dispatching = running;
  weft__mutex_unlock (&b->lock);
  int drained = 1;
  if (running)
    {
      WeftWorker *w = &self->workers[0];
      guint spins = 0;
      weft__worker_end_sleep (w);
      WeftWorker *previous = weft__worker_enter (w);
      for (;;)
        {
          /* A hard stop from another thread ends the drain: it waits for
           * us ('dispatching'), and its level-triggered stop fd makes every
           * turn look busy. */
          if (g_get_monotonic_time () >= deadline || atomic_load (&self->stopping))
            {
              drained = 0;
              break;
            }
          if (weft__worker_turn (w, FALSE))
            continue;
          if (!runq_nonempty (self))
            break;
          weft__spin_wait (&spins); /* a post is between its two stores */
        }
      weft__worker_leave (previous);
      weft__mutex_lock (&b->lock);
      b->dispatching = FALSE;
      weft__cond_broadcast (&b->cond);
      weft__mutex_unlock (&b->lock);
    }
  g_main_context_release (b->main_context);
  return drained;
}

void
weft__gmain_bridge_free (WeftGMainBridge *b)
{
  g_assert (b->source == NULL && !b->dispatching);
  g_main_context_unref (b->main_context);
  weft__mutex_clear (&b->lock);
  weft__cond_clear (&b->cond);
  g_free (b);
}

/**
 * weft_engine_new_for_main_context:
 * @main_context: (nullable): the GMainContext to run the engine from;
 *   %NULL for the global default one
 * @error: return location for a #GError
 *
 * Creates an engine with no worker threads, driven by @main_context: a
 * #GSource attached to it watches the engine's epoll set and timers, and
 * every callback of the engine's contexts (fds, timeouts, idles, signals,
 * posted jobs, weft_engine_post() jobs) runs on the thread that iterates
 * @main_context, from that source's dispatch. A dispatch runs a bounded
 * amount of work (64 loop turns or about 2 ms) and then lets the
 * GMainContext's other sources in, so a GTK thread stays responsive.
 *
 * Posting from other threads is safe and wakes @main_context. While it
 * runs the engine's callbacks, the iterating thread counts as the engine's
 * one worker: weft_engine_is_worker_thread() answers %TRUE there, and
 * weft_engine_get_n_workers() is 1. The engine holds a reference on
 * @main_context.
 *
 * weft_engine_stop() destroys the source (waiting for a dispatch running
 * on another thread to return); weft_engine_start() attaches a new one.
 * weft_engine_shutdown() called where @main_context can be acquired (for
 * example on the main thread after the main loop returned) runs the
 * queued work itself; elsewhere it waits for the iterating thread to run
 * it. As for any engine, none of these, nor the last unref, may be called
 * from the engine's own callbacks.
 *
 * Socket writes are made with `MSG_NOSIGNAL`, but TLS connections write
 * through OpenSSL, which can raise SIGPIPE on this thread: a program using
 * TLS on a bridged engine should ignore SIGPIPE, as GIO programs usually
 * do. Signal subscriptions (weft_context_add_signal()) need the signal
 * blocked in every thread, the iterating one included.
 *
 * Returns: (transfer full) (nullable): a running engine, or %NULL with
 *   @error set when epoll, an eventfd or the timerfd could not be had.
 */
WeftEngine *
weft_engine_new_for_main_context (GMainContext *main_context, GError **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  WeftEngine *self = weft__engine_new_unstarted (1, error);
  if (self == NULL)
    return NULL;
  WeftGMainBridge *b = g_new0 (WeftGMainBridge, 1);
  b->main_context = g_main_context_ref (main_context != NULL ? main_context
                                                             : g_main_context_default ());
  weft__mutex_init (&b->lock);
  weft__cond_init (&b->cond);
  self->bridge = b;
  if (!weft_engine_start (self, error))
    {
      weft_engine_unref (self);
      return NULL;
    }
  return self;
}

/* ---- the queue of a GMainContext ------------------------------------------ */

struct _WeftMainQueue {
  WeftMpsc queue;              /* jobs and bound contexts' run nodes */
  /* 1 while the consumer is awake (dispatching, or about to look again)
   * or a wake is on its way; cleared by prepare before it lets the
   * GMainContext sleep. The poster that sets it writes wake_fd. */
  atomic_int awake;
  atomic_int dead;             /* the GMainContext was finalized: drop what comes */
  gint refs;                   /* (atomic) the MainSource, + 1 per bound context */
  int wake_fd;                 /* eventfd, polled by the MainSource */
  /* The consumer right over 'queue': held by the dispatch, and after death
   * by whoever drops. Recursive: a notify run while dropping may push to
   * this queue again (through a bound context) and drop that too. */
  pthread_mutex_t consumer_lock;
  GMainContext *main_context;  /* not owned; the table's key, never dereferenced */
};

typedef struct {
  GSource base;
  WeftMainQueue *_Atomic queue; /* (owned) NULL until attached; see BridgeSource */
  gpointer tag;                 /* the eventfd's poll record */
} MainSource;

/* GMainContext -> WeftMainQueue. A poster must hold a reference on the
 * GMainContext it posts to, so the entry cannot go away under it; what can
 * happen is that a GMainContext is finalized and a new one gets its
 * address. The epoch (bumped under the lock whenever an entry is removed,
 * before GLib frees the GMainContext) tells a thread-local cache that its
 * entry may be stale. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static GHashTable *table;      /* HOLDS: table_lock */
static atomic_uint table_epoch = 1;

static _Thread_local WEFT_TLS_IE GMainContext *tls_key;
static _Thread_local WEFT_TLS_IE WeftMainQueue *tls_queue;
static _Thread_local WEFT_TLS_IE guint tls_epoch;

static inline WeftMainQueue *
main_source_queue (GSource *source)
{
  return atomic_load_explicit (&((MainSource *) source)->queue, memory_order_acquire);
}

static void
queue_unref (WeftMainQueue *q)
{
  if (!g_atomic_int_dec_and_test (&q->refs))
    return;
  g_assert (!weft__mpsc_nonempty (&q->queue));
  close (q->wake_fd);
  pthread_mutex_destroy (&q->consumer_lock);
  g_free (q);
}

void
weft__main_queue_unref (WeftMainQueue *q)
{
  queue_unref (q);
}

/* Runs one node on the GMainContext's thread. */
static void
run_node (WeftNode *n)
{
  if (n->kind == WEFT_NODE_JOB)
    {
      weft__job_finish ((WeftJob *) n, TRUE);
      return;
    }
  WeftContext *ctx = (WeftContext *) n; /* run_node is the first member */
  WeftEngine *e = ctx->engine;
  if (atomic_load (&e->dead))
    {
      /* As weft__engine_enqueue() does for a dead engine. */
      weft__context_run_dropping (ctx);
      return;
    }
  /* Counted nowhere: the engine's counters are its workers'. */
  WeftWorker self = { .engine = e };
  WeftWorker *previous = weft__worker_enter (&self);
  weft__context_run (ctx);
  weft__worker_leave (previous);
}

/* Drops one node: a job's notify, or everything a bound context holds
 * (it stays open; later work is dropped the same way). */
static void
drop_node (WeftNode *n)
{
  if (n->kind == WEFT_NODE_JOB)
    weft__job_finish ((WeftJob *) n, FALSE);
  else
    weft__context_run_dropping ((WeftContext *) n);
}

/* HOLDS: q->consumer_lock, q->dead set. */
static void
drop_all_unlocked (WeftMainQueue *q)
{
  guint spins = 0;
  for (;;)
    {
      WeftNode *n = weft__mpsc_pop (&q->queue);
      if (n != NULL)
        drop_node (n);
      else if (weft__mpsc_nonempty (&q->queue))
        weft__spin_wait (&spins); /* a push is between its exchange and its link */
      else
        break;
    }
}

static void
queue_push (WeftMainQueue *q, WeftNode *n)
{
  weft__mpsc_push (&q->queue, n);
  /* The finalizer stores dead and then drains; we pushed and then look:
   * one of the two sees the other's node. */
  if (G_UNLIKELY (atomic_load (&q->dead)))
    {
      /* Dropping a context may free it, and with it the last reference
       * on @q: hold one across. */
      g_atomic_int_inc (&q->refs);
      pthread_mutex_lock (&q->consumer_lock);
      drop_all_unlocked (q);
      pthread_mutex_unlock (&q->consumer_lock);
      queue_unref (q);
      return;
    }
  /* Pairs with main_prepare(): it clears awake and then looks at the queue;
   * we pushed and then look at awake. */
  if (atomic_load (&q->awake) == 0 && atomic_exchange (&q->awake, 1) == 0)
    weft__eventfd_signal (q->wake_fd);
}

void
weft__main_queue_push_context (WeftMainQueue *q, WeftContext *ctx)
{
  /* Once pushed, the context may run on the GMainContext's thread, be
   * destroyed and release its reference on @q, and the GMainContext be
   * finalized, all before queue_push() looks at dead and awake: its
   * caller holds nothing else that keeps @q (a post to the GMainContext
   * itself holds the GMainContext, and so its source's reference). */
  g_atomic_int_inc (&q->refs);
  queue_push (q, &ctx->run_node);
  queue_unref (q);
}

static gboolean
main_prepare (GSource *source, gint *timeout)
{
  WeftMainQueue *q = main_source_queue (source);

  *timeout = -1;
  if (G_UNLIKELY (q == NULL))
    {
      *timeout = 0; /* being attached: look again */
      return FALSE;
    }
  atomic_store (&q->awake, 0);
  if (weft__mpsc_nonempty (&q->queue))
    {
      atomic_store (&q->awake, 1);
      return TRUE;
    }
  return FALSE;
}

static gboolean
main_check (GSource *source)
{
  WeftMainQueue *q = main_source_queue (source); /* first: orders the reads below */
  MainSource *ms = (MainSource *) source;
  if (G_UNLIKELY (q == NULL))
    return FALSE;
  return g_source_query_unix_fd (source, ms->tag) != 0 || weft__mpsc_nonempty (&q->queue);
}

static gboolean
main_dispatch (GSource *source, GSourceFunc callback, gpointer user_data)
{
  MainSource *ms = (MainSource *) source;
  WeftMainQueue *q = main_source_queue (source);

  /* Awake: posts made from here on (our own jobs' included) need no wake. */
  atomic_store (&q->awake, 1);
  if (g_source_query_unix_fd (source, ms->tag) & G_IO_IN)
    {
      guint64 v;
      while (read (q->wake_fd, &v, sizeof v) < 0 && errno == EINTR)
        ;
    }

  pthread_mutex_lock (&q->consumer_lock);
  gint64 until = g_get_monotonic_time () + MAIN_BUDGET_US;
  guint spins = 0;
  for (guint i = 0; i < MAIN_NODES;)
    {
      WeftNode *n = weft__mpsc_pop (&q->queue);
      if (n == NULL)
        {
          if (!weft__mpsc_nonempty (&q->queue))
            break;
          weft__spin_wait (&spins); /* a push is between its exchange and its link */
          continue;
        }
      run_node (n);
      if ((++i & 15) == 0 && g_get_monotonic_time () >= until)
        break;
    }
  pthread_mutex_unlock (&q->consumer_lock);
  return G_SOURCE_CONTINUE;
}

/* The GMainContext is being finalized (GLib destroys its sources): nothing
 * will run here again. */
static void
main_finalize (GSource *source)
{
  WeftMainQueue *q = main_source_queue (source);
  if (q == NULL)
    return;

  pthread_mutex_lock (&table_lock);
  if (table != NULL && g_hash_table_lookup (table, q->main_context) == q)
    g_hash_table_remove (table, q->main_context);
  atomic_fetch_add (&table_epoch, 1);
  pthread_mutex_unlock (&table_lock);

  pthread_mutex_lock (&q->consumer_lock);
  atomic_store (&q->dead, 1);
  drop_all_unlocked (q);
  pthread_mutex_unlock (&q->consumer_lock);
  queue_unref (q);
}

static GSourceFuncs main_funcs = {
  .prepare = main_prepare,
  .check = main_check,
  .dispatch = main_dispatch,
  .finalize = main_finalize,
};

/* HOLDS: table_lock. NULL if no eventfd could be had. */
static WeftMainQueue *
queue_new_unlocked (GMainContext *main_context)
{
  int fd = weft__eventfd_new ();
  if (fd < 0)
    {
      g_warning ("weft: cannot bridge to a GMainContext: eventfd: %s", g_strerror (-fd));
      return NULL;
    }
  WeftMainQueue *q = g_new0 (WeftMainQueue, 1);
  weft__mpsc_init (&q->queue);
  atomic_init (&q->awake, 0);
  atomic_init (&q->dead, 0);
  q->refs = 1; /* the source's */
  q->wake_fd = fd;
  q->main_context = main_context;
  pthread_mutexattr_t attr;
  pthread_mutexattr_init (&attr);
  pthread_mutexattr_settype (&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init (&q->consumer_lock, &attr);
  pthread_mutexattr_destroy (&attr);

  GSource *source = g_source_new (&main_funcs, sizeof (MainSource));
  MainSource *ms = (MainSource *) source;
  g_source_set_static_name (source, "WeftMainQueue");
  /* (As in weft__gmain_bridge_start().) */
  atomic_store_explicit (&ms->queue, NULL, memory_order_release);
  ms->tag = g_source_add_unix_fd (source, fd, G_IO_IN);
  g_source_attach (source, main_context);
  atomic_store_explicit (&ms->queue, q, memory_order_release); /* see BridgeSource */
  g_source_unref (source); /* the GMainContext keeps it until it is finalized */
  return q;
}

/* The queue of @main_context, created on first use. The caller holds a
 * reference on @main_context. */
static WeftMainQueue *
queue_for (GMainContext *main_context)
{
  guint epoch = atomic_load_explicit (&table_epoch, memory_order_acquire);
  if (G_LIKELY (tls_key == main_context && tls_epoch == epoch))
    return tls_queue;

  pthread_mutex_lock (&table_lock);
  if (table == NULL)
    table = g_hash_table_new (NULL, NULL);
  WeftMainQueue *q = g_hash_table_lookup (table, main_context);
  if (q == NULL && (q = queue_new_unlocked (main_context)) != NULL)
    g_hash_table_insert (table, main_context, q);
  epoch = atomic_load (&table_epoch);
  pthread_mutex_unlock (&table_lock);
  if (q != NULL)
    {
      tls_key = main_context;
      tls_queue = q;
      tls_epoch = epoch;
    }
  return q;
}

/**
 * weft_main_context_post:
 * @main_context: (nullable): where to run @func; %NULL for the global
 *   default GMainContext
 * @func: (scope notified) (closure user_data) (destroy notify): the job
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data after @func ran, or when the
 *   job is dropped
 *
 * Runs @func on the thread that iterates @main_context, from a #GSource of
 * priority %G_PRIORITY_DEFAULT that the first post (or the first
 * weft_context_new_for_main_context()) attaches. Jobs run in post order
 * (so in order per producer), one at a time, interleaved with the
 * callbacks of contexts bound to @main_context. @notify runs right after
 * @func, on that thread.
 *
 * Safe to call from any thread that holds a reference on @main_context,
 * including Weft callbacks (going back is weft_context_post()). It costs a
 * lock-free push, and one eventfd write only when the queue's GSource may
 * be asleep; no GLib lock is taken after the first post to a
 * GMainContext.
 *
 * If @main_context is never iterated again, the job waits. When
 * @main_context is finalized (its last reference dropped), every job still
 * queued is dropped: its @notify runs, @func does not, on the thread that
 * dropped that last reference. The global default GMainContext is never
 * finalized, so jobs posted to it wait for it to be iterated.
 *
 * Returns: %TRUE if queued; %FALSE if no eventfd could be had for the
 *   first post to @main_context (a warning is logged), in which case
 *   @notify has already been called.
 */
gboolean
weft_main_context_post (GMainContext *main_context, WeftJobFunc func, gpointer user_data,
                        GDestroyNotify notify)
{
  g_return_val_if_fail (func != NULL, FALSE);

  WeftMainQueue *q = queue_for (main_context != NULL ? main_context : g_main_context_default ());
  if (G_UNLIKELY (q == NULL))
    {
      if (notify != NULL)
        notify (user_data);
      return FALSE;
    }
  WeftJob *job = weft__job_new (func, user_data, notify, 0);
  queue_push (q, &job->node);
  return TRUE;
}

/**
 * weft_context_new_for_main_context:
 * @engine: the engine that watches the context's fds and timeouts
 * @main_context: (nullable): where the context's callbacks run; %NULL for
 *   the global default GMainContext
 *
 * Creates an inactive context, like weft_context_new(), whose callbacks
 * (posted jobs, fds, timeouts, idles, signals) run on the thread that
 * iterates @main_context instead of on @engine's workers: libdispatch's
 * main queue. Its guarantees are those of any context: one callback at a
 * time, in order, nothing before weft_context_dispatch().
 *
 * @engine's workers still poll its fds and timers; when the context
 * becomes runnable they hand it to a #GSource on @main_context (the one
 * weft_main_context_post() uses) instead of running it. While the
 * context's callbacks run, weft_engine_is_worker_thread() answers %TRUE for
 * @engine on that thread, so connections on it do their I/O there. A
 * dispatch of that source runs at most 256 queued items (about 2 ms),
 * then lets @main_context's other sources in; a context that runs its
 * budget of 256 items goes to the back of the queue.
 *
 * The engine's stop and shutdown do not wait for these callbacks: while
 * @engine is stopped, its fds and timeouts are not watched, but jobs
 * posted to the context still run when @main_context is iterated. Destroy
 * the context before @main_context is finalized: after that, whatever the
 * context has queued or is given is dropped (notifies run, callbacks do
 * not) by the thread that queues it.
 *
 * The caller must hold a reference on @main_context; the context does not
 * keep one.
 *
 * Returns: (transfer full) (nullable): a new context, or %NULL if no
 *   eventfd could be had to wake @main_context (a warning is logged)
 */
WeftContext *
weft_context_new_for_main_context (WeftEngine *engine, GMainContext *main_context)
{
  g_return_val_if_fail (engine != NULL, NULL);
  g_return_val_if_fail (!atomic_load (&engine->dead), NULL);

  WeftMainQueue *q = queue_for (main_context != NULL ? main_context : g_main_context_default ());
  if (q == NULL)
    return NULL;
  g_atomic_int_inc (&q->refs);
  WeftContext *self = weft_context_new (engine);
  /* Published to other threads by weft_context_dispatch()'s release. */
  self->main_queue = q;
  return self;
}
