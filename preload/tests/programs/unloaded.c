/* dlopens the library in argv[1], has its lib_alloc leak 3 blocks of 4321 bytes, dlcloses it,
 * checks that it is gone, then leaks 2 blocks of 5432 bytes of its own and exits. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *kept[5];

static int holds(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    return info->dlpi_name && strstr(info->dlpi_name, (const char *)data) != NULL;
}

__attribute__((noinline)) void *after_unload(void) { return malloc(5432); /* AFTER_UNLOAD_LINE */ }

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    void *handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        printf("dlopen: %s\n", dlerror());
        return 1;
    }
    void *(*lib_alloc)(size_t) = (void *(*)(size_t))dlsym(handle, "lib_alloc");
    if (!lib_alloc) {
        printf("dlsym: %s\n", dlerror());
        return 1;
    }
    for (int i = 0; i < 3; i++)
        kept[i] = lib_alloc(4321);
    if (dlclose(handle)) {
        printf("dlclose: %s\n", dlerror());
        return 1;
    }
    if (dl_iterate_phdr(holds, "libunloaded")) {
        printf("the library is still loaded\n");
        return 1;
    }
    for (int i = 3; i < 5; i++)
        kept[i] = after_unload();
    printf("ok\n");
    return 0;
}
