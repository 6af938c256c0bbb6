/* Hostile lifecycles under the library, one per mode (argv[1]); each prints what the test needs
 * on stdout and exits 0 when its own checks held. Every leak is in a noinline function of its own,
 * with a size of its own. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void *volatile sink;

/* A macro, not a function: the allocation's first frame is the function that names it. */
#define churn(size)                                                                           \
    ({                                                                                        \
        size_t size_ = (size);                                                                \
        void *p_ = malloc(size_);                                                             \
        memset(p_, 1, size_);                                                                 \
        sink = p_;                                                                            \
        p_;                                                                                   \
    })

/* threads: 16 threads each leak 50 blocks of 4321 bytes and free the rest, then exit. */
__attribute__((noinline)) void thread_leak(void) { churn(4321); }

static void *thread_main(void *arg) {
    (void)arg;
    for (int i = 0; i < 100; i++) {
        if (i % 2)
            thread_leak();
        else
            free(churn(100 + i));
    }
    return NULL;
}

static int threads(void) {
    for (int round = 0; round < 4; round++) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
            pthread_create(&t[i], NULL, thread_main, NULL);
        for (int i = 0; i < 4; i++)
            pthread_join(t[i], NULL);
    }
    printf("ok\n");
    return 0;
}

/* key-destructor: a pthread key's destructor mallocs, frees, and leaks one 2345-byte block, at
 * the exit of each of 8 threads. */
static pthread_key_t key;
__attribute__((noinline)) void key_destructor_leak(void) { churn(2345); }
static void key_destructor(void *value) {
    free(value);
    free(churn(64));
    key_destructor_leak();
}
static void *key_thread(void *arg) {
    (void)arg;
    pthread_setspecific(key, churn(48));
    return NULL;
}
static int key_destructor_mode(void) {
    pthread_key_create(&key, key_destructor);
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, key_thread, NULL);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    printf("ok\n");
    return 0;
}

/* fork: the parent leaks 3 blocks of 1111 bytes, then forks; the child leaks 5 of 2222 and
 * exits normally. Prints "child <pid>". */
__attribute__((noinline)) void leak_parent(void) { churn(1111); }
__attribute__((noinline)) void leak_child(void) { churn(2222); }
static int fork_mode(void) {
    for (int i = 0; i < 3; i++)
        leak_parent();
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        for (int i = 0; i < 5; i++)
            leak_child();
        for (int i = 0; i < 100; i++)
            free(churn(300));
        exit(0);
    }
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) {
        printf("child failed: %x\n", status);
        return 1;
    }
    printf("child %d\n", (int)child);
    return 0;
}

/* exec: forks a child that execs this program in mode exec-target (which leaks 4 blocks of
 * 3131 bytes and prints "target <pid>"); waits for it. */
__attribute__((noinline)) void leak_exec_target(void) { churn(3131); }
static int exec_mode(const char *self) {
    leak_parent();
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        execl(self, self, "exec-target", (char *)NULL);
        _exit(127);
    }
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) {
        printf("exec'd child failed: %x\n", status);
        return 1;
    }
    return 0;
}
static int exec_target(void) {
    for (int i = 0; i < 4; i++)
        leak_exec_target();
    printf("target %d\n", (int)getpid());
    return 0;
}

/* _exit: a vfork child leaves through _exit at once (it shares this process's memory: its _exit
 * must close nothing), then this process allocates 1000 blocks and leaves through _exit. */
static int underscore_exit(void) {
    pid_t child = vfork();
    if (child == 0)
        _exit(0);
    int status;
    if (child < 0 || waitpid(child, &status, 0) != child)
        return 1;
    for (int i = 0; i < 1000; i++)
        churn(i + 1);
    printf("ok\n");
    fflush(stdout);
    _exit(0);
}

/* exit-in-handler: allocates and frees without end until a timer's handler calls _exit(3). */
static void exit_now(int signal) {
    (void)signal;
    _exit(3);
}
static int exit_in_handler(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = exit_now;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval when = {{0, 0}, {0, 200000}};
    setitimer(ITIMER_REAL, &when, NULL);
    for (unsigned i = 0;; i++) {
        void *p = churn(16 + i % 4000);
        if (i % 3)
            free(p);
    }
}

/* exit-thread: 4 threads allocate and free without end; another thread calls exit(0). */
static void *allocate_forever(void *arg) {
    (void)arg;
    for (unsigned i = 0;; i++) {
        void *p = churn(16 + i % 4000);
        if (i % 3)
            free(p);
    }
    return NULL;
}
static void *exiter(void *arg) {
    (void)arg;
    struct timespec t = {0, 200 * 1000 * 1000};
    nanosleep(&t, NULL);
    printf("exiting\n");
    fflush(stdout);
    exit(0);
}
static int exit_thread(void) {
    pthread_t t;
    for (int i = 0; i < 4; i++)
        pthread_create(&t, NULL, allocate_forever, NULL);
    pthread_create(&t, NULL, exiter, NULL);
    for (;;)
        pause();
}

/* signal: a SIGUSR2 handler mallocs, frees, and leaks one 3456-byte block per signal it handles;
 * the signals come from the main thread itself (raise) and from another thread
 * (pthread_kill), while 2 more threads allocate. Prints "handled <n>". */
static volatile sig_atomic_t handled;
__attribute__((noinline)) void signal_leak(void) { churn(3456); }
static void handler(int sig) {
    (void)sig;
    free(churn(200));
    void *p = calloc(3, 100);
    p = realloc(p, 600);
    free(p);
    signal_leak();
    handled++;
}
static volatile int stop;
static void *allocate_until_stop(void *arg) {
    (void)arg;
    for (unsigned i = 0; !stop; i++)
        free(churn(16 + i % 2000));
    return NULL;
}
static void *signaller(void *arg) {
    pthread_t target = *(pthread_t *)arg;
    for (int i = 0; i < 200; i++) {
        pthread_kill(target, SIGUSR2);
        struct timespec t = {0, 200 * 1000};
        nanosleep(&t, NULL);
    }
    return NULL;
}
static int signal_mode(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
    for (int i = 0; i < 50; i++)
        raise(SIGUSR2);
    pthread_t workers[2], sender, self = pthread_self();
    for (int i = 0; i < 2; i++)
        pthread_create(&workers[i], NULL, allocate_until_stop, NULL);
    pthread_create(&sender, NULL, signaller, &self);
    /* The main thread does not allocate while the other thread signals it: the C library's
     * malloc is not async-signal-safe, and a handler interrupting it could deadlock in it. */
    volatile unsigned long spin = 0;
    void *done;
    while (pthread_tryjoin_np(sender, &done) != 0)
        spin++;
    stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(workers[i], NULL);
    printf("handled %d\n", (int)handled);
    return 0;
}

/* dlopen: 100 times, dlopen the library in argv[2], call its lib_work (which allocates, frees,
 * and leaks one 777-byte block) through call_library, dlclose it; then leak 5 blocks of 6543
 * bytes from after_dlclose. */
__attribute__((noinline)) void call_library(void *(*work)(int), int i) { sink = work(i); }
__attribute__((noinline)) void after_dlclose(void) { churn(6543); /* AFTER_DLCLOSE_LINE */ }
static int dlopen_mode(const char *library) {
    for (int i = 0; i < 100; i++) {
        void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            printf("dlopen: %s\n", dlerror());
            return 1;
        }
        void *(*work)(int) = (void *(*)(int))dlsym(handle, "lib_work");
        if (!work) {
            printf("dlsym: %s\n", dlerror());
            return 1;
        }
        call_library(work, i);
        if (dlclose(handle)) {
            printf("dlclose: %s\n", dlerror());
            return 1;
        }
    }
    for (int i = 0; i < 5; i++)
        after_dlclose();
    printf("ok\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    const char *mode = argv[1];
    if (!strcmp(mode, "threads"))
        return threads();
    if (!strcmp(mode, "key-destructor"))
        return key_destructor_mode();
    if (!strcmp(mode, "fork"))
        return fork_mode();
    if (!strcmp(mode, "exec"))
        return exec_mode(argv[0]);
    if (!strcmp(mode, "exec-target"))
        return exec_target();
    if (!strcmp(mode, "_exit"))
        return underscore_exit();
    if (!strcmp(mode, "exit-in-handler"))
        return exit_in_handler();
    if (!strcmp(mode, "exit-thread"))
        return exit_thread();
    if (!strcmp(mode, "signal"))
        return signal_mode();
    if (!strcmp(mode, "dlopen") && argc > 2)
        return dlopen_mode(argv[2]);
    return 2;
}
