/* weft-coro-switch-x86_64.S: coroutine switch for x86-64 (System V).
 *
 * weft__coro_switch (WeftCoroRegs *from, WeftCoroRegs *to):
 * pushes the callee-saved registers (rbp, rbx, r12-r15) and the MXCSR and
 * x87 control word on the current stack, stores the stack pointer in
 * from->sp, loads to->sp, and undoes the same on the other side, leaving
 * with pop + jmp rather than ret.
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
        movq    %rsp, (%rdi)
        movq    (%rsi), %rsp
        ldmxcsr (%rsp)
        fldcw   4(%rsp)
        addq    $8, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        popq    %rcx
        jmpq    *%rcx
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
