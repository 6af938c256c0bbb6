/* counter.so: a counting interposer, preloaded BEFORE libmemprof_preload.so
 * (LD_PRELOAD=counter.so:libmemprof_preload.so), which it forwards every call to through
 * dlsym(RTLD_NEXT). It is linked with DT_NEEDED on libmemprof_preload.so, so the loader runs
 * memprof's constructor before this one's; it counts only from its own constructor on, and keeps
 * the live set by address (an open-addressing table with linear probing and backward-shift
 * deletion, under a spin lock). At exit (an atexit handler registered by its constructor, which
 * runs before memprof's own at-exit report, registered earlier) it writes
 * "live <blocks> <bytes> total <blocks> <bytes>\n" to $COUNTER_DIR/counter-<pid>.txt: the live
 * set, and every block allocated since it started counting (a realloc's new block counts as one;
 * a realloc to 0 bytes as a free). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLOTS (1u << 22)
struct slot {
    uintptr_t address; /* 0: empty */
    size_t size;
};
static struct slot table[SLOTS];
static size_t live_blocks, live_bytes, total_blocks, total_bytes;
static int counting;
static volatile int lock_word;

static void lock(void) {
    while (__atomic_exchange_n(&lock_word, 1, __ATOMIC_ACQUIRE))
        ;
}
static void unlock(void) { __atomic_store_n(&lock_word, 0, __ATOMIC_RELEASE); }

static size_t hash(uintptr_t a) { return (size_t)((a >> 4) * 0x9E3779B97F4A7C15ull >> 40) & (SLOTS - 1); }

static void add(void *p, size_t size) {
    if (!p || !__atomic_load_n(&counting, __ATOMIC_RELAXED))
        return;
    lock();
    size_t i = hash((uintptr_t)p);
    while (table[i].address && table[i].address != (uintptr_t)p)
        i = (i + 1) & (SLOTS - 1);
    if (table[i].address == (uintptr_t)p) {
        /* Cannot happen: a live address given out twice. */
        static const char m[] = "counter: address given out twice\n";
        write(2, m, sizeof m - 1);
        abort();
    }
    table[i].address = (uintptr_t)p;
    table[i].size = size;
    live_blocks++;
    live_bytes += size;
    total_blocks++;
    total_bytes += size;
    unlock();
}

static void del(void *p) {
    if (!p)
        return;
    lock();
    size_t i = hash((uintptr_t)p);
    while (table[i].address && table[i].address != (uintptr_t)p)
        i = (i + 1) & (SLOTS - 1);
    if (table[i].address) {
        live_blocks--;
        live_bytes -= table[i].size;
        /* Backward-shift deletion. */
        size_t j = i;
        for (;;) {
            j = (j + 1) & (SLOTS - 1);
            if (!table[j].address)
                break;
            size_t home = hash(table[j].address);
            /* Move j into i unless its home lies cyclically in (i, j]. */
            if ((i <= j) ? (i < home && home <= j) : (i < home || home <= j))
                continue;
            table[i] = table[j];
            i = j;
        }
        table[i].address = 0;
        table[i].size = 0;
    }
    unlock();
}

/* dlsym may call calloc/malloc itself: served from this buffer while resolving. */
static char bootstrap[65536] __attribute__((aligned(16)));
static size_t bootstrap_used;
static int resolving;
static int from_bootstrap(void *p) { return (char *)p >= bootstrap && (char *)p < bootstrap + sizeof bootstrap; }
static void *bootstrap_alloc(size_t size) {
    size = (size + 15) & ~(size_t)15;
    if (bootstrap_used + size > sizeof bootstrap)
        return NULL;
    void *p = bootstrap + bootstrap_used;
    bootstrap_used += size;
    return p;
}

static void *(*next_malloc)(size_t);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static void *(*next_reallocarray)(void *, size_t, size_t);
static void (*next_free)(void *);
static int (*next_posix_memalign)(void **, size_t, size_t);
static void *(*next_aligned_alloc)(size_t, size_t);
static void *(*next_memalign)(size_t, size_t);
static void *(*next_valloc)(size_t);
static void *(*next_pvalloc)(size_t);

static void resolve(void) {
    if (next_free)
        return;
    resolving = 1;
    next_malloc = dlsym(RTLD_NEXT, "malloc");
    next_calloc = dlsym(RTLD_NEXT, "calloc");
    next_realloc = dlsym(RTLD_NEXT, "realloc");
    next_reallocarray = dlsym(RTLD_NEXT, "reallocarray");
    next_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    next_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    next_memalign = dlsym(RTLD_NEXT, "memalign");
    next_valloc = dlsym(RTLD_NEXT, "valloc");
    next_pvalloc = dlsym(RTLD_NEXT, "pvalloc");
    void (*f)(void *) = dlsym(RTLD_NEXT, "free");
    resolving = 0;
    __atomic_store_n(&next_free, f, __ATOMIC_RELEASE);
}

void *malloc(size_t size) {
    if (resolving)
        return bootstrap_alloc(size);
    resolve();
    void *p = next_malloc(size);
    add(p, size);
    return p;
}

void *calloc(size_t count, size_t size) {
    if (resolving)
        return bootstrap_alloc(count * size); /* zeroed: a static buffer */
    resolve();
    void *p = next_calloc(count, size);
    add(p, count * size);
    return p;
}

void free(void *p) {
    if (!p || from_bootstrap(p))
        return;
    resolve();
    del(p);
    next_free(p);
}

void *realloc(void *p, size_t size) {
    resolve();
    if (from_bootstrap(p)) {
        void *q = malloc(size);
        if (q)
            memcpy(q, p, size < 64 ? size : 64);
        return q;
    }
    /* Forgotten first: once realloc returns, another thread may get the old address. The
     * program's own blocks are never freed twice, so a failed realloc (NULL with size > 0) is
     * put back. */
    size_t old = 0;
    if (p) {
        lock();
        size_t i = hash((uintptr_t)p);
        while (table[i].address && table[i].address != (uintptr_t)p)
            i = (i + 1) & (SLOTS - 1);
        old = table[i].address ? table[i].size : (size_t)-1;
        unlock();
        del(p);
    }
    void *q = next_realloc(p, size);
    if (q)
        add(q, size);
    else if (p && size && old != (size_t)-1) {
        add(p, old); /* still the caller's: live again, not a new allocation */
        lock();
        total_blocks--;
        total_bytes -= old;
        unlock();
    }
    return q;
}

void *reallocarray(void *p, size_t count, size_t size) {
    size_t bytes;
    if (__builtin_mul_overflow(count, size, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, bytes);
}

int posix_memalign(void **out, size_t align, size_t size) {
    resolve();
    int r = next_posix_memalign(out, align, size);
    if (r == 0)
        add(*out, size);
    return r;
}

void *aligned_alloc(size_t align, size_t size) {
    resolve();
    void *p = next_aligned_alloc(align, size);
    add(p, size);
    return p;
}

void *memalign(size_t align, size_t size) {
    resolve();
    void *p = next_memalign(align, size);
    add(p, size);
    return p;
}

void *valloc(size_t size) {
    resolve();
    void *p = next_valloc(size);
    add(p, size);
    return p;
}

void *pvalloc(size_t size) {
    resolve();
    void *p = next_pvalloc(size);
    add(p, size);
    return p;
}

static void report(void) {
    __atomic_store_n(&counting, 0, __ATOMIC_RELAXED);
    const char *dir = getenv("COUNTER_DIR");
    if (!dir)
        return;
    char path[4096], line[128];
    snprintf(path, sizeof path, "%s/counter-%d.txt", dir, (int)getpid());
    lock();
    int n = snprintf(line, sizeof line, "live %zu %zu total %zu %zu\n", live_blocks, live_bytes,
                     total_blocks, total_bytes);
    unlock();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        write(fd, line, n);
        close(fd);
    }
}

static void prepare(void) { lock(); }
static void after(void) { unlock(); }

__attribute__((constructor)) static void start(void) {
    resolve();
    pthread_atfork(prepare, after, after);
    atexit(report);
    __atomic_store_n(&counting, 1, __ATOMIC_RELAXED);
}
