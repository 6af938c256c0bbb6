/* A running process for memprof attach's tests. Before "ready" it makes 2000 blocks it frees
 * while it runs (the blocks from before the attach). THREADS threads (argv[1]) allocate and free
 * all the time. Each SIGUSR1 makes the main thread leak LEAK_COUNT blocks of LEAK_SIZE bytes at
 * leak_site and print "leaked N"; SIGUSR2 makes it print "alive" and the number of rounds its
 * threads made; stdin's end ends it ("bye"). argv[2] is the main thread's wait between rounds:
 * "read" blocks in read(2) on stdin (a pipe), "sleep" in sleep(3), "fork" forks a child that
 * allocates and exits, waits for it, and goes on 5 ms later (a process attached to while it
 * forks, a hundred times a second or more: each fork is an event gdb handles while attached).
 * SIGHUP's handler sleeps 3 s (a process attached to while inside a signal handler), then prints
 * "slept". */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <poll.h>
#include <time.h>
#include <sys/wait.h>

#define LEAK_COUNT 37
#define LEAK_SIZE 1500

static volatile sig_atomic_t leak_asked = 0, alive_asked = 0;
static volatile long rounds = 0;
static void *kept[100000];
static int nkept = 0;

static void on_usr1(int s) { (void)s; leak_asked++; }
static void on_usr2(int s) { (void)s; alive_asked++; }
static void on_hup(int s) {
    (void)s;
    struct timespec t = { 3, 0 };
    while (nanosleep(&t, &t) != 0) {}
    static const char said[] = "slept\n";
    write(1, said, sizeof said - 1);
}

__attribute__((noinline)) void *leak_site(size_t n) {
    void *p = malloc(n); /* LEAK_LINE */
    memset(p, 7, n);
    return p;
}

static void *churn(void *arg) {
    (void)arg;
    for (;;) {
        char *blocks[16];
        for (int i = 0; i < 16; i++) { blocks[i] = malloc(24 + i * 40); blocks[i][0] = (char)i; }
        for (int i = 0; i < 16; i++) { blocks[i] = realloc(blocks[i], 64 + i * 50); }
        for (int i = 0; i < 16; i++) free(blocks[i]);
        __atomic_add_fetch(&rounds, 1, __ATOMIC_RELAXED);
        usleep(200);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    int sleeping = argc > 2 && strcmp(argv[2], "sleep") == 0;
    int forking = argc > 2 && strcmp(argv[2], "fork") == 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_flags = 0; /* a read or a sleep the signal interrupts returns, and the loop sees it */
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_usr2;
    sigaction(SIGUSR2, &sa, NULL);
    sa.sa_handler = on_hup;
    sigaction(SIGHUP, &sa, NULL);
    static void *before[2000];
    for (int i = 0; i < 2000; i++) before[i] = malloc(40 + i % 300);
    int freed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        pthread_create(&t, NULL, churn, NULL);
    }
    printf("ready\n");
    fflush(stdout);
    int leaks_done = 0, alive_done = 0;
    for (;;) {
        while (leaks_done < leak_asked) {
            for (int i = 0; i < LEAK_COUNT; i++) kept[nkept++] = leak_site(LEAK_SIZE);
            leaks_done++;
            printf("leaked %d\n", leaks_done);
            fflush(stdout);
        }
        while (alive_done < alive_asked) {
            alive_done++;
            printf("alive %d\n", alive_done);
            fflush(stdout);
        }
        if (freed < 2000) {
            for (int i = 0; i < 20 && freed < 2000; i++) free(before[freed++]);
        }
        if (forking) {
            pid_t child = fork();
            if (child == 0) {
                char *p = malloc(100);
                memset(p, 1, 100);
                free(p);
                _exit(0);
            }
            if (child > 0) waitpid(child, NULL, 0);
            struct pollfd p = { 0, POLLIN, 0 };
            if (poll(&p, 1, 5) == 1) {
                char c;
                if (read(0, &c, 1) <= 0) break;
            }
        } else if (sleeping) {
            sleep(1);
            struct pollfd p = { 0, POLLIN, 0 };
            if (poll(&p, 1, 0) == 1) {
                char c;
                if (read(0, &c, 1) <= 0) break;
            }
        } else {
            char c;
            ssize_t n = read(0, &c, 1);
            if (n == 0) break;
        }
    }
    printf("bye\n");
    return 0;
}
