/* weft-engine-private.h: what context/ may use of the engine.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <errno.h>
#include <stdatomic.h>
#include <glib.h>
#include "weft-types.h"
#include "weft-engine.h"
#include "weft-mpsc.h"
#include "weft-lock.h"
#include "weft-mutex.h"
#include "weft-spin.h"

G_BEGIN_DECLS

/* An internal interest bit beside GIOCondition's: the peer shut down its
 * sending side (EPOLLRDHUP alone, without EPOLLIN), reported as G_IO_IN. */
#define WEFT__IO_RDHUP ((GIOCondition) (1 << 8))
/* Given to weft__context_add_fd() only: register edge-triggered instead of
 * one-shot, for an owner that reads until the socket is drained and
 * tracks that itself (WeftConnection). It saves the re-arm syscall per
 * readiness; interest changes still take one. */
#define WEFT__IO_EDGE ((GIOCondition) (1 << 9))

/* The library's thread-locals are few and small (about 300 bytes, most
 * of it the request spares): initial-exec keeps their access a single
 * %fs-relative load instead of a __tls_get_addr call. */
#define WEFT_TLS_IE __attribute__ ((tls_model ("initial-exec")))

/* ---- jobs ------------------------------------------------------------ */

/* A posted job. Nodes come from a per-thread cache (weft-cache.c) so a
 * post costs no malloc; they may be freed on any thread. 32 bytes, two to
 * a cache line, none across two: a job with a destroy notify is a
 * WeftJobNotify (WEFT_JOB_NOTIFY), from a cache of its own. */
typedef struct {
  WeftNode node;
  WeftJobFunc func;
  gpointer user_data;
} WeftJob;

typedef struct {
  WeftJob job;
  GDestroyNotify notify;
} WeftJobNotify;

enum {
  WEFT_JOB_COUNTED = 1 << 0, /* counted in its context's n_queued */
  WEFT_JOB_OUTSIDE = 1 << 1, /* posted from outside every context's callbacks */
  WEFT_JOB_NOTIFY = 1 << 2,  /* a WeftJobNotify */
  WEFT_JOB_SLOT = 1 << 3,    /* in a caller's WeftJobSlot: never freed; the flags
                              * go back to 0 when the job starts or is dropped */
};

/* g_aligned_alloc() and g_aligned_alloc0() without their side effect on
 * errno: GLib stores posix_memalign()'s result there, 0 on success, and
 * the caller's errno must survive a library call that succeeds (a
 * coroutine keeps its errno across a wait, whose timeout may be the first
 * object of a new cache region). */
static inline gpointer
weft__aligned_alloc (gsize n_blocks, gsize n_block_bytes, gsize alignment, gboolean zeroed)
{
  int saved = errno;
  gpointer p = zeroed ? g_aligned_alloc0 (n_blocks, n_block_bytes, alignment)
                      : g_aligned_alloc (n_blocks, n_block_bytes, alignment);
  errno = saved;
  return p;
}

/* Fixed-size object caches (weft-cache.c). */
typedef enum {
  WEFT_CACHE_JOB,
  WEFT_CACHE_JOB_NOTIFY,
  WEFT_CACHE_TIMEOUT,
  WEFT_CACHE_N
} WeftCacheKind;

/* A thread's free objects of one class (weft-cache.c): an array of
 * pointers, not a list linked through the objects, so that taking one
 * does not read it. Recycled objects were last written by another CPU (the
 * worker that ran and freed a job); a list's pop waited for that line on
 * every post, and could ask for the next one only one object ahead. */
#define WEFT_CACHE_MAG 256
/* How many allocations ahead the line of an object is asked for. */
#define WEFT_CACHE_AHEAD 4

typedef struct {
  guint n;               /* this thread only: objects in objs */
  WeftCacheKind kind;
  gpointer objs[2 * WEFT_CACHE_MAG];
} WeftCache;

/* The thread's caches; NULL until its first allocation of the class, and
 * always NULL where the cache is off (ASan, Valgrind). */
extern _Thread_local WEFT_TLS_IE WeftCache *weft__tls_caches[WEFT_CACHE_N];

gpointer weft__cache_alloc_slow (WeftCacheKind kind);
void weft__cache_free (WeftCacheKind kind, gpointer object);

/* Inline: a post is a few dozen instructions, and a call that saves and
 * restores the slow path's registers was a sizeable part of them. */
static inline gpointer
weft__cache_alloc (WeftCacheKind kind)
{
  WeftCache *c = weft__tls_caches[kind];
  if (G_UNLIKELY (c == NULL || c->n == 0))
    return weft__cache_alloc_slow (kind);
  guint n = --c->n;
  /* Ask for the line of the object taken WEFT_CACHE_AHEAD allocations from
   * now, so that it has arrived by then. */
  if (G_LIKELY (n >= WEFT_CACHE_AHEAD))
    __builtin_prefetch (c->objs[n - WEFT_CACHE_AHEAD], 1);
  return c->objs[n];
}

/* Spares per thread (weft-cache.c): the last objects freed of a kind taken
 * and freed once per request, for the thread's next ones (no malloc and
 * free, and lines still in cache). Requests keep up to 16: a read of
 * pipelined requests holds that many before one flush answers them, and
 * glibc's thread cache keeps only 7 of a size; a write chunk keeps one.
 * A thread that only frees (a handler's own thread) may keep them until
 * it exits. Objects are g_malloc'd blocks of one size per kind; a
 * thread's spares are g_free'd when it exits. Off under ASan and
 * Valgrind, where a kept object would hide a use after free. */
typedef enum {
  WEFT_SPARE_HTTP_REQUEST, /* a one-allocation WeftHttpRequest */
  WEFT_SPARE_WRITE_CHUNK,  /* a connection's small copy chunk */
} WeftSpareKind;

#define WEFT_SPARE_REQUESTS 16

extern _Thread_local WEFT_TLS_IE gpointer weft__spare_requests[WEFT_SPARE_REQUESTS];
extern _Thread_local WEFT_TLS_IE guint weft__spare_requests_n;
extern _Thread_local WEFT_TLS_IE gpointer weft__spare_chunk;
extern _Thread_local WEFT_TLS_IE gboolean weft__spares_on; /* registered for exit */
gboolean weft__spares_register (void);

/* A spare of @kind kept by the thread, or NULL. */
static inline gpointer
weft__spare_take (WeftSpareKind kind)
{
  gpointer object;
  if (kind == WEFT_SPARE_WRITE_CHUNK)
    {
      object = weft__spare_chunk;
      weft__spare_chunk = NULL;
      return object;
    }
  if (weft__spare_requests_n == 0)
    return NULL;
  return weft__spare_requests[--weft__spare_requests_n];
}

/* Keeps @object as a spare of @kind; FALSE if the thread keeps enough
 * (or spares are off): then the caller frees it. */
static inline gboolean
weft__spare_keep (WeftSpareKind kind, gpointer object)
{
  gboolean full = kind == WEFT_SPARE_WRITE_CHUNK ? weft__spare_chunk != NULL
                                                 : weft__spare_requests_n == WEFT_SPARE_REQUESTS;
  if (full || (G_UNLIKELY (!weft__spares_on) && !weft__spares_register ()))
    return FALSE;
  if (kind == WEFT_SPARE_WRITE_CHUNK)
    weft__spare_chunk = object;
  else
    weft__spare_requests[weft__spare_requests_n++] = object;
  return TRUE;
}

/* A job node with @func, @user_data and @notify (nullable) set, and the
 * WEFT_JOB_* @flags. */
static inline WeftJob *
weft__job_new (WeftJobFunc func, gpointer user_data, GDestroyNotify notify, guint32 flags)
{
  WeftJob *j;
  if (notify != NULL)
    {
      WeftJobNotify *jn = (WeftJobNotify *) weft__cache_alloc (WEFT_CACHE_JOB_NOTIFY);
      jn->notify = notify;
      j = &jn->job;
      flags |= WEFT_JOB_NOTIFY;
    }
  else
    j = (WeftJob *) weft__cache_alloc (WEFT_CACHE_JOB);
  j->node.kind = WEFT_NODE_JOB;
  j->node.flags = flags;
  j->func = func;
  j->user_data = user_data;
  return j;
}
void weft__job_free (WeftJob *job);
/* Fills @slot (which must not be busy) as a job node and marks it busy.
 * A slot is a WeftJobNotify in the caller's memory (sizes checked in
 * weft-cache.c). */
static inline WeftJob *
weft__job_init_slot (WeftJobSlot *slot, WeftJobFunc func, gpointer user_data,
                     GDestroyNotify notify, guint32 flags)
{
  WeftJobNotify *jn = (WeftJobNotify *) slot;
  jn->notify = notify;
  jn->job.node.kind = WEFT_NODE_JOB;
  jn->job.node.flags = flags | WEFT_JOB_SLOT | (notify != NULL ? WEFT_JOB_NOTIFY : 0);
  jn->job.func = func;
  jn->job.user_data = user_data;
  return &jn->job;
}
/* Whether @slot holds a queued job (its job has neither started nor been
 * dropped). */
static inline gboolean
weft__job_slot_busy (const WeftJobSlot *slot)
{
  const WeftNode *node = (const WeftNode *) slot;
  return __atomic_load_n (&node->flags, __ATOMIC_ACQUIRE) != 0;
}
/* Runs the job (or only its notify when @run is FALSE), then frees it. */
void weft__job_finish (WeftJob *job, gboolean run);

/* ---- the poller (weft-poll-epoll.c) ---------------------------------- */

/* Keys below this are the engine's own fds; fd sources use slot keys. */
enum {
  WEFT_KEY_WAKE = 1,
  WEFT_KEY_STOP,
  WEFT_KEY_TIMER,
  WEFT_KEY_SIGNAL,
  WEFT_KEY_FIRST_SLOT = 16,
};

typedef struct {
  guint64 key;
  guint32 events;   /* EPOLL* bits */
} WeftPollEvent;

int weft__poll_create (void);
int weft__poll_add (int pfd, int fd, guint32 events, guint64 key, gboolean oneshot);
int weft__poll_modify (int pfd, int fd, guint32 events, guint64 key, gboolean oneshot);
int weft__poll_remove (int pfd, int fd);
/* The most events one weft__poll_wait() returns: the size of the workers'
 * event arrays and of the batches handle_events() hints and pushes. */
#define WEFT_POLL_BATCH 64
int weft__poll_wait (int pfd, WeftPollEvent *events, int max, int timeout_ms);
guint32 weft__poll_events_from_condition (GIOCondition cond);
GIOCondition weft__poll_condition_from_events (guint32 events);
int weft__eventfd_new (void);
void weft__eventfd_signal (int fd);

/* ---- the fd table (weft-fdtable.c) ------------------------------------ */

/* Maps the 64-bit epoll key (slot index + generation) to a live fd source,
 * so a readiness returned by epoll_wait for a source removed meanwhile is
 * recognised as stale instead of touching freed memory. */
typedef struct _WeftFdTable WeftFdTable;
typedef struct _WeftFdSource WeftFdSource;

WeftFdTable *weft__fdtable_new (void);
void weft__fdtable_free (WeftFdTable *table);
guint64 weft__fdtable_insert (WeftFdTable *table, WeftFdSource *source);
void weft__fdtable_clear (WeftFdTable *table, guint64 key);
/* Sets @src[i] to the source of @ev[i] with a new reference taken, or to
 * NULL for the engine's own keys and stale ones; @n is at most
 * WEFT_POLL_BATCH. A batch of more than one is looked up with cache hints,
 * for the sources and for what pushing their readiness touches. */
void weft__fdtable_lookup_batch (WeftFdTable *table, WeftEngine *engine, const WeftPollEvent *ev,
                                 int n, WeftFdSource **src);

/* ---- 4-ary min-heap of (deadline, owner) ------------------------------ */

/* Every item a heap holds keeps two fields of it, at offsets the heap is
 * given: its slot (a guint, WEFT_HEAP_NONE when in no heap), so that
 * removal is O(log n), and its insertion number (a guint64), which orders
 * equal deadlines FIFO. The number is read only on ties, so it lives in
 * the item and not in the entry. WeftHeapLink has both, for items with no
 * better place for them. */
typedef struct {
  guint64 seq;
  guint index;
} WeftHeapLink;

/* 16 bytes with the deadline inline: the four children of a node share
 * one cache line, and comparing them touches no item. */
typedef struct {
  gint64 deadline;   /* ns, CLOCK_MONOTONIC */
  gpointer item;
} WeftHeapEntry;

typedef struct {
  WeftHeapEntry *v;  /* v[0] is the root; the children of i are 4i+1 .. 4i+4 */
  WeftHeapEntry *block; /* the allocation; v is a few entries into it */
  guint len, cap;
  guint64 next_seq;
  guint16 index_offset; /* where each item keeps its slot */
  guint16 seq_offset;   /* and its insertion number */
} WeftHeap;

#define WEFT_HEAP_NONE G_MAXUINT

void weft__heap_init (WeftHeap *heap, gsize index_offset, gsize seq_offset);
#define weft__heap_init_link(heap, type, member)                                          \
  weft__heap_init ((heap), G_STRUCT_OFFSET (type, member.index), G_STRUCT_OFFSET (type, member.seq))
void weft__heap_clear (WeftHeap *heap);
void weft__heap_insert (WeftHeap *heap, gint64 deadline, gpointer item);
void weft__heap_remove (WeftHeap *heap, guint index);
static inline WeftHeapEntry *
weft__heap_peek (WeftHeap *heap)
{
  return heap->len ? &heap->v[0] : NULL;
}

gint64 weft__now_ns (void);

/* The time timeouts count from (see weft_context_add_timeout()). Outside
 * context callbacks (WEFT_CB_TIME_OFF) every add reads the clock. A context
 * run sets it to WEFT_CB_TIME_UNSET before each callback; the first add of
 * that callback reads the clock and keeps the reading for the callback's
 * later adds. So a kept reading is never older than the start of the
 * callback that is running. */
#define WEFT_CB_TIME_OFF ((gint64) -1)
#define WEFT_CB_TIME_UNSET ((gint64) 0)
extern _Thread_local WEFT_TLS_IE gint64 weft__tls_cb_time;

static inline void
weft__cb_time_set (gint64 state)
{
  weft__tls_cb_time = state;
}

static inline gint64
weft__cb_time_get (void)
{
  return weft__tls_cb_time;
}

gint64 weft__timeout_base_ns (void);

/* ---- the engine ------------------------------------------------------- */

#define WEFT_CTX_LOCK_BITS 8
#define WEFT_RUN_HINT_MAX 1024
/* Bytes of live contexts (counted by run_hint_bytes) above which a pop
 * hints the next runnable: about a quarter of a core's L2. */
#define WEFT_RUN_HINT_MIN_SET (256 * 1024)
#define WEFT_CTX_LOCK_STRIPES (1u << WEFT_CTX_LOCK_BITS)

/* A lock on a cache line of its own. */
typedef struct {
  WeftLock l;
} __attribute__ ((aligned (64))) WeftLockStripe;

typedef struct _WeftWorker WeftWorker;
/* An engine driven by a GMainContext instead of worker threads
 * (context/weft-gmain.c). */
typedef struct _WeftGMainBridge WeftGMainBridge;

/* Per-worker counters: written by their worker only (relaxed stores), summed
 * by weft_engine_get_stats(), so the hot path has no shared atomic add. */
typedef struct {
  _Atomic guint64 jobs_run;
  _Atomic guint64 polls;
  _Atomic guint64 fd_events;
  _Atomic guint64 timers_fired;
} WeftCounters;

/* Adds @n to a counter that only the calling thread writes (a worker's
 * counters, the HTTP server's per-worker shards): a load and a store, no
 * locked instruction; relaxed, for readers on other threads to sum. */
static inline void
weft__own_counter_add (_Atomic guint64 *counter, guint64 n)
{
  atomic_store_explicit (counter, atomic_load_explicit (counter, memory_order_relaxed) + n,
                         memory_order_relaxed);
}

struct _WeftWorker {
  WeftEngine *engine;
  GThread *thread;
  guint index;
  guint run_streak;         /* runnables taken since the last poll */
  WeftCounters counters;
} __attribute__ ((aligned (64)));

/* Fields are grouped by who writes them, one group per cache line: the
 * run-queue heads (every poster), the pop side (workers), read-mostly
 * flags (every post reads them), and sleep accounting (workers, when they
 * sleep or wake). */
struct _WeftEngine {
  WeftMpsc runq __attribute__ ((aligned (64)));   /* jobs and contexts */
  WeftMpsc urgent __attribute__ ((aligned (64))); /* post_front jobs, urgent contexts */
  atomic_int pop_lock __attribute__ ((aligned (64))); /* the single consumer of both */
  /* Bytes from a context's start that its callbacks touch: the largest
   * context allocated with a tail (a connection), at most
   * WEFT_RUN_HINT_MAX. A pop hints that much of the next runnable. */
  atomic_uint run_hint_bytes;

  atomic_int stopping __attribute__ ((aligned (64))); /* workers must leave their loop */
  atomic_int refusing;      /* soft stop: refuse posts from foreign threads */
  atomic_int dead;          /* last public ref gone: drop what gets scheduled */
  gint ref_count;           /* (atomic) public references */
  gint internal_refs;       /* (atomic) 1 while ref_count > 0, +1 per context */
  guint n_workers;

  atomic_int n_sleeping __attribute__ ((aligned (64))); /* workers blocked in the poller */
  atomic_int wake_pending;  /* a wake write is in flight, not yet consumed */
  _Atomic guint64 wakeups;
  _Atomic guint64 n_contexts;

  int pfd;                  /* epoll */
  int wake_fd;              /* eventfd, edge-triggered: one write wakes one worker */
  int stop_fd;              /* eventfd, level-triggered: wakes every worker */

  WeftMutex lock;              /* start/stop, drain waits */
  WeftCond cond;
  gboolean running;         /* HOLDS: lock */
  gboolean joining;         /* HOLDS: lock; a stop is joining the workers */
  gboolean stop_drained;    /* HOLDS: lock; the queues were drained when the
                             * last stop began (weft_engine_shutdown()'s
                             * answer when another thread stopped it) */
  WeftWorker *workers;      /* allocated at the first start, reused */

  WeftFdTable *fdtable;

  /* The contexts' locks: a context hashes to one of these stripes
   * (weft__context_lock()) instead of holding a mutex of its own, 40 bytes
   * that every idle connection paid for. A context's lock is only held for
   * a few pointer moves and never while another context's lock is held,
   * so sharing a stripe costs at most a short wait. */
  WeftLockStripe *ctx_locks;   /* (owned) WEFT_CTX_LOCK_STRIPES */

  /* Every context not yet freed, so that the engine's death can destroy
   * them (their sources hold the last references of connections). */
  WeftMutex ctx_lock;
  WeftContext *contexts;    /* HOLDS: ctx_lock; doubly linked via reg_next */
  atomic_uint ctx_lock_waiters; /* threads blocked on ctx_lock: a long walk
                                 * over the list lets them in between its
                                 * batches (weft__engine_foreach_tail()) */

  /* Timers: one heap entry per context, keyed by its earliest deadline. */
  WeftMutex timer_lock;
  WeftHeap ctx_heap;        /* HOLDS: timer_lock; items are WeftContextSched */
  int timer_fd;
  int timer_fd_errno;       /* why timerfd_create failed, for weft_engine_new */
  gint64 timer_armed;       /* HOLDS: timer_lock; deadline the timerfd is set to */
  gint64 timer_slack;       /* HOLDS: timer_lock; ns a wake-up may be delayed to batch */

  /* Signals (weft-signals.c). */
  WeftMutex signal_lock;
  int signal_fd;            /* HOLDS: signal_lock; -1 until the first subscriber */
  GPtrArray *signal_subs[65]; /* HOLDS: signal_lock; WeftSignalSource* per signum */

  /* Set once, before the first start, by weft_engine_new_for_main_context():
   * no worker threads; a GSource on a GMainContext runs the loop body of
   * workers[0] (n_workers is 1). NULL for ordinary engines. */
  WeftGMainBridge *bridge;  /* (owned) (nullable) */
};

/* weft_engine_new() without the start: epoll, eventfds, timerfd. */
WeftEngine *weft__engine_new_unstarted (guint n_workers, GError **error);
WeftEngine *weft__engine_internal_ref (WeftEngine *self);
void weft__engine_internal_unref (WeftEngine *self);

/* Puts a runnable (a job or a context's run_node) on the run queue and
 * wakes a sleeping worker if there is one. */
void weft__engine_enqueue (WeftEngine *self, WeftNode *node, gboolean urgent);
void weft__engine_wake (WeftEngine *self);
/* Something is on the run queue (a hint for any thread but its consumer). */
static inline gboolean
weft__engine_runq_nonempty (WeftEngine *self)
{
  return weft__mpsc_nonempty (&self->urgent) || weft__mpsc_nonempty (&self->runq);
}
/* Pops the next runnable (urgent first) under the pop lock; any thread may
 * call it. NULL when empty or while a push is in flight. */
WeftNode *weft__engine_pop (WeftEngine *self);
/* Puts a context that a worker is about to let go of back on the run
 * queue without waking anyone: that worker polls the queue next. */
void weft__engine_requeue (WeftEngine *self, WeftNode *node);
/* Whether a post must be refused (soft stop from a foreign thread, or a
 * dead engine). Inline: every post asks, and almost always both flags are
 * clear. */
gboolean weft__engine_refuses_slow (WeftEngine *self);
static inline gboolean
weft__engine_refuses (WeftEngine *self)
{
  if (G_LIKELY (!atomic_load_explicit (&self->refusing, memory_order_relaxed) &&
                !atomic_load_explicit (&self->dead, memory_order_relaxed)))
    return FALSE;
  return weft__engine_refuses_slow (self);
}
void weft__engine_destroy_contexts (WeftEngine *self); /* weft-context.c */

/* The worker this thread is, or NULL. */
WeftWorker *weft__worker_current (void);
gpointer weft__worker_main (gpointer data);
/* Makes this thread act as @w (weft_engine_is_worker_thread() answers TRUE
 * for w->engine) until weft__worker_leave() with the returned previous
 * value; @w may be NULL. For threads that run the loop body without being
 * a worker thread: the GMainContext bridge. */
WeftWorker *weft__worker_enter (WeftWorker *w);
void weft__worker_leave (WeftWorker *previous);
/* One turn of the worker loop: runs one runnable, or polls once and runs
 * what the poll made runnable. With @may_block, an empty run queue makes it
 * sleep in the poller (announced through n_sleeping); without, it never
 * blocks. Returns FALSE when there was nothing to do: no runnable was
 * popped and the poll returned no event. */
gboolean weft__worker_turn (WeftWorker *w, gboolean may_block);
/* For the one worker of an engine whose sleep happens in someone else's
 * poll (the GMainContext bridge): announces the sleep so that posters wake
 * the poller, then looks at the run queue once more. Returns FALSE, with
 * the announce taken back, when something is queued already. */
gboolean weft__worker_prepare_sleep (WeftWorker *w);
void weft__worker_end_sleep (WeftWorker *w);
/* Count a callback in this worker's stats (no-op off the workers). */
void weft__worker_count_job (void);
void weft__worker_count_timer (void);

void weft__timers_init (WeftEngine *self);
void weft__timers_fini (WeftEngine *self);
void weft__timers_expire (WeftEngine *self, WeftContext **local);
/* When the timerfd is due to fire: the earliest deadline plus the slack,
 * in ns of CLOCK_MONOTONIC; G_MAXINT64 when no timeout is pending. */
gint64 weft__timers_next_wake (WeftEngine *self);
/* Inserts or moves @ctx in the engine heap; HOLDS: the context's lock. */
void weft__timers_schedule_context (WeftEngine *self, WeftContext *ctx, gint64 deadline);
void weft__timers_unschedule_context (WeftEngine *self, WeftContext *ctx);

void weft__signals_init (WeftEngine *self);
void weft__signals_fini (WeftEngine *self);
void weft__signals_read (WeftEngine *self, WeftContext **local);

/* The GMainContext bridge (context/weft-gmain.c), called by the engine's
 * lifecycle functions when self->bridge is set. _start attaches a GSource
 * instead of starting threads (HOLDS: self->lock). _stop destroys it and
 * waits for a dispatch in progress on the GMainContext's thread to return.
 * _drain runs the engine's queued work on this thread if it can acquire the
 * GMainContext, until nothing is left or @deadline (monotonic us) passes:
 * returns 1 drained, 0 deadline passed, -1 could not acquire (the caller
 * then waits for the GMainContext's thread to drain it). */
gboolean weft__gmain_bridge_start (WeftEngine *self, GError **error);
void weft__gmain_bridge_stop (WeftEngine *self);
int weft__gmain_bridge_drain (WeftEngine *self, gint64 deadline);
void weft__gmain_bridge_free (WeftGMainBridge *bridge);

G_END_DECLS
