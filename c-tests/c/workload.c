/* A pool allocator in C that reports its blocks to memprof. */
#include <stdint.h>
#include <stdlib.h>

#include "memprof.h"

static void *pool_alloc(size_t size) {
    void *p = malloc(size);
    memprof_record_alloc(p, size);
    return p;
}

static void *pool_realloc(void *p, size_t size) {
    uintptr_t old = (uintptr_t)p;
    void *q = realloc(p, size);
    if (q == NULL) {
        return p;
    }
    memprof_record_realloc(old, q, size);
    return q;
}

static void pool_free(void *p) {
    memprof_record_free(p);
    free(p);
}

void **c_make_nodes(int count, size_t size) {
    void **nodes = pool_alloc((size_t)count * sizeof(void *));
    for (int i = 0; i < count; i++) {
        nodes[i] = pool_alloc(size);
    }
    return nodes;
}

void c_grow_nodes(void **nodes, int count, size_t size) {
    for (int i = 0; i < count; i++) {
        nodes[i] = pool_realloc(nodes[i], size);
    }
}

void c_free_nodes(void **nodes, int count) {
    for (int i = 0; i < count; i++) {
        pool_free(nodes[i]);
    }
    pool_free(nodes);
}

int c_write_report(int fd) { return memprof_write_report(fd); }

int c_write_log(int fd) { return memprof_write_log(fd); }
