/* fp_recursion.c: a native C recursion of a given depth, built with frame pointers, spinning at
 * the bottom for a given time: the stack the kernel's frame-pointer unwinder walks in
 * bench/record_overhead's baseline.   fp_recursion DEPTH SECONDS */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile unsigned long sink;

__attribute__((noinline)) static unsigned long recurse(int depth, double until) {
  if (depth <= 1) {
    unsigned long x = 0;
    while (now() < until)
      for (int i = 0; i < 100000; ++i) x += (unsigned long)i * i;
    return x;
  }
  /* Used after the call: no sibling call, every level keeps its frame. */
  return recurse(depth - 1, until) + (unsigned long)depth;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: fp_recursion DEPTH SECONDS\n");
    return 2;
  }
  sink = recurse(atoi(argv[1]), now() + atof(argv[2]));
  return 0;
}
