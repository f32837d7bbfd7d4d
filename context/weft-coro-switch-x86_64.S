/* weft-coro-switch-x86_64.S: coroutine switch for x86-64 (System V).
 *
 * weft__coro_switch (WeftCoroRegs *from, WeftCoroRegs *to):
 * pushes the callee-saved registers (rbp, rbx, r12-r15) and the MXCSR and
 * x87 control word on the current stack, stores the stack pointer in
 * from->sp, loads to->sp, and undoes the same on the other side, leaving
 * with pop + jmp rather than ret.
 *
 * The floating-point state that travels is what the psABI makes
 * callee-saved: MXCSR's control bits (6-15) and the x87 control word. Each
 * is loaded only when it differs from the running one. An ldmxcsr that
 * changes the register costs ~30 ns on recent Intel cores (measured: 8 ns
 * a switch with equal values, 65 ns when only the sticky status flags
 * differ, as they do once either side has done one inexact operation), and
 * the status flags (bits 0-5, caller-saved) are the thread's, not the
 * coroutine's.
 *
 * A fresh context (weft__coro_regs_init, in C below the frame layout) is
 * such a saved frame whose "return address" is weft__coro_trampoline, with
 * the entry function in r13 and its argument in r12.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
        .text
        .globl  weft__coro_switch
        .hidden weft__coro_switch
        .type   weft__coro_switch, @function
        .p2align 4
weft__coro_switch:
        .cfi_startproc
        pushq   %rbp
        pushq   %rbx
        pushq   %r12
        pushq   %r13
        pushq   %r14
        pushq   %r15
        subq    $8, %rsp
        stmxcsr (%rsp)
        fnstcw  4(%rsp)
        movl    (%rsp), %eax            /* the running MXCSR and CW, kept */
        movzwl  4(%rsp), %r8d           /* in caller-saved registers */
        movq    %rsp, (%rdi)
        movq    (%rsi), %rsp
        movl    (%rsp), %edx
        xorl    %eax, %edx
        testl   $0xffffffc0, %edx       /* control bits (and reserved) */
        jnz     .Lload_mxcsr
.Lcw:
        movzwl  4(%rsp), %edx
        cmpl    %r8d, %edx
        jne     .Lload_cw
.Lpop:
        addq    $8, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        popq    %rcx
        jmpq    *%rcx
.Lload_mxcsr:
        ldmxcsr (%rsp)
        jmp     .Lcw
.Lload_cw:
        fldcw   4(%rsp)
        jmp     .Lpop
        .cfi_endproc
        .size   weft__coro_switch, .-weft__coro_switch

        .globl  weft__coro_trampoline
        .hidden weft__coro_trampoline
        .type   weft__coro_trampoline, @function
        .p2align 4
weft__coro_trampoline:
        .cfi_startproc
        .cfi_undefined rip      /* the bottom of a coroutine's stack */
        movq    %r12, %rdi
        callq   *%r13
        ud2                     /* the entry never returns */
        .cfi_endproc
        .size   weft__coro_trampoline, .-weft__coro_trampoline

        .section .note.GNU-stack,"",@progbits
