/* weft-coro-switch-ucontext.c: coroutine switch for CPUs without an
 * assembly one, on makecontext/swapcontext (slow: a signal-mask system
 * call per switch).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-coro-switch.h"

#include <fenv.h>
#include <glib.h>
#include <stdint.h>

static void
start (unsigned int hi, unsigned int lo, unsigned int ehi, unsigned int elo)
{
  /* makecontext passes ints: pointers travel in halves, put together in
   * 64 bits (a shift by 32 of a 32-bit uintptr_t would be undefined). */
  void *arg = (void *) (uintptr_t) (((guint64) hi << 32) | lo);
  WeftCoroEntry entry = (WeftCoroEntry) (uintptr_t) (((guint64) ehi << 32) | elo);
  /* getcontext() took the creating thread's floating-point environment; a
   * new coroutine starts with the default one, as with the assembly
   * switches (/coro/fp-control-per-coroutine). */
  fesetenv (FE_DFL_ENV);
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
  guint64 a = (uintptr_t) arg, e = (uintptr_t) entry;
  makecontext (&regs->uc, (void (*) (void)) start, 4, (unsigned int) (a >> 32),
               (unsigned int) a, (unsigned int) (e >> 32), (unsigned int) e);
}

void
weft__coro_switch (WeftCoroRegs *from, WeftCoroRegs *to)
{
  swapcontext (&from->uc, &to->uc);
}
