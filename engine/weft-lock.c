/* weft-lock.c: the slow path of WeftLock (weft-lock.h).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <time.h>

#include "weft-lock.h"

/* Spin rounds before sleeping: a holder moves a few pointers, so a short
 * wait usually ends the contention without a system call. */
#define SPINS 100

/* Wakes issued by releases (for /internal/lock-sleeper-woken). */
atomic_uint weft__lock_wakes;

static inline gboolean
try_take (WeftLock *l)
{
  guint v = 0;
  return atomic_compare_exchange_strong_explicit (&l->v, &v, 1, memory_order_acquire,
                                                  memory_order_relaxed);
}

void
weft__lock_wait (WeftLock *l)
{
  for (guint i = 0; i < SPINS; i++)
    {
      if (atomic_load_explicit (&l->v, memory_order_relaxed) == 0 && try_take (l))
        return;
      weft__cpu_relax ();
    }
  /* Counted first, then the word looked at: a release stores, then looks
   * at the count (see weft-lock.h for the one order this can miss). */
  atomic_fetch_add (&l->sleepers, 1);
  while (!try_take (l))
    {
      const struct timespec nap = { 0, WEFT_LOCK_NAP_NS };
      syscall (SYS_futex, &l->v, FUTEX_WAIT_PRIVATE, 1, &nap, NULL, 0);
    }
  atomic_fetch_sub (&l->sleepers, 1);
}

void
weft__lock_wake (WeftLock *l)
{
  atomic_fetch_add_explicit (&weft__lock_wakes, 1, memory_order_relaxed);
  syscall (SYS_futex, &l->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
