/* A program memprof attach refuses, by how it is built (the test's -D flags):
 * OWN_MALLOC: its malloc is its own (a bump allocator, as a program linked with jemalloc or
 * tcmalloc has one); BUILT_IN: it has a memprof_ C function (memprof built in, include/memprof.h);
 * THREAD: a second thread, which sleeps (its id is no process's); NODUMP: not dumpable
 * (prctl(PR_SET_DUMPABLE, 0)), which forbids its own user to read or trace it.
 * Prints "ready", then "alive" at each SIGUSR2, and ends at stdin's end. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifdef OWN_MALLOC
static char arena[1 << 24];
static size_t used;
void *malloc(size_t n) { void *p = arena + used; used += (n + 15) & ~(size_t)15; return p; }
void free(void *p) { (void)p; }
void *calloc(size_t c, size_t n) { void *p = malloc(c * n); memset(p, 0, c * n); return p; }
void *realloc(void *old, size_t n) { void *p = malloc(n); if (old) memcpy(p, old, n); return p; }
#endif

#ifdef BUILT_IN
__attribute__((used, noinline)) int memprof_dump(const char *path) { return path != 0; }
#endif

#ifdef THREAD
static void *sleeper(void *arg) { (void)arg; for (;;) pause(); return NULL; }
#endif

static volatile sig_atomic_t asked = 0;
static void on_usr2(int s) { (void)s; asked++; }

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr2;
    sigaction(SIGUSR2, &sa, NULL);
#ifdef NODUMP
    prctl(PR_SET_DUMPABLE, 0);
#endif
#ifdef THREAD
    pthread_t thread;
    pthread_create(&thread, NULL, sleeper, NULL);
#endif
    printf("ready\n");
    fflush(stdout);
    int done = 0;
    for (;;) {
        char c;
        ssize_t n = read(0, &c, 1);
        while (done < asked) { done++; printf("alive %d\n", done); fflush(stdout); }
        if (n == 0) break;
    }
    return 0;
}
