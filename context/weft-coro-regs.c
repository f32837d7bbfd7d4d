/* weft-coro-regs.c: the first frame of a coroutine for the assembly
 * switches (x86-64, AArch64): a saved frame, as weft__coro_switch leaves
 * one, whose return address is the trampoline.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-coro-switch.h"

#include <stdint.h>
#include <string.h>

void weft__coro_trampoline (void);

void
weft__coro_regs_init (WeftCoroRegs *regs, void *stack_lo, size_t size, WeftCoroEntry entry,
                      void *arg)
{
  uintptr_t top = ((uintptr_t) stack_lo + size) & ~(uintptr_t) 15;
#if defined(__x86_64__)
  /* From the top: 16 bytes of padding (a zero return address for
   * unwinders), then the frame the switch pops: return address, rbp, rbx,
   * r12, r13, r14, r15, and MXCSR + x87 control word. After the pop of the
   * return address the stack is 16-aligned, as the trampoline's call
   * needs. */
  uint64_t *f = (uint64_t *) (top - 16);
  f[0] = 0;
  f[1] = 0;
  f -= 8;
  memset (f, 0, 8 * sizeof *f);
  f[7] = (uint64_t) (uintptr_t) weft__coro_trampoline; /* return address */
  f[6] = 0;                                            /* rbp */
  f[5] = 0;                                            /* rbx */
  f[4] = (uint64_t) (uintptr_t) arg;                   /* r12 */
  f[3] = (uint64_t) (uintptr_t) entry;                 /* r13 */
  f[2] = 0;                                            /* r14 */
  f[1] = 0;                                            /* r15 */
  uint32_t fpu[2] = { 0x1F80, 0x037F };                /* MXCSR, x87 CW defaults */
  memcpy (&f[0], fpu, sizeof fpu);
  regs->sp = f;
#elif defined(__aarch64__)
  /* The 176-byte frame: x19.. x30 at 0..88, d8..d15 at 96..152, FPCR at 160. */
  uint64_t *f = (uint64_t *) (top - 176);
  memset (f, 0, 176);
  f[0] = (uint64_t) (uintptr_t) arg;                    /* x19 */
  f[1] = (uint64_t) (uintptr_t) entry;                  /* x20 */
  f[11] = (uint64_t) (uintptr_t) weft__coro_trampoline; /* x30 */
  regs->sp = f;
#else
#error "weft-coro-regs.c is for the assembly switches"
#endif
}
