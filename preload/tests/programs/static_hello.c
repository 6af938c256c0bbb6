/* Linked with -static: no library can be preloaded into it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    char *volatile p = malloc(1000);
    strcpy(p, "static ok");
    printf("%s\n", p);
    free(p);
    return 0;
}
