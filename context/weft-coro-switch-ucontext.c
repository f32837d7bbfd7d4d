/* weft-coro-switch-ucontext.c: coroutine switch for CPUs without an
 * assembly one, on makecontext/swapcontext (slow: a signal-mask system
 * call per switch).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-coro-switch.h"

#include <glib.h>
#include <stdint.h>

static void
start (unsigned int hi, unsigned int lo, unsigned int ehi, unsigned int elo)
{
  /* makecontext passes ints: pointers travel in halves. */
  void *arg = (void *) (((uintptr_t) hi << 32) | lo);
  WeftCoroEntry entry = (WeftCoroEntry) (((uintptr_t) ehi << 32) | elo);
  entry (arg);
  g_assert_not_reached ();
}

void
weft__coro_regs_init (WeftCoroRegs *regs, void *stack_lo, size_t size, WeftCoroEntry entry,
                      void *arg)
{
  getcontext (&regs->uc);
  regs->uc.uc_stack.ss_sp = stack_lo;
  regs->uc.uc_stack.ss_size = size;
  regs->uc.uc_link = NULL;
  uintptr_t a = (uintptr_t) arg, e = (uintptr_t) entry;
  makecontext (&regs->uc, (void (*) (void)) start, 4, (unsigned int) (a >> 32),
               (unsigned int) a, (unsigned int) (e >> 32), (unsigned int) e);
}

void
weft__coro_switch (WeftCoroRegs *from, WeftCoroRegs *to)
{
  swapcontext (&from->uc, &to->uc);
}
