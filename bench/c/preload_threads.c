/* The threaded C workload of scripts/preload-overhead.py --threads: N operations (an allocation
 * and, in this thread or another, its free) split over 8 threads, most blocks freed by another
 * thread, for a preloaded recorder (libmemprof_preload.so, heaptrack) to record.
 *
 *     cc -O2 -g -pthread -o preload_threads bench/c/preload_threads.c
 *     ./preload_threads N
 *
 * Thread i allocates N / 8 blocks of mixed small sizes (16 to 256 B for 70%, to 1 KiB for 25%,
 * to 4 KiB for 5%), writes a stamp into each, and hands three in four of them to thread
 * (i + 1) % 8 through a single-producer single-consumer ring (a power-of-two array of pointers
 * and two atomic indices, no lock). Between its own allocations each thread takes what its
 * neighbour handed it from its incoming ring and frees it. The handoff costs a few loads and
 * stores: when the ring is full the block is freed where it was made, so no thread ever waits for
 * another while it has work, and the allocator (and whatever records it) dominates. The other
 * blocks are freed at once or, one in eight, after the next few allocations (a small ring of the
 * thread's own). When a thread has made its share it marks its outgoing ring closed, and
 * keeps freeing what arrives until its incoming ring is closed and empty.
 *
 * Every block is freed exactly once, by whichever thread, and its stamp read then; the program
 * prints N, how many blocks another thread freed (it varies with the scheduling) and the sum of
 * the stamps (it does not).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 8
#define RING 32768 /* blocks in flight from one thread to the next, at most */
#define LOCAL 8   /* blocks a thread keeps for a few allocations before freeing them */

struct ring {
    _Alignas(64) _Atomic size_t head; /* the consumer's: next slot to take */
    _Alignas(64) _Atomic size_t tail; /* the producer's: next slot to fill */
    _Alignas(64) _Atomic int closed;  /* the producer has made its share */
    void *slots[RING];
};

struct worker {
    int index;
    long share;           /* blocks to allocate */
    struct ring *in, *out;
    uint64_t sum;         /* stamps of the blocks this thread freed */
    long freed_here;      /* blocks from the other thread it freed */
};

static struct ring rings[THREADS]; /* rings[i]: from thread i to thread (i + 1) % THREADS */

static inline uint64_t next(uint64_t *state) {
    /* xorshift64* */
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 0x2545f4914f6cdd1dULL;
}

static size_t size_of(uint64_t r) {
    unsigned pick = r % 100;
    if (pick < 70) return 16 + (r >> 8) % 241;
    if (pick < 95) return 256 + (r >> 8) % 769;
    return 1024 + (r >> 8) % 3073;
}

/* Reads the block's stamp (its first 8 bytes) and frees it. */
static uint64_t release(void *block) {
    uint64_t stamp;
    memcpy(&stamp, block, sizeof stamp);
    free(block);
    return stamp;
}

static int push(struct ring *ring, void *block) {
    size_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
    size_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
    if (tail - head == RING) return 0;
    ring->slots[tail % RING] = block;
    atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
    return 1;
}

/* Frees what the neighbour handed over; returns how many. */
static long drain(struct worker *w) {
    size_t head = atomic_load_explicit(&w->in->head, memory_order_relaxed);
    size_t tail = atomic_load_explicit(&w->in->tail, memory_order_acquire);
    for (size_t i = head; i != tail; i++) w->sum += release(w->in->slots[i % RING]);
    atomic_store_explicit(&w->in->head, tail, memory_order_release);
    w->freed_here += (long)(tail - head);
    return (long)(tail - head);
}

static void *work(void *arg) {
    struct worker *w = arg;
    uint64_t state = 0x9e3779b97f4a7c15ULL * (uint64_t)(w->index + 1);
    void *local[LOCAL] = {0};
    for (long made = 0; made < w->share; made++) {
        uint64_t r = next(&state);
        size_t size = size_of(r);
        unsigned char *block = malloc(size);
        if (!block) abort();
        uint64_t stamp = (uint64_t)w->index << 40 | (uint64_t)made;
        memcpy(block, &stamp, sizeof stamp);
        block[size - 1] = (unsigned char)size;
        unsigned pick = (r >> 32) & 7;
        if (pick < 6) {
            if (!push(w->out, block)) w->sum += release(block);
        } else if (pick == 6) {
            w->sum += release(block);
        } else {
            size_t slot = (r >> 40) % LOCAL;
            if (local[slot]) w->sum += release(local[slot]);
            local[slot] = block;
        }
        if ((made & 15) == 0) drain(w);
    }
    for (int i = 0; i < LOCAL; i++)
        if (local[i]) w->sum += release(local[i]);
    atomic_store_explicit(&w->out->closed, 1, memory_order_release);
    for (;;) {
        int closed = atomic_load_explicit(&w->in->closed, memory_order_acquire);
        if (drain(w) == 0 && closed) break;
        if (!closed) sched_yield();
    }
    return NULL;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    pthread_t threads[THREADS];
    struct worker workers[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (struct worker){
            .index = i,
            .share = n / THREADS + (i < n % THREADS),
            .in = &rings[(i + THREADS - 1) % THREADS],
            .out = &rings[i],
        };
    }
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&threads[i], NULL, work, &workers[i]) != 0) abort();
    uint64_t sum = 0;
    long across = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        sum += workers[i].sum;
        across += workers[i].freed_here;
    }
    printf("%ld operations, %ld freed by another thread, checksum %llu\n", n, across,
           (unsigned long long)sum);
    return 0;
}
