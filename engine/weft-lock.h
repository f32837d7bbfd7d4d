/* weft-lock.h: the contexts' locks, a word with a futex behind it.
 *
 * A context's lock (one of the engine's stripes) is taken once for every
 * timeout added or removed (and for the end of a one-shot fd's callback),
 * and is held for a few pointer moves. A pthread mutex costs about 60
 * instructions a lock and unlock (its type and owner checks, a call each
 * way); this one costs one compare-and-swap to take and a plain store to
 * give back, inline, when nobody waits. Unlike GMutex it is made of C11
 * atomics compiled into the library, so ThreadSanitizer sees its acquire
 * and release (weft-mutex.h says why GMutex would not do). No condition
 * variable waits on it.
 *
 * The release is a store, not an exchange (a locked instruction, ~10 ns
 * here: a tenth of a timeout's insert), so it cannot learn atomically
 * whether someone sleeps: a waiter that spun in vain counts itself in
 * @sleepers before it sleeps on the word, and the release looks at that
 * count after its store. C11 lets that look pass the store. On x86 it can
 * only do so while the store waits in the releasing CPU's store buffer;
 * elsewhere the two are sequentially consistent (on ARMv8 a store-release
 * and a load-acquire, which stay in order). In that window a sleeper can
 * miss its wake: it sleeps at most WEFT_LOCK_NAP_NS at a time and looks
 * again, which bounds the case instead of leaving the thread asleep for
 * good.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <limits.h>
#include <stdatomic.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <glib.h>

#include "weft-spin.h"

typedef struct {
  atomic_uint v;        /* 0 free, 1 held */
  atomic_uint sleepers; /* waiters asleep on v, or about to be */
} WeftLock;

/* How long a waiter sleeps before it looks again without a wake. */
#define WEFT_LOCK_NAP_NS 1000000

void weft__lock_wait (WeftLock *l);
void weft__lock_wake (WeftLock *l);
/* Wakes issued by releases, counted for the tests. */
extern atomic_uint weft__lock_wakes;

static inline void
weft__lock_init (WeftLock *l)
{
  atomic_init (&l->v, 0);
  atomic_init (&l->sleepers, 0);
}

static inline void
weft__lock_acquire (WeftLock *l)
{
  guint free_ = 0;
  if (G_UNLIKELY (!atomic_compare_exchange_strong_explicit (&l->v, &free_, 1, memory_order_acquire,
                                                            memory_order_relaxed)))
    weft__lock_wait (l);
}

/* x86 orders every store and load but a load after a store (TSO): a
 * plain store and load there, without the fence a seq_cst store costs. */
#if defined(__x86_64__) || defined(__i386__)
#define WEFT_LOCK_STORE_ORDER memory_order_release
#define WEFT_LOCK_LOOK_ORDER memory_order_relaxed
#else
#define WEFT_LOCK_STORE_ORDER memory_order_seq_cst
#define WEFT_LOCK_LOOK_ORDER memory_order_seq_cst
#endif

static inline void
weft__lock_release (WeftLock *l)
{
  atomic_store_explicit (&l->v, 0, WEFT_LOCK_STORE_ORDER);
  if (G_UNLIKELY (atomic_load_explicit (&l->sleepers, WEFT_LOCK_LOOK_ORDER) != 0))
    weft__lock_wake (l);
}
