/* Every C allocation function, each leaking blocks of a size of its own from a function of its
 * own (noinline), and checking its own results; prints "ok" and exits 0 when every check held.
 * Built with -O2 -g -fomit-frame-pointer by tests/c_leak.rs. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEAK_COUNT 37
#define LEAK_SIZE 1000

void *volatile sink[64];
static int failures;

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            printf("check failed at line %d: %s\n", __LINE__, #cond);                         \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

static void usable(void *p, size_t size) {
    CHECK(p != NULL);
    CHECK(malloc_usable_size(p) >= size);
    memset(p, 0x5a, size);
}

__attribute__((noinline)) void leak_blocks(void) {
    for (int i = 0; i < LEAK_COUNT; i++) {
        char *block = malloc(LEAK_SIZE); /* LEAK_LINE */
        usable(block, LEAK_SIZE);
        sink[i % 64] = block;
    }
}

__attribute__((noinline)) void leak_calloc(void) {
    unsigned char *block = calloc(10, 333); /* CALLOC_LINE */
    CHECK(block != NULL);
    for (int i = 0; i < 3330; i++)
        CHECK(block[i] == 0);
    usable(block, 3330);
    sink[0] = block;
}

__attribute__((noinline)) void leak_realloc(void) {
    char *block = malloc(100);
    memset(block, 7, 100);
    block = realloc(block, 5000); /* REALLOC_LINE */
    CHECK(block[99] == 7);
    usable(block, 5000);
    sink[1] = block;
}

__attribute__((noinline)) void realloc_to_zero(void) {
    char *block = malloc(777);
    usable(block, 777);
    sink[2] = realloc(block, 0); /* glibc frees the block and returns NULL */
    CHECK(sink[2] == NULL);
}

__attribute__((noinline)) void leak_reallocarray(void) {
    char *block = reallocarray(NULL, 7, 123); /* REALLOCARRAY_LINE */
    usable(block, 861);
    sink[3] = block;
    errno = 0;
    void *overflow = reallocarray(block, SIZE_MAX / 2, 3);
    CHECK(overflow == NULL);
    CHECK(errno == ENOMEM);
    CHECK(block[860] == 0x5a); /* still the caller's */
}

__attribute__((noinline)) void leak_posix_memalign(void) {
    void *block = NULL;
    CHECK(posix_memalign(&block, 64, 1234) == 0); /* POSIX_MEMALIGN_LINE */
    CHECK(((uintptr_t)block & 63) == 0);
    usable(block, 1234);
    sink[4] = block;
    void *bad = (void *)1;
    CHECK(posix_memalign(&bad, 3, 100) == EINVAL);
    CHECK(posix_memalign(&bad, 4, 100) == EINVAL); /* not a multiple of sizeof(void *) */
    CHECK(bad == (void *)1);
}

__attribute__((noinline)) void leak_aligned_alloc(void) {
    void *block = aligned_alloc(128, 1280); /* ALIGNED_ALLOC_LINE */
    CHECK(((uintptr_t)block & 127) == 0);
    usable(block, 1280);
    sink[5] = block;
}

__attribute__((noinline)) void leak_memalign(void) {
    void *block = memalign(256, 2222); /* MEMALIGN_LINE */
    CHECK(((uintptr_t)block & 255) == 0);
    usable(block, 2222);
    sink[6] = block;
}

__attribute__((noinline)) void leak_valloc(void) {
    void *block = valloc(3333); /* VALLOC_LINE */
    CHECK(((uintptr_t)block & (sysconf(_SC_PAGESIZE) - 1)) == 0);
    usable(block, 3333);
    sink[7] = block;
}

__attribute__((noinline)) void leak_pvalloc(void) {
    void *block = pvalloc(4444); /* PVALLOC_LINE */
    CHECK(((uintptr_t)block & (sysconf(_SC_PAGESIZE) - 1)) == 0);
    usable(block, 4444);
    sink[8] = block;
}

__attribute__((noinline)) void freed_blocks(void) {
    for (int i = 0; i < 100; i++) {
        void *a = malloc(50 + i);
        void *b = calloc(3, 50 + i);
        usable(a, 50 + i);
        a = realloc(a, 500 + i);
        free(a);
        free(b);
    }
    free(NULL);
}

int main(void) {
    leak_blocks();
    leak_calloc();
    leak_realloc();
    realloc_to_zero();
    leak_reallocarray();
    leak_posix_memalign();
    leak_aligned_alloc();
    leak_memalign();
    leak_valloc();
    leak_pvalloc();
    freed_blocks();
    if (failures) {
        printf("%d checks failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
