/*
 * periodic_budget.c - a periodic control loop with a computation budget
 * (budget-based RTAI §3.2), C twin of crates/rtmgr-rt/examples/periodic_budget.rs.
 * Period 4 ms, budget 1 ms per period, each job computes for about 0.3 ms.
 * Usage: periodic_budget [periods] [soft|hard]. Runs as RT1+ when root,
 * else as a Linux task. Exit status 0 when every job was on time.
 */
#define _GNU_SOURCE
#include <rtmgr.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PERIOD_NS 4000000ull
#define BUDGET_NS 1000000ull
#define WORK_NS 300000ull

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The control law: burn WORK_NS of CPU time. */
static double control(double state)
{
    uint64_t t0 = cpu_ns();
    while (cpu_ns() - t0 < WORK_NS)
        state = sin(state * 0.999 + 0.001);
    return state;
}

int main(int argc, char **argv)
{
    unsigned long periods = argc > 1 ? strtoul(argv[1], NULL, 10) : 50;
    int mode = (argc > 2 && strcmp(argv[2], "hard") == 0) ? RTMGR_BUDGET_HARD : RTMGR_BUDGET_SOFT;
    int cls = geteuid() == 0 ? RTMGR_CLASS_RT1 : RTMGR_CLASS_LINUX;
    RtmgrTask *task = NULL;

    if (rtmgr_task_init("control", cls, 50, -1, &task) != RTMGR_TASK_OK) {
        fprintf(stderr, "init: %s\n", rtmgr_task_last_error());
        return 1;
    }
    uint64_t start = rtmgr_task_now_ns() + 2 * PERIOD_NS;
    if (rtmgr_task_make_periodic_budget(task, start, PERIOD_NS, BUDGET_NS, mode) != RTMGR_TASK_OK) {
        fprintf(stderr, "make_periodic_budget: %s\n", rtmgr_task_last_error());
        rtmgr_task_delete(task);
        return 1;
    }
    double state = 0.5;
    unsigned long on_time = 0, late = 0;
    for (unsigned long i = 0; i < periods; i++) {
        state = control(state); /* sensor -> control law -> actuator */
        RtmgrTaskStatus st = rtmgr_task_wait_period(task, NULL);
        if (st == RTMGR_TASK_OK)
            on_time++;
        else if (st > 0)
            late++;
        else {
            fprintf(stderr, "wait_period: %s\n", rtmgr_task_last_error());
            rtmgr_task_delete(task);
            return 1;
        }
    }
    RtmgrTaskStats s;
    rtmgr_task_stats(task, &s);
    printf("periods=%llu on_time=%lu late=%lu exhaustions=%llu state=%.3f\n",
           (unsigned long long)s.periods, on_time, late, (unsigned long long)s.exhaustions, state);
    if (rtmgr_task_delete(task) != RTMGR_TASK_OK) {
        fprintf(stderr, "delete: %s\n", rtmgr_task_last_error());
        return 1;
    }
    return late == 0 ? 0 : 3;
}
