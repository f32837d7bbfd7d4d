/* weft-coro-switch-aarch64.S: coroutine switch for AArch64 (AAPCS64).
 *
 * weft__coro_switch (WeftCoroRegs *from, WeftCoroRegs *to): saves x19-x30,
 * d8-d15 and FPCR in a 176-byte frame on the current stack, stores sp in
 * from->sp, loads to->sp and restores the same, returning through x30.
 * A fresh context is such a frame with x30 = weft__coro_trampoline, the
 * entry function in x20 and its argument in x19.
 *
 * FPCR is written only when the other side's differs: a write may
 * synchronise the core, and the two sides nearly always agree. (FPCR holds
 * no status flags: those are FPSR's, which does not travel, as the psABI
 * leaves it caller-saved.)
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
        .text
        .globl  weft__coro_switch
        .hidden weft__coro_switch
        .type   weft__coro_switch, %function
        .p2align 4
weft__coro_switch:
        .cfi_startproc
        sub     sp, sp, #176
        stp     x19, x20, [sp, #0]
        stp     x21, x22, [sp, #16]
        stp     x23, x24, [sp, #32]
        stp     x25, x26, [sp, #48]
        stp     x27, x28, [sp, #64]
        stp     x29, x30, [sp, #80]
        stp     d8, d9, [sp, #96]
        stp     d10, d11, [sp, #112]
        stp     d12, d13, [sp, #128]
        stp     d14, d15, [sp, #144]
        mrs     x10, fpcr               /* kept in x10 for the compare */
        str     x10, [sp, #160]
        mov     x9, sp
        str     x9, [x0]
        ldr     x9, [x1]
        mov     sp, x9
        ldp     x19, x20, [sp, #0]
        ldp     x21, x22, [sp, #16]
        ldp     x23, x24, [sp, #32]
        ldp     x25, x26, [sp, #48]
        ldp     x27, x28, [sp, #64]
        ldp     x29, x30, [sp, #80]
        ldp     d8, d9, [sp, #96]
        ldp     d10, d11, [sp, #112]
        ldp     d12, d13, [sp, #128]
        ldp     d14, d15, [sp, #144]
        ldr     x9, [sp, #160]
        cmp     x9, x10
        b.eq    1f
        msr     fpcr, x9
1:
        add     sp, sp, #176
        ret
        .cfi_endproc
        .size   weft__coro_switch, .-weft__coro_switch

        .globl  weft__coro_trampoline
        .hidden weft__coro_trampoline
        .type   weft__coro_trampoline, %function
        .p2align 4
weft__coro_trampoline:
        .cfi_startproc
        .cfi_undefined x30      /* the bottom of a coroutine's stack */
        mov     x0, x19
        blr     x20
        brk     #0              /* the entry never returns */
        .cfi_endproc
        .size   weft__coro_trampoline, .-weft__coro_trampoline

        .section .note.GNU-stack,"",%progbits
