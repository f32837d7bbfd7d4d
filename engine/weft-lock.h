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
 * count after its store. The store may still sit in the releasing CPU's
 * store buffer when that look is made (x86 lets a load pass an earlier
 * store), so a sleeper can in principle miss its wake: it sleeps at most
 * WEFT_LOCK_NAP_NS at a time and looks again, which bounds that case
 * instead of leaving the thread asleep for good.
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

static inline void
weft__lock_release (WeftLock *l)
{
  atomic_store_explicit (&l->v, 0, memory_order_release);
  if (G_UNLIKELY (atomic_load_explicit (&l->sleepers, memory_order_relaxed) != 0))
    weft__lock_wake (l);
}
