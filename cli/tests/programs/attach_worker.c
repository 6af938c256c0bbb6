/* A process that forks a worker while memprof attach has it. It prints "ready", then reads
 * commands from stdin, a line each: "fork" forks a child that allocates and frees for 3 s and
 * then returns from main (its at-exit handlers run, unlike _exit's), and prints "forked";
 * "wait" waits for the child and prints "child ended N" (its exit status); stdin's end ends it
 * ("bye"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int work(void) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    long sum = 0;
    do {
        for (int i = 0; i < 1000; i++) {
            char *p = malloc(64 + i % 200);
            p[0] = (char)i;
            sum += p[0];
            free(p);
        }
        usleep(1000);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec - start.tv_sec < 3);
    return sum == 0 ? 1 : 0;
}

int main(void) {
    printf("ready\n");
    fflush(stdout);
    char line[64];
    pid_t child = -1;
    while (fgets(line, sizeof line, stdin)) {
        if (strcmp(line, "fork\n") == 0) {
            child = fork();
            if (child == 0) return work();
            printf("forked\n");
        } else if (strcmp(line, "wait\n") == 0 && child > 0) {
            int status = 0;
            waitpid(child, &status, 0);
            printf("child ended %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        }
        fflush(stdout);
    }
    printf("bye\n");
    return 0;
}
