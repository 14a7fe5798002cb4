/*
 * fifo_test.c - checks of the rtf_* C API from C: status codes, full/empty,
 * timeouts, record-size and header validation. Run by `cargo test -p rtmgr-rt
 * --test c_api` (static and shared builds). Exit status 0 = all checks passed.
 */
#define _GNU_SOURCE
#include <rtmgr.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                            \
        }                                                                          \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
    char name[64];
    snprintf(name, sizeof name, "rtmgr-ctest-%d", (int)getpid());
    RtfFifo *tx = NULL, *rx = NULL;
    uint32_t v = 0, out = 0;

    CHECK(rtf_create(name, 4, 3, RTF_PRODUCER, &tx) == RTF_OK);
    CHECK(rtf_create(name, 4, 3, RTF_PRODUCER, &rx) == RTF_EOS && errno == EEXIST);
    CHECK(rtf_open(name, 8, RTF_CONSUMER, &rx) == RTF_ERECORDSIZE);
    CHECK(rtf_open(name, 4, RTF_PRODUCER, &rx) == RTF_EBUSY);
    CHECK(rtf_open(name, 4, RTF_CONSUMER, &rx) == RTF_OK);
    CHECK(rtf_capacity(rx) == 3 && rtf_record_size(tx) == 4);

    CHECK(rtf_pop(rx, &out, sizeof out, 0) == RTF_EMPTY);
    double t0 = now_s();
    CHECK(rtf_pop(rx, &out, sizeof out, 20000000) == RTF_TIMEDOUT);
    CHECK(now_s() - t0 >= 0.019);
    for (v = 1; v <= 3; v++)
        CHECK(rtf_push(tx, &v, sizeof v) == RTF_OK);
    CHECK(rtf_push(tx, &v, sizeof v) == RTF_FULL);
    CHECK(rtf_push(tx, &v, 2) == RTF_EINVAL);
    CHECK(rtf_push(rx, &v, sizeof v) == RTF_EINVAL);
    CHECK(rtf_set_wake(rx, RTF_WAKE_LAZY) == RTF_EINVAL);
    CHECK(rtf_set_wake(tx, RTF_WAKE_LAZY) == RTF_OK);
    for (uint32_t want = 1; want <= 3; want++) {
        CHECK(rtf_pop(rx, &out, sizeof out, -1) == RTF_OK);
        CHECK(out == want);
    }
    CHECK(rtf_close(tx) == RTF_OK);
    CHECK(rtf_close(rx) == RTF_OK);
    CHECK(rtf_close(NULL) == RTF_OK);
    CHECK(rtf_unlink(name) == RTF_OK);
    CHECK(rtf_open(name, 0, RTF_CONSUMER, &rx) == RTF_EOS && errno == ENOENT);
    CHECK(rtf_open(NULL, 0, RTF_CONSUMER, &rx) == RTF_EINVAL);

    /* A file that is not an RT-FIFO: a clear error, not a crash. */
    int fd = memfd_create("not-a-fifo", 0);
    CHECK(fd >= 0);
    char junk[4096];
    memset(junk, 0x5a, sizeof junk);
    CHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
    CHECK(rtf_open_fd(fd, 0, RTF_CONSUMER, &rx) == RTF_EMAGIC);
    CHECK(ftruncate(fd, 100) == 0);
    CHECK(rtf_open_fd(fd, 0, RTF_CONSUMER, &rx) == RTF_ECORRUPT);
    close(fd);

    /* A memfd segment, as one would pass over a Unix socket. */
    fd = memfd_create("fifo", 0);
    CHECK(rtf_create_fd(fd, 16, 8, RTF_PRODUCER, &tx) == RTF_OK);
    CHECK(rtf_open_fd(fd, 16, RTF_CONSUMER, &rx) == RTF_OK);
    char rec[16] = "hello, fifo", got[16] = { 0 };
    CHECK(rtf_push(tx, rec, sizeof rec) == RTF_OK);
    CHECK(rtf_pop(rx, got, sizeof got, 0) == RTF_OK && strcmp(got, "hello, fifo") == 0);
    rtf_close(tx);
    rtf_close(rx);
    close(fd);

    CHECK(strlen(rtf_strerror(RTF_ECORRUPT)) > 0 && strlen(rtf_strerror(12345)) > 0);

    if (failures) {
        fprintf(stderr, "fifo_test: %d checks failed\n", failures);
        return 1;
    }
    printf("fifo_test: all checks passed\n");
    return 0;
}
