/* Started paused (MEMPROF_PAUSED=1, MEMPROF_TOGGLE_SIGNAL=USR1): leaks 10 blocks of 1212 bytes
 * from before_signal, raises SIGUSR1 at itself, then leaks 7 blocks of 1313 bytes from
 * after_signal and frees a block made while paused. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *volatile sink;

__attribute__((noinline)) void before_signal(void) {
    void *p = malloc(1212);
    memset(p, 1, 1212);
    sink = p;
}

__attribute__((noinline)) void after_signal(void) {
    void *p = malloc(1313);
    memset(p, 1, 1313);
    sink = p;
}

int main(void) {
    for (int i = 0; i < 10; i++)
        before_signal();
    void *made_paused = malloc(5000);
    memset(made_paused, 0, 5000);
    if (raise(SIGUSR1)) {
        printf("raise failed\n");
        return 1;
    }
    for (int i = 0; i < 7; i++)
        after_signal();
    free(made_paused);
    printf("ok\n");
    return 0;
}
