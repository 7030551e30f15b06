/* tarantool3_fiber.h's structs in a program's DWARF, with Tarantool's static main_cord:
 *   gcc -g -O0 [-DENABLE_BACKTRACE] [-DHAVE_MADV_DONTNEED] tarantool3_fiber.c */
#include "tarantool3_fiber.h"

static struct cord main_cord;

int main(void) {
  main_cord.fiber = &main_cord.sched;
  return main_cord.fiber->flags & FIBER_IS_DEAD;
}
