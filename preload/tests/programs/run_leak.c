/* Leaks 5,000 nodes of 128 bytes from make_node, prints one line, and exits with the status its
   first argument gives (0 without one). */
#include <stdio.h>
#include <stdlib.h>

struct node {
    char pad[128];
};

__attribute__((noinline)) static struct node *make_node(void) {
    return malloc(sizeof(struct node)); /* make_node */
}

int main(int argc, char **argv) {
    for (int i = 0; i < 5000; i++) {
        struct node *volatile node = make_node();
        (void)node;
    }
    printf("leaked\n");
    return argc > 1 ? atoi(argv[1]) : 0;
}
