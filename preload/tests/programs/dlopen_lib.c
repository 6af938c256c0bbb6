/* Loaded and unloaded 100 times by lifecycle.c's dlopen mode: allocates, frees, and leaks one
 * 777-byte block per call. */
#include <stdlib.h>
#include <string.h>

void *lib_work(int i) {
    for (int j = 0; j < 20; j++) {
        char *p = malloc(100 + j + i);
        memset(p, j, 100 + j + i);
        p = realloc(p, 1000 + j);
        free(p);
    }
    void *kept = malloc(777);
    memset(kept, i, 777);
    return kept;
}
