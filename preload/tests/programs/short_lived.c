/* Processes that end early or abruptly, one per mode (argv[1]): `now` calls `_exit` at once;
 * `many` makes 100,000 allocations (kept) and calls `_exit`; `sleep` makes 1,000 allocations
 * and waits to be killed. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *volatile sink;

__attribute__((noinline)) void *short_lived_keep(size_t n) {
    void *p = malloc(n);
    sink = p;
    return p;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "now"))
        _exit(0);
    if (!strcmp(mode, "many")) {
        for (int i = 0; i < 100000; i++)
            short_lived_keep(24 + i % 100);
        _exit(0);
    }
    if (!strcmp(mode, "sleep")) {
        for (int i = 0; i < 1000; i++)
            short_lived_keep(777);
        for (;;)
            pause();
    }
    return 1;
}
