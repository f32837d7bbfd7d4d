/* weft-context-private.h: what the engine and sibling files may use of a
 * context and its sources.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "weft-engine-private.h"
#include "weft-context.h"
#include "weft-join.h"

G_BEGIN_DECLS

/* ---- id map (weft-idmap.c) -------------------------------------------- */

/* Open addressing (Robin Hood, linear probing) keyed by the source id. Ids
 * are handed out in sequence, so the identity hash puts each at home:
 * insert, lookup and delete are a few instructions without collisions. */
typedef struct {
  union {
    gpointer *values;  /* mask != 0: the table, values then keys in one block */
    gpointer one_value; /* mask 0: no table, at most one entry, here */
  };
  guint mask;          /* capacity - 1; capacity is a power of two; 0: no table */
  union {
    guint len;         /* mask != 0: entries in the table */
    guint one_key;     /* mask 0: the entry's id, 0 when there is none (0 is
                        * never an id); 16 bytes in every context */
  };
} WeftIdMap;

void weft__idmap_init (WeftIdMap *map);
void weft__idmap_clear (WeftIdMap *map);
void weft__idmap_insert (WeftIdMap *map, guint key, gpointer value);
gpointer weft__idmap_lookup (WeftIdMap *map, guint key);
gpointer weft__idmap_remove (WeftIdMap *map, guint key);
guint weft__idmap_size (WeftIdMap *map);
/* Moves every value into @out (a GPtrArray) and empties the map. */
void weft__idmap_steal_all (WeftIdMap *map, GPtrArray *out);

/* ---- sources ---------------------------------------------------------- */

typedef enum {
  WEFT_SOURCE_FD,
  WEFT_SOURCE_TIMEOUT,
  WEFT_SOURCE_IDLE,
  WEFT_SOURCE_SIGNAL,
} WeftSourceKind;

typedef struct _WeftSource WeftSource;
/* Packed (small fields last, in bytes) because every connection holds an
 * fd source for as long as it is open, and a timeout source is allocated
 * per timeout: with a million of them every 8 bytes are 2,000 page faults. */
struct _WeftSource {
  guint id;
  gint refs;               /* (atomic) fd and signal sources only: registration,
                            * queued node, fd table lookups in flight */
  WeftContext *ctx;        /* not owned: a source never outlives its context's close */
  gpointer func;
  gpointer user_data;
  GDestroyNotify notify;
  guint8 kind;             /* WeftSourceKind */
  /* WEFT_SOURCE_RUNNING: its callback is executing; WEFT_SOURCE_REMOVED:
   * out of the id map, never to start again. Removal sets REMOVED under
   * ctx->lock with one read-modify-write that also says whether the
   * callback runs; an fd or signal source's dispatch sets and clears
   * RUNNING with one each, without the lock (weft__source_dispatch_queued()),
   * so exactly one of the two sees the other and finalizes. Timeouts and
   * idles change RUNNING only under the lock (weft__source_flag_locked()). */
  _Atomic guint8 rstate;
  guint8 edge : 1;         /* fd sources: edge-triggered, no re-arm after each
                            * callback (set before registration) */
  guint8 embedded : 1;     /* lives in its context's tail: not freed by itself */
  /* One word for two kinds: a timeout is never queued as a node, an fd or
   * signal source is in no heap. Sharing it keeps a timeout source 64
   * bytes (one cache line) and the base 48. */
  union {
    atomic_int queued;     /* signal sources: the node is in the inbox (an fd
                            * source keeps that in revents: WEFT_FD_QUEUED) */
    guint heap_index;      /* HOLDS: ctx->lock; timeouts: slot in the
                            * context's heap, WEFT_HEAP_NONE when in none */
  };
};

#define WEFT_SOURCE_RUNNING 1u
#define WEFT_SOURCE_REMOVED 2u

static inline gboolean
weft__source_is_removed (WeftSource *source)
{
  return atomic_load_explicit (&source->rstate, memory_order_relaxed) & WEFT_SOURCE_REMOVED;
}

/* Sets or clears @bit with a plain load and store: under ctx->lock, for a
 * source whose state no other thread changes without the lock at this
 * moment (a timeout, an idle; a dispatched source by its dispatcher). */
static inline void
weft__source_flag_locked (WeftSource *source, guint8 bit, gboolean on)
{
  guint8 v = atomic_load_explicit (&source->rstate, memory_order_relaxed);
  atomic_store_explicit (&source->rstate, (guint8) (on ? v | bit : v & ~bit),
                         memory_order_relaxed);
}

/* Marks @source removed; HOLDS: ctx->lock. Returns whether its callback
 * is running (then whoever runs it finalizes it when it returns). Only
 * fd and signal sources need the read-modify-write: nobody changes a
 * timeout's or an idle's word without the lock, and a timeout's remove is
 * half of bench-timers' cancel. */
static inline gboolean
weft__source_mark_removed (WeftSource *source)
{
  if (source->kind == WEFT_SOURCE_TIMEOUT || source->kind == WEFT_SOURCE_IDLE)
    {
      gboolean running = atomic_load_explicit (&source->rstate, memory_order_relaxed) &
                         WEFT_SOURCE_RUNNING;
      weft__source_flag_locked (source, WEFT_SOURCE_REMOVED, TRUE);
      return running;
    }
  return atomic_fetch_or (&source->rstate, WEFT_SOURCE_REMOVED) & WEFT_SOURCE_RUNNING;
}

guint weft__context_add_fd (WeftContext *self, gint fd, GIOCondition events, WeftFdFunc func,
                            gpointer user_data, GDestroyNotify notify, GError **error);
/* Same, with the source in @storage: zeroed memory in @self's tail (see
 * weft__context_new_with_tail()), which the source never frees. */
guint weft__context_add_fd_in (WeftContext *self, WeftFdSource *storage, gint fd,
                               GIOCondition events, WeftFdFunc func, gpointer user_data,
                               GDestroyNotify notify, GError **error);
gboolean weft__context_set_fd_interest (WeftContext *self, guint id, GIOCondition events,
                                        GError **error);

struct _WeftFdSource {
  WeftSource base;
  WeftNode node;           /* in the context inbox while a readiness waits */
  int fd;
  /* Written under ctx->lock; read without it by the dispatch that asks
   * whether a re-arm is due (weft-fd.c, fd_rearm_due()). */
  _Atomic guint32 events;  /* EPOLL* interest */
  _Atomic guint32 armed;   /* the interest epoll has (edge only) */
  atomic_uint revents;     /* readiness accumulated for the next callback,
                            * and WEFT_FD_QUEUED while the node is in the inbox */
  guint64 key;             /* fd table key; 0 once unregistered */
};

/* In WeftFdSource.revents: a bit epoll never reports (EPOLLONESHOT's). */
#define WEFT_FD_QUEUED (1u << 30)

/* The deadline lives in the heap entry only. */
typedef struct {
  WeftSource base;
  gint64 interval;         /* ns */
  guint64 heap_seq;        /* HOLDS: ctx->lock; heap insertion number */
} WeftTimeoutSource;

typedef struct _WeftIdleSource WeftIdleSource;
struct _WeftIdleSource {
  WeftSource base;
  WeftIdleSource *prev, *next; /* HOLDS: ctx->lock */
};

typedef struct {
  WeftSource base;
  WeftNode node;
  int signum;
} WeftSignalSource;

/* ---- the context ------------------------------------------------------ */

/* The queue of jobs and bound contexts that a GMainContext runs
 * (weft-gmain.c). */
typedef struct _WeftMainQueue WeftMainQueue;

/* What a context needs only once it has had a timeout or an idle handler:
 * made on the first (under the context's lock, before the source is added)
 * and freed with the context, so a context that never had one, such as an
 * idle connection's, does not pay for it. Published with a release store;
 * whoever reaches it through a source, a node or the engine's heap (all
 * made after it) or under the lock sees it whole. */
typedef struct {
  WeftHeap timers;             /* HOLDS: ctx->lock; WeftTimeoutSource */
  WeftIdleSource *idles;       /* HOLDS: ctx->lock; doubly linked */
  WeftIdleSource *idles_tail;  /* HOLDS: ctx->lock */

  WeftNode timers_node;        /* kind TIMERS */
  atomic_int timers_queued;
  /* The engine's ctx_heap holds the sched, not the context, so the link
   * costs nothing to contexts that never had a timeout. */
  WeftHeapLink timer_link;     /* HOLDS: engine->timer_lock; in the engine's ctx_heap */
  WeftContext *ctx;            /* the context this belongs to */

  WeftNode idle_node;          /* kind IDLE */
  atomic_int idle_queued;
} WeftContextSched;

/* Makes ctx->sched if it is missing; HOLDS: ctx->lock. */
WeftContextSched *weft__context_sched_unlocked (WeftContext *self);

/* The state word. SCHEDULED is the consumer right over both inboxes: its
 * holder alone pops them. It is held by the creator until dispatch, then by
 * whoever pushed the context on the run queue, until the runner finds both
 * inboxes empty and releases it. ACTIVE: dispatched. CLOSED: destroyed,
 * whatever is popped is dropped. */
enum {
  WEFT_CTX_SCHEDULED = 1u << 0,
  WEFT_CTX_ACTIVE = 1u << 1,
  WEFT_CTX_CLOSED = 1u << 2,
  /* Its tail holds a connection a listener accepted (set once, after the
   * connection is made): weft__engine_foreach_tail() finds it. */
  WEFT_CTX_TAIL_CONN = 1u << 3,
};

/* Laid out by who touches what. The allocation is only 16-byte aligned
 * (cache-line alignment cost idle connections ~190 bytes each), so the two
 * groups below start 64 bytes apart from the 16-byte slot of the other's
 * last field: for any start they never share a line (static assertions in
 * weft-context.c keep it so).
 *  - First, what a post touches: the state word, the engine, the bound,
 *    the back inbox's head it exchanges and its stub, and on a claim the
 *    references and the run-queue node. Posting to many contexts in turn (each post
 *    claims an idle context) then touches one or two lines per context.
 *  - Last, what the runner touches on every node: the inbox's tail, the
 *    front queue's pointer, its copy of CLOSED. A runner that
 *    read or wrote a line the posters write moved it between the CPUs on
 *    every job while a producer streamed into the context.
 * Colder fields fill the gap, so the context is no larger than with the
 * two groups side by side. */
struct _WeftContext {
  WeftNode run_node;           /* first: the run queues hold this node; on
                                * the engine run queue while scheduled */
  gint internal_refs;          /* (atomic) 1 for the public side, +1 while
                                * scheduled, +1 per fd or signal source, +1
                                * per engine timer heap entry or queued
                                * timers_node, +1 per internal push */
  _Atomic guint state;
  WeftEngine *engine;          /* (owned) internal reference */
  /* Bound to a GMainContext (weft_context_new_for_main_context()): when
   * claimed, the context goes to this queue instead of the engine's run
   * queue, and runs on the thread that iterates the GMainContext. Set
   * before dispatch, then read-only. */
  WeftMainQueue *main_queue;   /* (owned) (nullable) */
  gint ref_count;              /* (atomic) public references */
  guint max_queued;            /* set before dispatch */
  /* The back inbox (post, readiness, timers, signals, idles) is a
   * WeftMpscTight taken apart, used through the weft__mpsc_*_at() forms:
   * the posters' head, and the stub, which a post links behind when the
   * inbox was empty (every post, when many idle contexts are posted to in
   * turn), here; the runner's tail below. The runner reads the stub only
   * once it has drained the inbox. */
  WeftNode *_Atomic back_head;
  WeftNode back_stub;

  atomic_uint n_queued;        /* counted jobs, only when max_queued > 0 */
  guint last_id;               /* HOLDS: lock */
  WeftIdMap ids;               /* HOLDS: lock */
  WeftContext *reg_prev;       /* HOLDS: engine->ctx_lock; the engine's list */
  WeftContext *reg_next;       /* HOLDS: engine->ctx_lock */

  /* The runner's, from here on. */
  WeftContextSched *_Atomic sched; /* (nullable) (owned) timeouts and idles */
  WeftNode *_Atomic back_tail; /* the runner's; other threads only hint (_nonempty) */
  /* post_front's queue, made by the first one (few contexts ever get
   * one): idle connections are counted in bytes. */
  WeftMpscTight *_Atomic front;
  guint8 idles_due;            /* consumer only */
  /* CLOSED, copied here by close_context() after it set it in the state
   * word: the runner's look before each node, off the posters' lines. */
  _Atomic guint8 closed;
  gboolean ids_wrapped;        /* HOLDS: lock; last_id went past G_MAXUINT */
};

/* The back inbox through the weft__mpsc_*_at() forms. */
#define weft__context_back_push(c, n) weft__mpsc_push_at (&(c)->back_head, (n))
#define weft__context_back_nonempty(c) \
  weft__mpsc_nonempty_at (&(c)->back_head, &(c)->back_tail, &(c)->back_stub)
#define weft__context_back_quiet(c) weft__mpsc_quiet_at (&(c)->back_tail, &(c)->back_stub)
#define weft__context_back_pop(c) \
  weft__mpsc_pop_at (&(c)->back_head, &(c)->back_tail, &(c)->back_stub)

/* A context followed by @tail_size zeroed bytes in the same allocation, for
 * objects that live exactly as long as it: a connection and its fd source
 * (weft-listener.c), so an idle connection is one allocation. Whatever is
 * put there must hold a reference on the context (public or internal) for
 * as long as it is used, and must not be freed by itself. */
WeftContext *weft__context_new_with_tail (WeftEngine *engine, gsize tail_size);

/* Where the tail starts: past the context, aligned for 64-bit integers
 * (a connection holds 64-bit atomics; a 32-bit CPU may align the context
 * to 4 only). On 64-bit CPUs, sizeof (WeftContext) itself. */
#define WEFT_CONTEXT_TAIL_OFFSET ((sizeof (WeftContext) + 7) & ~(gsize) 7)

static inline gpointer
weft__context_tail (WeftContext *self)
{
  return (guint8 *) self + WEFT_CONTEXT_TAIL_OFFSET;
}

/* Marks @self's tail as holding a listener's connection, once it is made
 * (sequentially consistent, like the state word's other changes). */
void weft__context_mark_tail_conn (WeftContext *self);
/* Calls @func with the tail of every context of @engine marked so and not
 * yet freed, under the engine's context lock: the tail's memory stays
 * valid meanwhile, but @func may only look and take references, never
 * post, unref or make a context (they take that lock). This is how a
 * listener and an HTTP server find their connections without a set of
 * their own (one hash table entry each, per idle connection). The lock is
 * dropped between batches of contexts, so the walk is no snapshot: a
 * context in the list for the whole walk is visited once, one added during
 * it is not, and one freed during it may or may not be. Not from under
 * the lock (the walk may drop the last reference of a context). */
void weft__engine_foreach_tail (WeftEngine *engine, void (*func) (gpointer tail, gpointer data),
                                gpointer data);
/* Tests only: called between two batches of the walk, without the lock,
 * with the tail of the context it goes on from (which may be freed now). */
extern void (*weft__foreach_tail_unlocked_hook) (gpointer next_tail);

/* The context's lock ("HOLDS: lock" above): one of the engine's stripes,
 * by the context's address (which is fixed, like its engine). */
static inline WeftLock *
weft__engine_ctx_lock (WeftEngine *engine, WeftContext *ctx)
{
  guint h = (guint) ((guintptr) ctx >> 4) * 0x9E3779B1u; /* Fibonacci hashing */
  return &engine->ctx_locks[h >> (32 - WEFT_CTX_LOCK_BITS)].l;
}

static inline WeftLock *
weft__context_lock (WeftContext *self)
{
  return weft__engine_ctx_lock (self->engine, self);
}

WeftContext *weft__context_internal_ref (WeftContext *self);
void weft__context_internal_unref (WeftContext *self);

/* Pushes @node on an inbox and schedules the context. When @local points
 * to NULL and this call claimed the context, the context is handed back in
 * *@local for the calling worker to run itself instead of being queued.
 * weft__context_push() is for callers that keep @self alive across the call
 * (a public reference, or the consumer right); weft__context_push_ref()
 * holds a reference of its own, for pushes made on behalf of a node whose
 * reference the consumer may drop at any moment. */
void weft__context_push (WeftContext *self, WeftNode *node, gboolean front,
                         WeftContext **local);
void weft__context_push_ref (WeftContext *self, WeftNode *node, gboolean front,
                             WeftContext **local);
/* Puts a context that was claimed through @local on the run queue. */
void weft__context_enqueue (WeftContext *self);
/* Runs a claimed context; returns when it is released or requeued. */
void weft__context_run (WeftContext *self);
/* The direct way for one readiness of @source (the caller holds the fd
 * table's reference): _claim_for_fd claims its idle context (FALSE: it is
 * held or bound elsewhere, queue the readiness instead) and _run_fd runs
 * the claimed context, that readiness first, then whatever its inbox got
 * meanwhile. The reference goes to the run, which keeps it until the
 * context is released: it keeps the context too (no reference goes with
 * the claim). */
gboolean weft__context_claim_for_fd (WeftFdSource *source);
void weft__context_run_fd (WeftFdSource *source, guint32 events);
/* Drops everything queued on a claimed context without running it. */
void weft__context_run_dropping (WeftContext *self);

/* Bound contexts (weft-gmain.c). _push_context hands over a claimed
 * context with the reference that goes with SCHEDULED; the GMainContext's
 * thread runs it (or drops what it holds if the GMainContext was finalized
 * or the engine is gone). */
void weft__main_queue_push_context (WeftMainQueue *queue, WeftContext *ctx);
void weft__main_queue_unref (WeftMainQueue *queue);

/* Allocates the next id and records @source; HOLDS: lock. Returns 0 if the
 * context is closed. */
guint weft__context_add_source_unlocked (WeftContext *self, WeftSource *source);
/* weft_context_add_timeout() counting from a clock reading of its own, not
 * from the running callback's (a coroutine's timed wait counts from its
 * call). */
guint weft__context_add_timeout_from_now (WeftContext *self, guint interval_ms, GSourceFunc func,
                                          gpointer user_data, GDestroyNotify notify);
/* weft_context_post() for the rest of work already accepted (a coroutine's
 * resume): a soft stop does not refuse it from a foreign thread, so a
 * coroutine woken from outside during weft_engine_shutdown() (an
 * interrupt, a condition signalled) runs on instead of being abandoned
 * with its context still open. Refused, with @notify called, only when
 * the context is closed or the engine gone. */
gboolean weft__context_post_continuation (WeftContext *self, WeftJobFunc func,
                                          gpointer user_data, GDestroyNotify notify);
void weft__context_drop_idmap_unlocked (WeftContext *self, WeftSource *source);
void weft__source_call_notify (WeftSource *source);

/* Per-kind handling (weft-fd.c, weft-timeout.c, weft-idle.c, weft-signal.c).
 * _detach_unlocked: the source left the id map and is not running: unhook it
 * from the engine; returns TRUE if the caller must free it (after unlocking)
 * with _finalize. */
/* Fd and signal sources are reference counted: they are reached from
 * other threads (the fd table, the signal table) and queued as inbox nodes.
 * The last unref runs the notify and frees. */
void weft__source_ref (WeftSource *source);
void weft__source_unref (WeftSource *source);
/* Runs the callback of a source whose node was popped from the inbox,
 * holding the node's reference: skips it if removed (or @drop), then
 * removes it if @call (given @arg) returned FALSE, else lets
 * @rearm_unlocked (nullable, called under the context lock) re-arm it
 * when @rearm_due (nullable: always due) says so; @rearm_due is called
 * without the lock, and again after the source stopped running. Drops
 * the node's reference unless @keep_ref. */
/* The end of a dispatch under the lock: the callback asked to go, or was
 * removed meanwhile, or its source needs a re-arm (weft-source.c). */
void weft__source_dispatch_end_locked (WeftSource *source, gboolean keep,
                                       void (*rearm_unlocked) (WeftSource *source));

/* Inline, so that each caller's @call and @rearm_due are direct calls: out
 * of line (as link-time optimization chose once) the three indirect calls
 * cost ~55 instructions per HTTP request. */
static inline __attribute__ ((always_inline)) void
weft__source_dispatch_queued (WeftSource *src, gboolean drop,
                              gboolean (*call) (WeftSource *source, guint32 arg), guint32 arg,
                              gboolean (*rearm_due) (WeftSource *source),
                              void (*rearm_unlocked) (WeftSource *source), gboolean keep_ref)
{
  /* One read-modify-write each way instead of the context lock twice:
   * against a removal's (see WeftSource.rstate), whichever comes second
   * sees the other's bit. */
  if (drop || (atomic_fetch_or (&src->rstate, WEFT_SOURCE_RUNNING) & WEFT_SOURCE_REMOVED))
    {
      /* Removed: whoever removed it saw it idle and finalized it (a stray
       * RUNNING bit on it is read by nobody); or the context is closing,
       * which removes it. */
      if (!keep_ref)
        weft__source_unref (src); /* the node's reference */
      return;
    }

  weft__worker_count_job ();
  gboolean keep = call (src, arg);

  if (!keep || (rearm_unlocked != NULL && (rearm_due == NULL || rearm_due (src))))
    weft__source_dispatch_end_locked (src, keep, rearm_unlocked);
  else if ((atomic_fetch_and (&src->rstate, (guint8) ~WEFT_SOURCE_RUNNING) & WEFT_SOURCE_REMOVED) ||
           (rearm_unlocked != NULL && rearm_due (src)))
    /* Removed while it ran (the remover left the rest to us), or the
     * interest changed from another thread between the two looks (which
     * saw it still running and left the re-arm to us). */
    weft__source_dispatch_end_locked (src, TRUE, rearm_unlocked);
  if (!keep_ref)
    weft__source_unref (src);
}

void weft__fd_source_ready (WeftFdSource *source, guint32 events, WeftContext **local);
/* Cache hints for the readiness of a referenced @source (weft-fd.c). */
void weft__fd_source_prefetch (WeftFdSource *source, WeftEngine *engine);
void weft__fd_source_dispatch (WeftFdSource *source, gboolean drop);
/* The same for a readiness that was never queued: @events come with it,
 * and the caller keeps its reference. */
void weft__fd_source_dispatch_direct (WeftFdSource *source, guint32 events, gboolean drop);
gboolean weft__fd_source_detach_unlocked (WeftFdSource *source);

void weft__timeouts_dispatch (WeftContext *ctx);
gboolean weft__timeout_detach_unlocked (WeftTimeoutSource *source);

/* Runs the idle handlers; TRUE if any ran (and so may have queued work). */
gboolean weft__idles_dispatch (WeftContext *ctx);
gboolean weft__idle_detach_unlocked (WeftIdleSource *source);

void weft__signal_source_raise (WeftSignalSource *source, WeftContext **local);
void weft__signal_source_dispatch (WeftSignalSource *source, gboolean drop);
gboolean weft__signal_source_detach_unlocked (WeftSignalSource *source);
gboolean weft__signals_subscribe (WeftEngine *engine, WeftSignalSource *source, GError **error);
void weft__signals_unsubscribe (WeftEngine *engine, WeftSignalSource *source);

/* Unhooks a source that left the id map and is not running; returns TRUE
 * when the caller must call weft__source_finalize() after unlocking. */
gboolean weft__source_detach_unlocked (WeftSource *source);
/* For a source removed while its callback runs: what must not wait for
 * the callback to return (an fd leaves epoll now). */
void weft__source_unwatch_running_unlocked (WeftSource *source);
/* Drops the source's registration: frees it (notify included) once no
 * queued node holds it any more. */
void weft__source_finalize (WeftSource *source);

G_END_DECLS
