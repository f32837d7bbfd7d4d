/* weft-mpsc.h: intrusive lock-free multi-producer single-consumer queue.
 *
 * The exchange-on-head design with a stub node: a push is one atomic
 * exchange plus one release store, with no loop, so producers never wait on
 * each other. The consumer is single by contract (for a context, whoever
 * holds its SCHEDULED bit; for the engine run queue, whoever holds the pop
 * lock).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <stdatomic.h>
#include <glib.h>

typedef struct _WeftNode WeftNode;

/* A seam for tests/test-internal.c, which defines it before including this
 * header: runs in weft__mpsc_pop() between its look at the head and its
 * re-push of the stub, where a producer's exchange can land. @head: the
 * queue's head. */
#ifndef WEFT__MPSC_BEFORE_STUB_PUSH
#define WEFT__MPSC_BEFORE_STUB_PUSH(head) ((void) 0)
#endif

/* What an inbox or run-queue node is; the owner switches on it. */
typedef enum {
  WEFT_NODE_STUB,
  WEFT_NODE_JOB,      /* a WeftJob from the job cache */
  WEFT_NODE_CONTEXT,  /* WeftContext.run_node, on the engine run queue */
  WEFT_NODE_FD,       /* WeftFdSource.node: readiness to deliver */
  WEFT_NODE_TIMERS,   /* WeftContextSched.timers_node: some timeouts are due */
  WEFT_NODE_SIGNAL,   /* WeftSignalSource.node: a signal arrived */
  WEFT_NODE_IDLE,     /* WeftContextSched.idle_node: an idle was added */
} WeftNodeKind;

struct _WeftNode {
  WeftNode *_Atomic next;
  guint32 kind;
  guint32 flags;      /* WEFT_JOB_*: used by job nodes */
};

/* Two layouts of the same queue, used through the same macros below (they
 * only name the members head, stub and tail). WeftMpsc keeps the head and
 * the tail 64 bytes apart, so producers and the consumer never share a
 * cache line over them: the engine's run queues, where many threads post
 * while a worker pops. WeftMpscTight packs them into 32 bytes: a context's
 * inbox, which every idle connection holds, and whose producer is most
 * often the worker that also runs it. */
typedef struct {
  WeftNode *_Atomic head;   /* producers exchange here */
  WeftNode stub;
  char pad_[64 - sizeof (void *) - sizeof (WeftNode)];
  WeftNode *_Atomic tail;   /* written by the consumer only; see _nonempty */
} WeftMpsc;

typedef struct {
  WeftNode *_Atomic head;
  WeftNode stub;
  WeftNode *_Atomic tail;
} WeftMpscTight;

#define weft__mpsc_init(q) weft__mpsc_init_at (&(q)->head, &(q)->tail, &(q)->stub)
#define weft__mpsc_push(q, n) weft__mpsc_push_at (&(q)->head, (n))
#define weft__mpsc_nonempty(q) weft__mpsc_nonempty_at (&(q)->head, &(q)->tail, &(q)->stub)
#define weft__mpsc_pop(q) weft__mpsc_pop_at (&(q)->head, &(q)->tail, &(q)->stub)

static inline void
weft__mpsc_init_at (WeftNode *_Atomic *head, WeftNode *_Atomic *tail, WeftNode *stub)
{
  atomic_store_explicit (&stub->next, NULL, memory_order_relaxed);
  stub->kind = WEFT_NODE_STUB;
  atomic_store_explicit (head, stub, memory_order_relaxed);
  atomic_store_explicit (tail, stub, memory_order_relaxed);
}

/* Pushes @n (any thread). The exchange is
 * sequentially consistent: a producer's following load of a state word is
 * ordered after its push (the Dekker pairing with the consumer's release). */
static inline void
weft__mpsc_push_at (WeftNode *_Atomic *head, WeftNode *n)
{
  atomic_store_explicit (&n->next, NULL, memory_order_relaxed);
  WeftNode *prev = atomic_exchange_explicit (head, n, memory_order_seq_cst);
  atomic_store_explicit (&prev->next, n, memory_order_release);
}

/* TRUE if a push has started that the consumer has not popped yet. A head
 * other than the stub is a push not yet popped; but the head alone is not
 * enough: when the consumer pops the last node and re-pushes the stub just
 * after a producer exchanged the head and before it linked, the head is the
 * stub again while that node and the producer's wait behind the tail. The
 * tail is the stub only once everything before the stub is popped. A
 * context releasing itself on the head alone lost both jobs: the producer,
 * seeing it still scheduled, left them to it. Exact for the consumer; any
 * other thread may ask, and gets a hint (the tail is the consumer's). */
static inline gboolean
weft__mpsc_nonempty_at (WeftNode *_Atomic *head, WeftNode *_Atomic *tail, WeftNode *stub)
{
  return atomic_load_explicit (head, memory_order_seq_cst) != stub ||
         atomic_load_explicit (tail, memory_order_relaxed) != stub;
}

/* TRUE when nothing is linked behind the consumer's tail: the queue is
 * empty, or the push behind the stub is between its exchange and its link
 * (which weft__mpsc_nonempty() sees). Unlike weft__mpsc_nonempty() it
 * reads only the consumer's side (the tail and the stub), never the head
 * that every push exchanges, so a consumer may look often without pulling
 * the producers' line away from them. A tail other than the stub is a node
 * not yet popped. Consumer only. */
#define weft__mpsc_quiet(q) weft__mpsc_quiet_at (&(q)->tail, &(q)->stub)

static inline gboolean
weft__mpsc_quiet_at (WeftNode *_Atomic *tail, WeftNode *stub)
{
  return atomic_load_explicit (tail, memory_order_relaxed) == stub &&
         atomic_load_explicit (&stub->next, memory_order_acquire) == NULL;
}

/* Pops the oldest node. NULL when empty, or while a producer is between its
 * exchange and its link store; weft__mpsc_nonempty() tells the two apart. */
static inline WeftNode *
weft__mpsc_pop_at (WeftNode *_Atomic *head, WeftNode *_Atomic *tailp, WeftNode *stub)
{
  /* Relaxed: the consumer is the only writer of the tail; other threads
   * read it only in weft__mpsc_nonempty(). */
  WeftNode *tail = atomic_load_explicit (tailp, memory_order_relaxed);
  WeftNode *next = atomic_load_explicit (&tail->next, memory_order_acquire);

  if (tail == stub)
    {
      if (next == NULL)
        return NULL;
      atomic_store_explicit (tailp, next, memory_order_relaxed);
      tail = next;
      next = atomic_load_explicit (&next->next, memory_order_acquire);
    }
  if (next != NULL)
    {
      atomic_store_explicit (tailp, next, memory_order_relaxed);
      return tail;
    }
  if (tail != atomic_load_explicit (head, memory_order_acquire))
    return NULL;
  WEFT__MPSC_BEFORE_STUB_PUSH (head);
  weft__mpsc_push_at (head, stub);
  next = atomic_load_explicit (&tail->next, memory_order_acquire);
  if (next != NULL)
    {
      atomic_store_explicit (tailp, next, memory_order_relaxed);
      return tail;
    }
  return NULL;
}
