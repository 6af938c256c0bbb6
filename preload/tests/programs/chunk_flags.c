/* Blocks whose glibc chunk flags are known: small ones on the main thread (main arena), blocks of
   1 MiB (above glibc's mmap threshold, each mapped by itself), small ones on a second thread
   (glibc gives it an arena of its own). Prints each block's class and address, one per line.
   Nothing is freed: a freed mapped block would raise glibc's threshold. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMALL 64
#define BIG (1 << 20)

static void *worker_small[4];
static void *worker_big;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 4; i++) {
        worker_small[i] = malloc(SMALL);
        memset(worker_small[i], 1, SMALL);
    }
    worker_big = malloc(BIG);
    return NULL;
}

int main(void) {
    void *small[4];
    for (int i = 0; i < 4; i++) {
        small[i] = malloc(SMALL);
        memset(small[i], 1, SMALL);
    }
    void *zeroed = calloc(1, SMALL);
    void *big = malloc(BIG);
    void *big_zeroed = calloc(1, BIG);
    void *aligned = NULL;
    if (posix_memalign(&aligned, 4096, BIG) != 0) return 1;
    void *grown = malloc(SMALL);
    grown = realloc(grown, BIG);
    pthread_t thread;
    if (pthread_create(&thread, NULL, worker, NULL) != 0) return 2;
    if (pthread_join(thread, NULL) != 0) return 3;
    for (int i = 0; i < 4; i++) printf("main %lu\n", (unsigned long)small[i]);
    printf("main %lu\n", (unsigned long)zeroed);
    printf("mapped %lu\n", (unsigned long)big);
    printf("mapped %lu\n", (unsigned long)big_zeroed);
    printf("mapped %lu\n", (unsigned long)aligned);
    printf("mapped %lu\n", (unsigned long)grown);
    for (int i = 0; i < 4; i++) printf("other %lu\n", (unsigned long)worker_small[i]);
    printf("mapped %lu\n", (unsigned long)worker_big);
    return 0;
}
