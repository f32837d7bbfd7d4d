/* weft-spin.h: waiting out a short critical section of another thread.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <sched.h>

#include <glib.h>

static inline void
weft__cpu_relax (void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause ();
#elif defined(__aarch64__)
  __asm__ __volatile__ ("yield");
#endif
}

/* One step of waiting for another thread that is a few instructions from
 * done (a producer between its exchange and its link, a lock holder). If
 * that thread was preempted, spinning would only burn our time slice, so
 * after a short while give the CPU up. */
static inline void
weft__spin_wait (guint *spins)
{
  if (++*spins > 64)
    sched_yield ();
  else
    weft__cpu_relax ();
}
