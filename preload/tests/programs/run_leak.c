/* Leaks 5,000 nodes of 128 bytes from make_node, prints one line, and exits with the status its
   first argument gives (0 without one); with a second argument `wait`, it first waits for Ctrl-C
   (SIGINT) and then exits with 130, as programs that catch it do. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct node {
    char pad[128];
};

__attribute__((noinline)) static struct node *make_node(void) {
    return malloc(sizeof(struct node)); /* make_node */
}

static volatile sig_atomic_t interrupted;

static void on_interrupt(int signal) {
    (void)signal;
    interrupted = 1;
}

int main(int argc, char **argv) {
    for (int i = 0; i < 5000; i++) {
        struct node *volatile node = make_node();
        (void)node;
    }
    printf("leaked\n");
    if (argc > 2 && strcmp(argv[2], "wait") == 0) {
        /* Any thread may take the signal (the library's have it unblocked too). */
        signal(SIGINT, on_interrupt);
        fflush(stdout);
        while (!interrupted)
            usleep(10000);
        return 130;
    }
    return argc > 1 ? atoi(argv[1]) : 0;
}
