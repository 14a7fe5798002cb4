/*
 * fifo_example.c - hand samples from a producer process to a consumer
 * process through an rtmgr RT-FIFO (shared memory, fixed-size records).
 *
 * Build:  cc -std=c11 -Wall -Wextra -Werror fifo_example.c $(pkg-config --cflags --libs rtmgr-rt)
 * Run:    ./a.out [records]
 *
 * The child is the producer (in a real application: the SCHED_FIFO task; it
 * never blocks, rtf_push reports RTF_FULL instead). The parent is the
 * consumer and sleeps in rtf_pop until records arrive.
 */
#define _POSIX_C_SOURCE 200809L
#include <rtmgr.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct sample {
    uint64_t seq;
    double value;
};

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000;
    char name[64];
    snprintf(name, sizeof name, "/rtmgr-example-%d", (int)getpid());

    RtfFifo *rx = NULL;
    RtfStatus st = rtf_create(name, sizeof(struct sample), 256, RTF_CONSUMER, &rx);
    if (st != RTF_OK) {
        fprintf(stderr, "rtf_create: %s (%s)\n", rtf_strerror(st), strerror(errno));
        return 1;
    }

    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        RtfFifo *tx = NULL;
        st = rtf_open(name, sizeof(struct sample), RTF_PRODUCER, &tx);
        if (st != RTF_OK) {
            fprintf(stderr, "rtf_open: %s\n", rtf_strerror(st));
            _exit(1);
        }
        uint64_t full = 0;
        for (uint64_t i = 0; i < n; i++) {
            struct sample s = { .seq = i, .value = (double)i * 0.5 };
            while ((st = rtf_push(tx, &s, sizeof s)) == RTF_FULL)
                full++; /* an RT task would count and drop instead of retrying */
            if (st != RTF_OK) {
                fprintf(stderr, "rtf_push: %s\n", rtf_strerror(st));
                _exit(1);
            }
        }
        rtf_close(tx);
        printf("producer: %llu records pushed, %llu pushes found the FIFO full\n",
               (unsigned long long)n, (unsigned long long)full);
        fflush(stdout);
        _exit(0);
    }

    int rc = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct sample s;
        st = rtf_pop(rx, &s, sizeof s, 5000000000LL); /* sleep up to 5 s */
        if (st != RTF_OK) {
            fprintf(stderr, "rtf_pop: %s after %llu records\n", rtf_strerror(st),
                    (unsigned long long)i);
            rc = 1;
            break;
        }
        if (s.seq != i || s.value != (double)i * 0.5) {
            fprintf(stderr, "record %llu out of order (got %llu)\n", (unsigned long long)i,
                    (unsigned long long)s.seq);
            rc = 1;
            break;
        }
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        rc = 1;
    if (rc == 0)
        printf("consumer: %llu records received in order\n", (unsigned long long)n);
    rtf_close(rx);
    rtf_unlink(name);
    return rc;
}
