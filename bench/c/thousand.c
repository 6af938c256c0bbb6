/* Start-up of the preloaded library: a program that makes 1,000 allocations and frees them
 * (scripts/preload-startup.sh). Built with -fno-builtin so the compiler keeps every call. */
#include <stdlib.h>

int main(void) {
    void *blocks[1000];
    for (int i = 0; i < 1000; i++) blocks[i] = malloc(16 + i);
    for (int i = 0; i < 1000; i++) free(blocks[i]);
    return 0;
}
