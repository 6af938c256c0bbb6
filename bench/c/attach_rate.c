/* The allocation rate of a process before memprof attach and after its detach (docs/overhead-log.md):
 * two threads malloc and free 8 blocks at a time; each second the main thread prints the second
 * and how many blocks were allocated in it. Run two, attach to one, compare the ratio. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static volatile long count = 0;
static void *work(void *a) { (void)a; for (;;) { void *p[8]; for (int i = 0; i < 8; i++) { p[i] = malloc(32 + i * 100); ((char*)p[i])[0] = 1; } for (int i = 0; i < 8; i++) free(p[i]); __atomic_add_fetch(&count, 8, __ATOMIC_RELAXED); } return NULL; }
int main(void) {
    pthread_t t; for (int i = 0; i < 2; i++) pthread_create(&t, NULL, work, NULL);
    printf("ready %d\n", getpid()); fflush(stdout);
    long last = 0;
    for (int s = 0; ; s++) { sleep(1); long c = count; printf("%d %ld\n", s, c - last); fflush(stdout); last = c; }
}
