/* Loaded by unloaded.c, which calls lib_alloc and then unloads the library: the blocks it leaks
 * must still be named after lib_alloc and this file's line once the library is gone. */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void *lib_alloc(size_t size) {
    void *block = malloc(size); /* LIB_ALLOC_LINE */
    memset(block, 7, size);
    return block;
}
