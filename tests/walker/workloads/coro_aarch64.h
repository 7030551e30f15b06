/* A fiber switch as Tarantool's third_party/coro/coro.c makes it on AArch64 (CORO_ASM), written
 * here from that file's rules because no package has an arm64 Tarantool:
 *  - coro_transfer(prev, next): `sub sp, sp, #8 * 20`; x19..x28, x29/x30, d8..d15 stored as
 *    pairs at [sp, #16 * i]; that sp into prev->sp; the same words reloaded from next->sp, then
 *    `add sp, x3, #8 * 20; ret` (to the reloaded x30).
 *  - coro_startup, the bottom of every fiber stack, without CFI: `mov x0, x20; blr x19;
 *    b abort`; coro_create leaves a new context's 20 words zero except x19 = the function,
 *    x20 = its argument and x30 = coro_startup.
 * Included by coro_switch_arm64.c and mini_tarantool.c. */
#pragma once
#include <stddef.h>

#ifndef CORO_CONTEXT_DEFINED
typedef struct coro_context {
  void** sp;
} coro_context;
#endif

void coro_transfer(coro_context* prev, coro_context* next);
void coro_startup(void);

__asm__(
    "\t.text\n"
    "\t.globl coro_transfer\n"
    "\t.type coro_transfer, %function\n"
    "coro_transfer:\n"
    "\tsub sp, sp, #8 * 20\n"
    "\tmov x2, sp\n"
    "\tstp x19, x20, [x2, #16 * 0]\n"
    "\tstp x21, x22, [x2, #16 * 1]\n"
    "\tstp x23, x24, [x2, #16 * 2]\n"
    "\tstp x25, x26, [x2, #16 * 3]\n"
    "\tstp x27, x28, [x2, #16 * 4]\n"
    "\tstp x29, x30, [x2, #16 * 5]\n"
    "\tstp d8,  d9,  [x2, #16 * 6]\n"
    "\tstp d10, d11, [x2, #16 * 7]\n"
    "\tstp d12, d13, [x2, #16 * 8]\n"
    "\tstp d14, d15, [x2, #16 * 9]\n"
    "\tstr x2, [x0, #0]\n"
    "\tldr x3, [x1, #0]\n"
    "\tldp x19, x20, [x3, #16 * 0]\n"
    "\tldp x21, x22, [x3, #16 * 1]\n"
    "\tldp x23, x24, [x3, #16 * 2]\n"
    "\tldp x25, x26, [x3, #16 * 3]\n"
    "\tldp x27, x28, [x3, #16 * 4]\n"
    "\tldp x29, x30, [x3, #16 * 5]\n"
    "\tldp d8,  d9,  [x3, #16 * 6]\n"
    "\tldp d10, d11, [x3, #16 * 7]\n"
    "\tldp d12, d13, [x3, #16 * 8]\n"
    "\tldp d14, d15, [x3, #16 * 9]\n"
    "\tadd sp, x3, #8 * 20\n"
    "\tret\n"
    "\t.globl coro_startup\n"
    "\t.type coro_startup, %function\n"
    "coro_startup:\n"
    "\tmov x0, x20\n"
    "\tblr x19\n"
    "\tb abort\n");

enum { kCoroSavedWords = 20 };

/* A context that starts fn(arg) on the stack [stack, stack + words) at its first switch. */
static void coro_create(coro_context* ctx, void (*fn)(void*), void* arg, void** stack,
                        size_t words) {
  ctx->sp = stack + words - kCoroSavedWords;
  for (int i = 0; i < kCoroSavedWords; ++i) ctx->sp[i] = 0;
  ctx->sp[0] = (void*)fn;            /* x19 */
  ctx->sp[1] = arg;                  /* x20 */
  ctx->sp[11] = (void*)coro_startup; /* x30 */
}
