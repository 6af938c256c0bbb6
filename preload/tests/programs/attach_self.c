/* Loads the library by dlopen as `memprof attach` has a running process do, then calls
 * memprof_attach and memprof_detach itself. argv[1]: the library; argv[2]: its settings;
 * argv[3]: a library to dlopen while attached (dlopen_lib.c, whose lib_work leaks 777 bytes).
 * Blocks made before the attach are freed and reallocated while attached; a leak after the detach
 * is not recorded. Prints "ok" when every call answered as expected. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *kept[64];

__attribute__((noinline)) void *leak_site(size_t n) {
    void *p = malloc(n); /* LEAK_LINE */
    memset(p, 1, n);
    return p;
}

__attribute__((noinline)) char *leak_strdup(const char *s) {
    return strdup(s);
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    void *before[100];
    for (int i = 0; i < 100; i++) before[i] = malloc(100 + i);
    void *grown = malloc(50);

    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!library) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    int (*attach)(const char *) = (int (*)(const char *))dlsym(library, "memprof_attach");
    int (*detach)(void) = (int (*)(void))dlsym(library, "memprof_detach");
    if (!attach || !detach) { fprintf(stderr, "no memprof_attach/memprof_detach\n"); return 1; }
    int changed = attach(argv[2]);
    if (changed <= 0) { fprintf(stderr, "memprof_attach: %d\n", changed); return 1; }
    if (attach(argv[2]) != -2) { fprintf(stderr, "a second memprof_attach was not refused\n"); return 1; }

    /* Blocks from before the attach: freed and reallocated through the library. */
    for (int i = 0; i < 100; i++) free(before[i]);
    grown = realloc(grown, 5000);
    free(grown);

    for (int i = 0; i < 25; i++) kept[i] = leak_site(700);
    kept[25] = leak_strdup("a string of some length");

    void *later = dlopen(argv[3], RTLD_NOW);
    if (!later) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    void *(*work)(int) = (void *(*)(int))dlsym(later, "lib_work");
    kept[26] = work(1);

    int restored = detach();
    if (restored != changed && restored < changed) {
        fprintf(stderr, "memprof_detach put back %d entries of %d\n", restored, changed);
        return 1;
    }
    if (detach() != -1) { fprintf(stderr, "a second memprof_detach was not refused\n"); return 1; }
    for (int i = 30; i < 40; i++) kept[i] = leak_site(700);
    printf("ok\n");
    return 0;
}
