/* The C workload of scripts/preload-overhead.py: N allocations through the C library's
 * allocation functions, for a preloaded recorder (libmemprof_preload.so, heaptrack) to record.
 *
 *     cc -O2 -g -fomit-frame-pointer -o preload_workload bench/c/preload_workload.c
 *     ./preload_workload N           # N allocations, the live set freed at the end
 *     ./preload_workload N keep      # the same, the live set left allocated at exit
 *
 * Each step descends a call chain, 5 to 20 frames between `main` and `malloc` (two mutually recursive functions, so the
 * stacks differ at every depth), and there one of four call sites allocates a few blocks of mixed
 * sizes (16 B to 4 KiB, now and then 16 to 64 KiB): most are freed at once (temporary), some
 * replace an entry of a live set of 65,536 blocks (long-lived, freed later, in another order),
 * and some grow with realloc. Every block is written to, and the live set is a volatile global
 * array, so the compiler keeps every call. N counts the calls that return a block (malloc,
 * calloc, realloc); each has its free. The program prints N and the checksum of what it wrote.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVE 65536

static void *volatile live[LIVE];
static volatile uint64_t sink;
static uint64_t state = 0x9e3779b97f4a7c15ULL;
static long made; /* blocks returned so far */
static long target;

static inline uint64_t next(void) {
    /* xorshift64* */
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545f4914f6cdd1dULL;
}

/* Mostly small, as programs allocate: 16 to 256 B (70%), to 4 KiB (27%), 16 to 64 KiB (3%). */
static size_t size_of_next(uint64_t r) {
    unsigned pick = r % 100;
    if (pick < 70) return 16 + (r >> 8) % 241;
    if (pick < 97) return 256 + (r >> 8) % 3841;
    return 16384 + (r >> 8) % 49153;
}

static void touch(unsigned char *block, size_t size) {
    block[0] = (unsigned char)size;
    block[size - 1] = (unsigned char)(size >> 8);
    sink += block[0];
}

/* Keeps `block` in the live set; the block it replaces is freed. */
static void keep(void *block) {
    size_t slot = next() % LIVE;
    void *old = live[slot];
    live[slot] = block;
    free(old);
}

__attribute__((noinline)) static void site_temporary(void) {
    for (int i = 0; i < 4 && made < target; i++) {
        size_t size = size_of_next(next());
        unsigned char *block = malloc(size);
        made++;
        touch(block, size);
        free(block);
    }
}

__attribute__((noinline)) static void site_kept(void) {
    for (int i = 0; i < 2 && made < target; i++) {
        size_t size = size_of_next(next());
        unsigned char *block = malloc(size);
        made++;
        touch(block, size);
        keep(block);
    }
}

__attribute__((noinline)) static void site_zeroed(void) {
    if (made >= target) return;
    size_t size = size_of_next(next());
    unsigned char *block = calloc(1, size);
    made++;
    touch(block, size);
    if (next() & 1) keep(block); else free(block);
}

__attribute__((noinline)) static void site_grown(void) {
    size_t size = 16;
    unsigned char *block = NULL;
    for (int i = 0; i < 4 && made < target; i++) {
        size = size * 2 + next() % 16;
        block = realloc(block, size);
        made++;
        touch(block, size);
    }
    if (block) keep(block);
}

__attribute__((noinline)) static void allocate_at(uint64_t r) {
    switch (r & 7) {
    case 0: case 1: case 2: site_temporary(); break;
    case 3: case 4: case 5: site_kept(); break;
    case 6: site_zeroed(); break;
    default: site_grown(); break;
    }
}

__attribute__((noinline)) static int descend_b(int depth, unsigned shape, uint64_t r);

/* Two mutually recursive functions, with work after each call (so no tail call is made). The
 * path down is one of 16 shapes (`shape`'s bit `depth % 4` picks the next function), so the
 * program has about a thousand distinct stacks: 16 depths, 16 shapes, 4 sites. */
__attribute__((noinline)) static int descend_a(int depth, unsigned shape, uint64_t r) {
    if (depth == 0) {
        allocate_at(r);
        return 1;
    }
    int below = (shape >> (depth & 3)) & 1 ? descend_b(depth - 1, shape, r)
                                           : descend_a(depth - 1, shape, r);
    sink += below;
    return below + 1;
}

__attribute__((noinline)) static int descend_b(int depth, unsigned shape, uint64_t r) {
    if (depth == 0) {
        allocate_at(r);
        return 2;
    }
    int below = (shape >> (depth & 3)) & 1 ? descend_a(depth - 1, shape, r)
                                           : descend_b(depth - 1, shape, r);
    sink += below * 3;
    return below + 2;
}

int main(int argc, char **argv) {
    target = argc > 1 ? atol(argv[1]) : 1000000;
    while (made < target) {
        uint64_t r = next();
        /* depth + 1 frames of descend_*, allocate_at and the site: 5 to 20 frames under main. */
        int depth = 2 + (int)(r % 16);
        descend_a(depth, (unsigned)(r >> 4) & 15, r >> 8);
    }
    /* `./preload_workload N keep` leaves the live set allocated at exit, for a report to show. */
    if (argc < 3 || strcmp(argv[2], "keep") != 0) {
        for (size_t i = 0; i < LIVE; i++) {
            free(live[i]);
            live[i] = NULL;
        }
    }
    printf("%ld allocations, checksum %llu\n", made, (unsigned long long)sink);
    return 0;
}
