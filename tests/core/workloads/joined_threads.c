/* Three threads started by pthread_create: two run at once to their end and are joined (glibc
 * keeps their stacks, thread control blocks included, in its cache for reuse), then one that
 * stays, blocked reading a pipe, on one of those stacks: the other still holds an exited
 * thread's block. Prints "exited TID TID" and "live TID" (gettid), then "ready", and waits. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static int fds[2];
static pid_t tids[3];

static void* run(void* arg) {
  int i = *(int*)arg;
  tids[i] = gettid();
  if (i == 2) {
    char c;
    (void)!read(fds[0], &c, 1); /* blocks for good: nothing writes */
  }
  return NULL;
}

int main(void) {
  static int index[3] = {0, 1, 2};
  pthread_t threads[3];
  if (pipe(fds) != 0) return 1;
  /* Both at once, so each has a stack of its own; the third reuses one of them after. */
  for (int i = 0; i < 2; ++i) pthread_create(&threads[i], NULL, run, &index[i]);
  for (int i = 0; i < 2; ++i) pthread_join(threads[i], NULL);
  pthread_create(&threads[2], NULL, run, &index[2]);
  while (tids[2] == 0) usleep(1000);
  printf("exited %d %d\nlive %d\nready\n", tids[0], tids[1], tids[2]);
  fflush(stdout);
  pause();
  return 0;
}
