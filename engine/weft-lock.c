/* weft-lock.c: the slow path of WeftLock (weft-lock.h).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-lock.h"

/* Spin rounds before sleeping: a holder moves a few pointers, so a short
 * wait usually ends the contention without a system call. */
#define SPINS 100

void
weft__lock_wait (WeftLock *l)
{
  for (guint i = 0; i < SPINS; i++)
    {
      guint v = atomic_load_explicit (&l->v, memory_order_relaxed);
      if (v == 0)
        {
          if (atomic_compare_exchange_weak_explicit (&l->v, &v, 1, memory_order_acquire,
                                                     memory_order_relaxed))
            return;
        }
      else if (v == 2)
        break; /* others sleep already: join them */
      weft__cpu_relax ();
    }
  /* Held by us from here only if it was free; 2 tells the holder that a
   * sleeper may need waking (possibly none: one spare wake). */
  while (atomic_exchange_explicit (&l->v, 2, memory_order_acquire) != 0)
    syscall (SYS_futex, &l->v, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}
