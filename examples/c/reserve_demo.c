/*
 * reserve_demo.c - ask the rtmgr daemon (`rtmgr serve`) for a reservation of
 * 1 ms every 10 ms for the calling thread (DROPS §4.1: resources given on
 * request; budget-based RTAI §3: W every P), run a few periodic jobs under
 * it, and give it back. See docs/serve.md ("Clients") and include/rtmgr.h.
 *
 * Usage: reserve_demo [periods] [class]
 *   periods  jobs to run under the reservation (default 50)
 *   class    "rt0" (hard: SCHED_DEADLINE, the default) or "rt1[:PRIO]"
 *            (soft: SCHED_FIFO at PRIO)
 *
 * Exit status: 0 when the reservation was granted, used and released, or
 * when no daemon runs (it says so and reserves nothing); 1 when the daemon
 * refused (the message says why, with the numbers); 2 on any other error.
 */
#define _GNU_SOURCE
#include <rtmgr.h>

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef SCHED_DEADLINE
#define SCHED_DEADLINE 6
#endif
#ifndef SCHED_RESET_ON_FORK
#define SCHED_RESET_ON_FORK 0x40000000
#endif

#define PERIOD_NS 10000000ull
#define BUDGET_NS 1000000ull
/* CPU time each job uses: well inside the budget. */
#define WORK_NS 200000ull

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t ns)
{
    struct timespec ts = {
        .tv_sec = (time_t)(ns / 1000000000ull),
        .tv_nsec = (long)(ns % 1000000000ull),
    };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
        /* a signal: sleep on until the release */
    }
}

static void compute(uint64_t ns)
{
    uint64_t t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    while (clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0 < ns) {
    }
}

static const char *policy_name(int policy)
{
    /* A grant sets reset-on-fork, which sched_getscheduler() reports in
     * the policy it returns. */
    switch (policy & ~SCHED_RESET_ON_FORK) {
    case SCHED_OTHER:
        return "SCHED_OTHER";
    case SCHED_FIFO:
        return "SCHED_FIFO";
    case SCHED_RR:
        return "SCHED_RR";
    case SCHED_DEADLINE:
        return "SCHED_DEADLINE";
    default:
        return "another policy";
    }
}

int main(int argc, char **argv)
{
    unsigned long periods = argc > 1 ? strtoul(argv[1], NULL, 10) : 50;
    const char *class_ = argc > 2 ? argv[2] : "rt0";

    RtmgrReservation g;
    RtmgrReserveStatus st = rtmgr_reserve(PERIOD_NS, BUDGET_NS, 0 /* D = P */, class_,
                                          -1 /* any RT CPU */, &g);
    switch (st) {
    case RTMGR_RESERVE_OK:
        break;
    case RTMGR_RESERVE_ENODAEMON:
        printf("reserve_demo: no rtmgr daemon runs, so nothing was reserved "
               "(start one with `sudo rtmgr serve --config FILE`): %s\n",
               rtmgr_reserve_last_error());
        return 0;
    case RTMGR_RESERVE_REFUSED:
        fprintf(stderr, "reserve_demo: the daemon refused: %s\n", rtmgr_reserve_last_error());
        return 1;
    default:
        fprintf(stderr, "reserve_demo: rtmgr_reserve failed (%d): %s\n", (int)st,
                rtmgr_reserve_last_error());
        return 2;
    }

    printf("reservation %llu on CPU %u: %s, %llu us every %llu us, deadline %llu us\n",
           (unsigned long long)g.id, g.cpu, g.hard ? "hard (SCHED_DEADLINE)" : "soft (SCHED_FIFO)",
           (unsigned long long)(g.budget_ns / 1000), (unsigned long long)(g.period_ns / 1000),
           (unsigned long long)(g.deadline_ns / 1000));
    printf("this thread now runs under %s", policy_name(sched_getscheduler(0)));
    if (!g.hard) {
        printf(" at priority %d", g.priority);
    }
    printf("\n");

    /* Periodic jobs: release k at start + k * P, each done by its deadline. */
    unsigned long on_cpu = 0, late = 0;
    uint64_t start = clock_ns(CLOCK_MONOTONIC);
    for (unsigned long k = 0; k < periods; k++) {
        uint64_t release = start + k * g.period_ns;
        sleep_until(release);
        compute(WORK_NS);
        if (sched_getcpu() == (int)g.cpu) {
            on_cpu++;
        }
        if (clock_ns(CLOCK_MONOTONIC) > release + g.deadline_ns) {
            late++;
        }
    }
    printf("%lu jobs: %lu on CPU %u, %lu finished after their deadline\n", periods, on_cpu,
           g.cpu, late);

    st = rtmgr_release(g.id);
    if (st != RTMGR_RESERVE_OK) {
        fprintf(stderr, "reserve_demo: rtmgr_release failed (%d): %s\n", (int)st,
                rtmgr_reserve_last_error());
        return 2;
    }
    printf("released reservation %llu; this thread runs under %s again\n",
           (unsigned long long)g.id, policy_name(sched_getscheduler(0)));
    return 0;
}
