/* A process that replaces its program while memprof attach has it. It prints "ready", then reads
 * commands from stdin, a line each: "leak" keeps ten blocks of 300 bytes ("leaked"); "execv" and
 * "execl" run this program again through that function, with the argument "again": the new
 * program prints "replaced", and "bye" at stdin's end; "execfail" calls execv on a program that
 * does not exist ("execv failed"); "_exit" leaves through `_exit(0)`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *kept[10];

static void leak(void) {
    for (int i = 0; i < 10; i++) {
        kept[i] = malloc(300); /* LEAK_LINE */
        memset(kept[i], i, 300);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "again") == 0) {
        printf("replaced\n");
    } else {
        printf("ready\n");
    }
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strcmp(line, "leak\n") == 0) {
            leak();
            printf("leaked\n");
        } else if (strcmp(line, "execv\n") == 0) {
            char *again[] = {argv[0], "again", NULL};
            execv("/proc/self/exe", again);
            printf("execv failed\n");
        } else if (strcmp(line, "execfail\n") == 0) {
            char *none[] = {"none", NULL};
            execv("/nonexistent/program", none);
            printf("execv failed\n");
        } else if (strcmp(line, "_exit\n") == 0) {
            _exit(0);
        } else if (strcmp(line, "execl\n") == 0) {
            execl("/proc/self/exe", argv[0], "again", (char *)NULL);
            printf("execl failed\n");
        }
        fflush(stdout);
    }
    printf("bye\n");
    return 0;
}
