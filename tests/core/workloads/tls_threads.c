/* Threads and their TLS as Tarantool's cords keep it: a thread-local `cord_ptr` (the name and
 * storage class of src/lib/core/fiber.c's) that each thread points at a marker of its own.
 * Two threads started by pthread_create run at once to their end and are joined (glibc keeps
 * their stacks, thread control blocks included, in its cache for reuse); then two stay, blocked
 * reading a pipe, on those stacks. Prints "exited TID TID", then per thread that stays, main's
 * included, "thread TID tp THREAD_POINTER cord_ptr VALUE" (gettid, __builtin_thread_pointer, its
 * cord_ptr), then "ready". With the argument "abort" it then aborts (a core of every thread);
 * without, it waits. Threads get 128 KiB stacks, so a core of it stays small. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__thread void* cord_ptr;

static int fds[2];
static char markers[5];
static pid_t tids[5];
static void* tps[5];
static volatile int started[5];

static void* run(void* arg) {
  int i = *(int*)arg;
  cord_ptr = &markers[i];
  tids[i] = gettid();
  tps[i] = __builtin_thread_pointer();
  started[i] = 1;
  if (i >= 2) {
    char c;
    (void)!read(fds[0], &c, 1); /* blocks for good: nothing writes */
  }
  return NULL;
}

int main(int argc, char** argv) {
  static int index[4] = {0, 1, 2, 3};
  pthread_t threads[4];
  pthread_attr_t attr;
  if (pipe(fds) != 0 || pthread_attr_init(&attr) != 0) return 1;
  pthread_attr_setstacksize(&attr, 128 << 10);
  /* Both at once, so each has a stack of its own; the next two reuse them. */
  for (int i = 0; i < 2; ++i) pthread_create(&threads[i], &attr, run, &index[i]);
  for (int i = 0; i < 2; ++i) pthread_join(threads[i], NULL);
  for (int i = 2; i < 4; ++i) pthread_create(&threads[i], &attr, run, &index[i]);
  for (int i = 2; i < 4; ++i) {
    while (!started[i]) usleep(1000);
  }
  cord_ptr = &markers[4];
  tids[4] = gettid();
  tps[4] = __builtin_thread_pointer();
  printf("exited %d %d\n", tids[0], tids[1]);
  for (int i = 2; i < 5; ++i) {
    printf("thread %d tp %p cord_ptr %p\n", tids[i], tps[i], (void*)&markers[i]);
  }
  printf("ready\n");
  fflush(stdout);
  if (argc > 1 && strcmp(argv[1], "abort") == 0) abort();
  pause();
  return 0;
}
