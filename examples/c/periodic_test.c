/*
 * periodic_test.c - checks of the rtmgr_task_* C API from C: bad input gives
 * an error code and a message (never a crash), wait_period semantics of
 * budget-based RTAI §3.2. Run by `cargo test -p rtmgr-rt --test periodic_c`.
 * Exit status 0 = all checks passed.
 */
#define _GNU_SOURCE
#include <rtmgr.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

static int failures;

#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                            \
        }                                                                          \
    } while (0)

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void burn(uint64_t ns)
{
    uint64_t t0 = cpu_ns();
    while (cpu_ns() - t0 < ns) {
    }
}

int main(void)
{
    RtmgrTask *t = NULL;
    const uint64_t ms = 1000000ull;

    /* Bad input: error codes and messages. */
    CHECK(rtmgr_task_init(NULL, RTMGR_CLASS_LINUX, 0, -1, &t) == RTMGR_TASK_EINVAL);
    CHECK(strlen(rtmgr_task_last_error()) > 0);
    CHECK(rtmgr_task_init("x", 42, 0, -1, &t) == RTMGR_TASK_EINVAL);
    CHECK(strstr(rtmgr_task_last_error(), "unknown class") != NULL);
    CHECK(rtmgr_task_init("x", RTMGR_CLASS_RT1, 200, -1, &t) == RTMGR_TASK_EINVAL);
    CHECK(rtmgr_task_init("x", RTMGR_CLASS_LINUX, 0, -7, &t) == RTMGR_TASK_EINVAL);
    CHECK(rtmgr_task_wait_period(NULL, NULL) == RTMGR_TASK_EINVAL);
    CHECK(rtmgr_task_make_periodic(NULL, 0, ms) == RTMGR_TASK_EINVAL);

    CHECK(rtmgr_task_init("ctest", RTMGR_CLASS_LINUX, 0, -1, &t) == RTMGR_TASK_OK);
    CHECK(rtmgr_task_wait_period(t, NULL) == RTMGR_TASK_ENOTPERIODIC);
    CHECK(strstr(rtmgr_task_last_error(), "not periodic") != NULL);
    CHECK(rtmgr_task_make_periodic(t, 0, 0) == RTMGR_TASK_EINVAL);
    CHECK(rtmgr_task_make_periodic_budget(t, 0, ms, 2 * ms, RTMGR_BUDGET_SOFT) == RTMGR_TASK_EINVAL);
    CHECK(strstr(rtmgr_task_last_error(), "exceeds period") != NULL);
    CHECK(rtmgr_task_make_periodic_budget(t, 0, 10 * ms, ms, 99) == RTMGR_TASK_EINVAL);
    CHECK(strstr(rtmgr_task_last_error(), "unknown budget mode") != NULL);
    CHECK(rtmgr_task_last_period(t, NULL, NULL) == RTMGR_TASK_EINVAL);
    CHECK(rtmgr_task_make_periodic_budget_ex(t, 0, 10 * ms, ms, RTMGR_BUDGET_SOFT, 10, 0) == RTMGR_TASK_EINVAL);
    CHECK(strstr(rtmgr_task_last_error(), "real-time signal") != NULL);
    CHECK(rtmgr_task_make_periodic_budget_ex(t, 0, 10 * ms, 2 * ms, RTMGR_BUDGET_HARD, 0, ms) == RTMGR_TASK_EINVAL);
    CHECK(strstr(rtmgr_task_last_error(), "deadline") != NULL);

    /* Semantics: an overrun is suspended, the delayed wait is ignored. */
    uint64_t start = rtmgr_task_now_ns() + 2 * ms;
    CHECK(rtmgr_task_make_periodic_budget(t, start, 20 * ms, 4 * ms, RTMGR_BUDGET_SOFT) == RTMGR_TASK_OK);
    CHECK(rtmgr_task_make_periodic(t, 0, ms) == RTMGR_TASK_EPERIODIC);
    burn(ms);
    CHECK(rtmgr_task_wait_period(t, NULL) == RTMGR_TASK_OK);
    burn(6 * ms);
    CHECK(rtmgr_task_wait_period(t, NULL) == RTMGR_TASK_IGNORED);
    CHECK(rtmgr_task_now_ns() >= start + 2 * 20 * ms);
    CHECK(rtmgr_task_wait_period(t, NULL) == RTMGR_TASK_OK);
    uint64_t budget = 0, received = 0;
    CHECK(rtmgr_task_last_period(t, &budget, &received) == RTMGR_TASK_OK);
    CHECK(budget == 4 * ms);
    RtmgrTaskStats s;
    CHECK(rtmgr_task_stats(t, &s) == RTMGR_TASK_OK);
    CHECK(s.exhaustions >= 1 && s.ignored_waits == 1);
    RtmgrTaskPeriod periods[8];
    uint64_t from = 0, lost = 99;
    int64_t n = rtmgr_task_read_periods(t, &from, periods, 8, &lost);
    CHECK(n >= 3 && lost == 0 && from == (uint64_t)n);
    CHECK(n >= 3 && periods[1].exhausted && periods[1].budget_ns == 4 * ms);
    CHECK(n >= 3 && periods[0].index == 0 && periods[2].index == 2);
    CHECK(rtmgr_task_read_periods(t, &from, periods, 8, NULL) == 0);
    CHECK(rtmgr_task_read_periods(t, NULL, periods, 8, NULL) < 0);
    CHECK(rtmgr_task_delete(t) == RTMGR_TASK_OK);
    CHECK(rtmgr_task_delete(NULL) == RTMGR_TASK_OK);

    /* Group budget: bad input, then one member overrunning the shared budget. */
    RtmgrTaskGroup *g = NULL;
    CHECK(rtmgr_task_group_create(0, 0, ms, &g) == RTMGR_TASK_EINVAL);
    CHECK(rtmgr_task_group_create(0, 10 * ms, ms, NULL) == RTMGR_TASK_EINVAL);
    CHECK(rtmgr_task_group_create(rtmgr_task_now_ns() + 2 * ms, 20 * ms, 4 * ms, &g) == RTMGR_TASK_OK);
    CHECK(rtmgr_task_init("member", RTMGR_CLASS_LINUX, 0, -1, &t) == RTMGR_TASK_OK);
    CHECK(rtmgr_task_make_periodic_group(t, NULL) == RTMGR_TASK_EINVAL);
    CHECK(rtmgr_task_make_periodic_group(t, g) == RTMGR_TASK_OK);
    burn(6 * ms);
    CHECK(rtmgr_task_wait_period(t, NULL) == RTMGR_TASK_IGNORED);
    CHECK(rtmgr_task_delete(t) == RTMGR_TASK_OK);
    rtmgr_task_group_free(g);
    rtmgr_task_group_free(NULL);

    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("periodic_test: all checks passed\n");
    return failures ? 1 : 0;
}
