/* weft-lock.h: the contexts' locks, a word with a futex behind it.
 *
 * A context's lock (one of the engine's stripes) is taken once for every
 * timeout added or removed (and for the end of a one-shot fd's callback), and is
 * held for a few pointer moves. A pthread mutex costs about 60
 * instructions a lock and unlock (its type and owner checks, a call each
 * way); this one costs an exchange each way, inline, when nobody waits.
 * It is the three-state lock of Drepper's "Futexes Are Tricky": 0 free,
 * 1 held, 2 held and someone may sleep on it. Unlike GMutex it is made of
 * C11 atomics compiled into the library, so ThreadSanitizer sees its
 * acquire and release (weft-mutex.h says why GMutex would not do).
 * No condition variable waits on it.
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
  atomic_uint v;
} WeftLock;

void weft__lock_wait (WeftLock *l);

static inline void
weft__lock_init (WeftLock *l)
{
  atomic_init (&l->v, 0);
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
  if (G_UNLIKELY (atomic_exchange_explicit (&l->v, 0, memory_order_release) == 2))
    syscall (SYS_futex, &l->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
