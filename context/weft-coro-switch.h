/* weft-coro-switch.h: the machine part of coroutines (internal): a saved
 * register context, its creation on a fresh stack, and the switch. One
 * implementation per CPU in a file of its own (x86-64 and AArch64 in
 * assembly, ucontext elsewhere), chosen by meson.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <stddef.h>

#if defined(WEFT_CORO_UCONTEXT)
#include <ucontext.h>
typedef struct {
  ucontext_t uc;
} WeftCoroRegs;
#else
typedef struct {
  void *sp; /* everything else is saved on the stack it points into */
} WeftCoroRegs;
#endif

typedef void (*WeftCoroEntry) (void *arg);

/* Prepares @regs so that the first switch to it calls @entry (@arg) on the
 * stack [@stack_lo, @stack_lo + @size). @entry must never return. */
void weft__coro_regs_init (WeftCoroRegs *regs, void *stack_lo, size_t size, WeftCoroEntry entry,
                           void *arg);

/* Saves the running context into @from and continues @to. Returns when
 * something switches back to @from. Callee-saved registers, the stack
 * pointer and the floating-point control state (MXCSR's control bits and
 * the x87 control word; FPCR on AArch64) travel with each side; status
 * flags, caller-saved in the psABI, stay with the thread. */
void weft__coro_switch (WeftCoroRegs *from, WeftCoroRegs *to);
