/*
 * overrun_demo.c - what happens when a job needs more than its budget
 * (budget-based RTAI §3.2, Fig. 2a); C twin of
 * crates/rtmgr-rt/examples/overrun_demo.rs. Period 10 ms, budget 2 ms; every
 * 5th job needs 5 ms: it is suspended when the budget runs out, continues
 * in the next periods with fresh budgets, and the waits that belonged to the
 * earlier periods return at once (RTMGR_TASK_IGNORED), so the task catches up.
 * Usage: overrun_demo [jobs] [soft|hard]. Exit status 0 if the overruns were
 * enforced and the delayed waits ignored.
 */
#define _GNU_SOURCE
#include <rtmgr.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PERIOD_NS 10000000ull
#define BUDGET_NS 2000000ull

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void compute(uint64_t ns)
{
    uint64_t t0 = cpu_ns();
    while (cpu_ns() - t0 < ns) {
    }
}

int main(int argc, char **argv)
{
    unsigned long jobs = argc > 1 ? strtoul(argv[1], NULL, 10) : 12;
    int mode = (argc > 2 && strcmp(argv[2], "hard") == 0) ? RTMGR_BUDGET_HARD : RTMGR_BUDGET_SOFT;
    int cls = geteuid() == 0 ? RTMGR_CLASS_RT1 : RTMGR_CLASS_LINUX;
    RtmgrTask *task = NULL;

    if (rtmgr_task_init("overrun", cls, 40, -1, &task) != RTMGR_TASK_OK) {
        fprintf(stderr, "init: %s\n", rtmgr_task_last_error());
        return 1;
    }
    uint64_t start = rtmgr_task_now_ns() + PERIOD_NS;
    if (rtmgr_task_make_periodic_budget(task, start, PERIOD_NS, BUDGET_NS, mode) != RTMGR_TASK_OK) {
        fprintf(stderr, "make_periodic_budget: %s\n", rtmgr_task_last_error());
        rtmgr_task_delete(task);
        return 1;
    }
    unsigned long ignored = 0;
    for (unsigned long job = 0; job < jobs; job++) {
        uint64_t need = job % 5 == 2 ? 5000000ull : 1000000ull;
        compute(need);
        uint64_t missed = 0;
        RtmgrTaskStatus st = rtmgr_task_wait_period(task, &missed);
        double t = (double)(rtmgr_task_now_ns() - start) / 1e6;
        if (st < 0) {
            fprintf(stderr, "wait_period: %s\n", rtmgr_task_last_error());
            rtmgr_task_delete(task);
            return 1;
        }
        ignored += st == RTMGR_TASK_IGNORED;
        printf("job %2lu needed %.1f ms  t=%7.3f ms  wait_period: %s", job, (double)need / 1e6, t,
               st == RTMGR_TASK_OK ? "on time" : st == RTMGR_TASK_IGNORED ? "ignored" : "missed");
        if (st == RTMGR_TASK_MISSED)
            printf(" %llu", (unsigned long long)missed);
        printf("\n");
    }
    RtmgrTaskStats s;
    rtmgr_task_stats(task, &s);
    printf("exhaustions=%llu ignored_waits=%llu if_wait=%llu\n", (unsigned long long)s.exhaustions,
           (unsigned long long)s.ignored_waits, (unsigned long long)s.if_wait);
    rtmgr_task_delete(task);
    return (jobs < 3 || (s.exhaustions > 0 && ignored > 0)) ? 0 : 3;
}
