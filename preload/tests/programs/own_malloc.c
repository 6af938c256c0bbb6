/* A program with its own allocator linked in: malloc, free, calloc and realloc defined here (a
 * bump allocator with a size header), which the dynamic loader binds every module to before any
 * preloaded library's. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static char *arena, *next_free_byte;
static size_t allocated;

void *malloc(size_t size) {
    if (!arena) {
        arena = mmap(NULL, 64 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        next_free_byte = arena;
    }
    size = (size + 15) & ~(size_t)15;
    if (next_free_byte + size + 16 > arena + (64 << 20))
        return NULL;
    char *block = next_free_byte + 16;
    ((size_t *)block)[-1] = size;
    next_free_byte += size + 16;
    allocated++;
    return block;
}

void free(void *p) { (void)p; }

void *calloc(size_t n, size_t size) {
    void *p = malloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void *realloc(void *p, size_t size) {
    void *q = malloc(size);
    if (p && q) {
        size_t old = ((size_t *)p)[-1];
        memcpy(q, p, old < size ? old : size);
    }
    return q;
}

int main(void) {
    char *volatile p = malloc(100);
    strcpy(p, "own");
    p = realloc(p, 1000);
    printf("%s allocator: %zu blocks\n", p, allocated);
    free(p);
    return 0;
}
