/* The pause memprof attach costs a process, seen from inside it (docs/overhead.md): 50 threads
 * that allocate a little every millisecond, 1 GiB of heap in 1 MiB blocks (touched), and a thread
 * that stamps the monotonic clock in a loop and keeps the longest gap between two stamps. Each
 * line on stdin prints the longest gap since the last line (in microseconds) and starts again.
 *
 *   cc -O2 -pthread -o attach_pause bench/c/attach_pause.c
 *   ./attach_pause < fifo & memprof attach --duration 5 PID   # then a line into the fifo */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile long longest_ns = 0;

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void *stamp(void *arg) {
    (void)arg;
    long last = now_ns();
    for (;;) {
        long t = now_ns();
        if (t - last > longest_ns) longest_ns = t - last;
        last = t;
    }
    return NULL;
}

static void *worker(void *arg) {
    (void)arg;
    for (;;) {
        void *p = malloc(64);
        memset(p, 1, 64);
        free(p);
        usleep(1000);
    }
    return NULL;
}

int main(void) {
    static void *heap[1024];
    for (int i = 0; i < 1024; i++) {
        heap[i] = malloc(1 << 20);
        memset(heap[i], i, 1 << 20);
    }
    pthread_t t;
    for (int i = 0; i < 50; i++) pthread_create(&t, NULL, worker, NULL);
    pthread_create(&t, NULL, stamp, NULL);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        printf("longest gap %ld us\n", longest_ns / 1000);
        fflush(stdout);
        longest_ns = 0;
    }
    return 0;
}
