/* Two processes passing one byte back and forth over two pipes for SECONDS (argv[1]): every
 * pass is two context switches on a 2-core machine or one on each core. Prints the round trips
 * per second. The switch-heavy workload of bench/off_cpu_switches. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 5;
  int ping[2], pong[2];
  char byte = 0;
  if (pipe(ping) != 0 || pipe(pong) != 0) return 1;
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    close(ping[1]); /* else the parent's close never reaches EOF here */
    close(pong[0]);
    while (read(ping[0], &byte, 1) == 1) {
      if (write(pong[1], &byte, 1) != 1) break;
    }
    _exit(0);
  }
  close(ping[0]);
  close(pong[1]);
  long trips = 0;
  const double start = now();
  double t = start;
  while (t - start < seconds) {
    for (int i = 0; i < 1000; i++) {
      if (write(ping[1], &byte, 1) != 1 || read(pong[0], &byte, 1) != 1) return 1;
    }
    trips += 1000;
    t = now();
  }
  close(ping[1]);
  waitpid(child, NULL, 0);
  printf("%.0f\n", trips / (t - start));
  return 0;
}
