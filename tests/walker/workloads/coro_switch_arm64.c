/* A fiber switch as Tarantool's third_party/coro/coro.c makes it on AArch64 (CORO_ASM), written
 * here from that file's rules because no package has an arm64 Tarantool:
 *  - coro_transfer(prev, next): `sub sp, sp, #8 * 20`; x19..x28, x29/x30, d8..d15 stored as
 *    pairs at [sp, #16 * i]; that sp into prev->sp; the same words reloaded from next->sp, then
 *    `add sp, x3, #8 * 20; ret` (to the reloaded x30).
 *  - coro_startup, the bottom of every fiber stack, without CFI: `mov x0, x20; blr x19;
 *    b abort`; coro_create leaves a new context's 20 words zero except x19 = the function,
 *    x20 = its argument and x30 = coro_startup.
 * One coroutine runs three calls deep and switches back; a second is created and never runs.
 * What the test compares ljprof's walks with is printed by the program itself: each level's
 * return address (__builtin_return_address), and where each context was saved. Then it aborts
 * (qemu-aarch64 writes the core).
 *   aarch64-linux-gnu-gcc -O1 -g coro_switch_arm64.c */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  void** sp;
} coro_context;

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

enum { kStackWords = 8192, kSavedWords = 20 };
static void* stacks[2][kStackWords] __attribute__((aligned(16)));
static coro_context scheduler, running, never_run;
static volatile int sink;

static void coro_create(coro_context* ctx, void (*fn)(void*), void* arg, void** stack) {
  ctx->sp = stack + kStackWords - kSavedWords;
  for (int i = 0; i < kSavedWords; ++i) ctx->sp[i] = 0;
  ctx->sp[0] = (void*)fn;             /* x19 */
  ctx->sp[1] = arg;                   /* x20 */
  ctx->sp[11] = (void*)coro_startup;  /* x30 */
}

__attribute__((noinline)) static void depth3(int n) {
  printf("ra depth3 %p\n", __builtin_return_address(0));
  fflush(stdout);
  coro_transfer(&running, &scheduler);
  sink = n;
}

__attribute__((noinline)) static void depth2(int n) {
  printf("ra depth2 %p\n", __builtin_return_address(0));
  depth3(n + 1);
  sink = n;
}

__attribute__((noinline)) static void depth1(void* arg) {
  printf("ra depth1 %p\n", __builtin_return_address(0));
  depth2((int)(intptr_t)arg);
  sink = 0;
}

int main(void) {
  coro_create(&running, depth1, (void*)1, stacks[0]);
  coro_create(&never_run, depth1, (void*)2, stacks[1]);
  coro_transfer(&scheduler, &running);
  printf("suspended sp %p\n", (void*)running.sp);
  printf("never-run sp %p\n", (void*)never_run.sp);
  printf("coro_startup %p\n", (void*)coro_startup);
  fflush(stdout);
  abort();
}
