/* Contexts switched as Tarantool does on AArch64 (coro_aarch64.h). One coroutine runs three calls
 * deep and switches back; a second is created and never runs. What the test compares ljprof's
 * walks with is printed by the program itself: each level's return address
 * (__builtin_return_address), and where each context was saved. Then it aborts (qemu-aarch64
 * writes the core).
 *   aarch64-linux-gnu-gcc -O1 -g coro_switch_arm64.c */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "coro_aarch64.h"

enum { kStackWords = 8192 };
static void* stacks[2][kStackWords] __attribute__((aligned(16)));
static coro_context scheduler, running, never_run;
static volatile int sink;

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
  coro_create(&running, depth1, (void*)1, stacks[0], kStackWords);
  coro_create(&never_run, depth1, (void*)2, stacks[1], kStackWords);
  coro_transfer(&scheduler, &running);
  printf("suspended sp %p\n", (void*)running.sp);
  printf("never-run sp %p\n", (void*)never_run.sp);
  printf("coro_startup %p\n", (void*)coro_startup);
  fflush(stdout);
  abort();
}
