/* C signal handlers for Lua workloads (loaded with ffi.load). signal_interrupted.lua: SIGALRM
 * every `interval_us` of wall time interrupts whatever the thread runs, and the handler spins
 * `spin_us` in handler_spin, so samples land in a handler stacked on the interrupted Lua code.
 * tests/walker/workloads/signal_parked.lua: a thread parked for good in a handler, for a core. */
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;
static double spin_seconds;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

__attribute__((noinline)) void handler_spin(double seconds) {
  const double until = now() + seconds;
  while (now() < until) sink++;
}

static void on_alarm(int sig) {
  (void)sig;
  handler_spin(spin_seconds);
}

int start_signals(int interval_us, int spin_us) {
  struct sigaction sa;
  struct itimerval it;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  spin_seconds = spin_us / 1e6;
  if (sigaction(SIGALRM, &sa, NULL) != 0) return -1;
  memset(&it, 0, sizeof it);
  it.it_interval.tv_usec = interval_us;
  it.it_value.tv_usec = interval_us;
  return setitimer(ITIMER_REAL, &it, NULL);
}

void stop_signals(void) {
  struct itimerval off;
  memset(&off, 0, sizeof off);
  setitimer(ITIMER_REAL, &off, NULL);
}

__attribute__((noinline)) void handler_park(void) {
  for (;;) pause();
}

static void on_usr1(int sig) {
  (void)sig;
  handler_park();
}

/* Raises SIGUSR1, whose handler never returns: the thread stays in it, stacked on this call. */
void park_in_handler(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  raise(SIGUSR1);
}
