/* A loop of malloc(32) and free at a fixed depth: the preloaded library's cost per allocation
 * with every cache warm (one block, one stack), for `perf record` and paired timings.
 *
 *     cc -O2 -g -fomit-frame-pointer -o preload_deep bench/c/preload_deep.c
 *     ./preload_deep DEPTH N        # N allocations and frees, DEPTH frames below main
 */
#include <stdio.h>
#include <stdlib.h>

static volatile long sink;

__attribute__((noinline)) static void leaf(long n) {
    for (long i = 0; i < n; i++) {
        void *block = malloc(32);
        sink += (long)block;
        free(block);
    }
}

__attribute__((noinline)) static void descend(int depth, long n) {
    if (depth == 0)
        leaf(n);
    else
        descend(depth - 1, n);
    sink++;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s DEPTH N\n", argv[0]);
        return 2;
    }
    descend(atoi(argv[1]), atol(argv[2]));
    printf("%ld\n", sink & 1);
    return 0;
}
