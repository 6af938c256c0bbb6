/* Stress: 8 threads allocate blocks and hand them to each other through a shared array under a
 * mutex (a block is mostly freed by another thread than the one that made it), for argv[1]
 * seconds, while the main thread forks 3 times in the middle (each child allocates, keeps 3
 * blocks of 999 bytes and exits normally). At the end everything is freed but the KEEP blocks
 * of keep_blocks (sizes 16*i + 7), and the program prints "kept <blocks> <bytes> children
 * <pid> <pid> <pid>". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define THREADS 8
#define SLOTS 4096
#define KEEP 100

static void *slots[SLOTS];
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static volatile int stop;
static void *volatile sink;

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

__attribute__((noinline)) static void *stress_alloc(uint64_t *rng) {
    uint64_t r = next(rng);
    size_t size = 1 + r % 3000;
    void *p;
    switch ((r >> 32) % 5) {
    case 0: p = calloc(1, size); break;
    case 1: p = realloc(malloc(size / 2 + 1), size); break;
    case 2: if (posix_memalign(&p, 64, size)) p = NULL; break;
    case 3: p = aligned_alloc(32, (size + 31) & ~(size_t)31); break;
    default: p = malloc(size); break;
    }
    memset(p, 1, size < 64 ? size : 64);
    return p;
}

static void *stress_worker(void *arg) {
    uint64_t rng = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 1);
    while (!stop) {
        for (int i = 0; i < 64; i++) {
            void *mine = stress_alloc(&rng);
            size_t at = next(&rng) % SLOTS;
            pthread_mutex_lock(&mutex);
            void *theirs = slots[at];
            slots[at] = mine;
            pthread_mutex_unlock(&mutex);
            free(theirs);
            if (next(&rng) % 4 == 0)
                free(stress_alloc(&rng));
        }
    }
    return NULL;
}

__attribute__((noinline)) static void child_keep(void) {
    void *p = malloc(999);
    memset(p, 2, 999);
    sink = p;
}

static pid_t fork_child(void) {
    pid_t child = fork();
    if (child == 0) {
        uint64_t rng = 12345;
        for (int i = 0; i < 1000; i++)
            free(stress_alloc(&rng));
        for (int i = 0; i < 3; i++)
            child_keep();
        exit(0);
    }
    return child;
}

__attribute__((noinline)) static size_t keep_blocks(void) {
    size_t bytes = 0;
    for (int i = 0; i < KEEP; i++) {
        void *p = malloc(16 * i + 7);
        memset(p, 3, 16 * i + 7);
        sink = p;
        bytes += 16 * i + 7;
    }
    return bytes;
}

static void sleep_for(double seconds) {
    struct timespec t = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 10;
    pthread_t threads[THREADS];
    for (intptr_t i = 0; i < THREADS; i++)
        pthread_create(&threads[i], NULL, stress_worker, (void *)i);
    pid_t children[3];
    for (int f = 0; f < 3; f++) {
        sleep_for(seconds / 4);
        children[f] = fork_child();
        if (children[f] < 0) {
            printf("fork failed\n");
            return 1;
        }
    }
    sleep_for(seconds / 4);
    stop = 1;
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < SLOTS; i++)
        free(slots[i]);
    for (int f = 0; f < 3; f++) {
        int status;
        if (waitpid(children[f], &status, 0) != children[f] || !WIFEXITED(status) ||
            WEXITSTATUS(status)) {
            printf("child %d failed: %x\n", (int)children[f], status);
            return 1;
        }
    }
    size_t bytes = keep_blocks();
    printf("kept %d %zu children %d %d %d\n", KEEP, bytes, (int)children[0], (int)children[1],
           (int)children[2]);
    return 0;
}
