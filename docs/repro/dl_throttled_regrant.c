/*
 * dl_throttled_regrant.c: a SCHED_DEADLINE thread that is throttled (its
 * budget spent) when another thread sets it SCHED_OTHER, and is set
 * SCHED_DEADLINE again after its deadline D but before its 0-lag time
 * Z = D + |runtime| * period / budget, stays runnable and never runs again:
 * the "stranded" thread of docs/serve.md.
 *
 * Why (Linux 6.18, kernel/sched/deadline.c, read, not patched): leaving
 * SCHED_DEADLINE neither cancels the replenishment timer nor clears
 * dl_throttled; the timer fires at D while the thread is not a deadline
 * task and does nothing (dl_task_timer: `if (!dl_task(p)) goto unlock`);
 * only the 0-lag timer at Z clears the flag (__dl_clear_params). Set
 * SCHED_DEADLINE in between, the thread is enqueued throttled
 * (enqueue_dl_entity returns early for a throttled entity) with no timer
 * left to replenish it. Setting SCHED_OTHER and, after Z, SCHED_DEADLINE
 * again frees it.
 *
 * Build: gcc -Wall -Wextra -O2 -pthread -o dl_throttled_regrant dl_throttled_regrant.c
 * Run (root): ./dl_throttled_regrant [ITERATIONS]   (default 45)
 * A spinner thread (200 us of work, 50 us asleep, in a loop) is made
 * SCHED_DEADLINE (0.5 ms every 10 ms) and overruns its budget; 3 ms later
 * its dl.runtime and dl.deadline are read from /proc/.../sched, it is set
 * SCHED_OTHER, and set SCHED_DEADLINE again at a chosen instant: iteration
 * i % 9 == 0 one ms before D, == 8 one ms after Z (the controls), else at
 * D + (i % 9) / 8 of the window. Stuck: its loop counter and its
 * dl.deadline unchanged 50 ms later. The scheduler's clock (dl.deadline)
 * and CLOCK_MONOTONIC differ by an offset, measured first. Everything is
 * set back to SCHED_OTHER. Exit status: 0 never stuck, 1 stuck at least
 * once, 2 setup error.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct sched_attr {
	uint32_t size;
	uint32_t sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime;
	uint64_t sched_deadline;
	uint64_t sched_period;
};

#define BUDGET 500000LL    /* ns */
#define PERIOD 10000000LL  /* ns */

static volatile pid_t tid;
static volatile unsigned long count;

static int set_attr(uint32_t policy)
{
	struct sched_attr a;

	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.sched_policy = policy;
	if (policy == 6) {
		a.sched_runtime = BUDGET;
		a.sched_deadline = PERIOD;
		a.sched_period = PERIOD;
	}
	return (int)syscall(SYS_sched_setattr, tid, &a, 0);
}

static long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void nap(long long ns)
{
	struct timespec t = { (time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL) };

	if (ns > 0)
		nanosleep(&t, NULL);
}

static void *spinner(void *arg)
{
	(void)arg;
	tid = (pid_t)syscall(SYS_gettid);
	for (;;) {
		long long until = now_ns() + 200000;

		while (now_ns() < until)
			count++;
		nap(50000);
	}
	return NULL;
}

/* The spinner's dl.runtime and dl.deadline (ns); 0 on success. */
static int server(long long *runtime, long long *deadline)
{
	char path[64], line[256];
	int got = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/sched", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "dl.runtime", 10) && strchr(line, ':'))
			*runtime = atoll(strchr(line, ':') + 1), got++;
		if (!strncmp(line, "dl.deadline", 11) && strchr(line, ':'))
			*deadline = atoll(strchr(line, ':') + 1), got++;
	}
	fclose(f);
	return got == 2 ? 0 : -1;
}

int main(int argc, char **argv)
{
	int iterations = argc > 1 ? atoi(argv[1]) : 45;
	int inside = 0, stuck = 0, controls = 0, controls_stuck = 0, i;
	long long offset = 0;
	pthread_t th;

	if (iterations <= 0 || pthread_create(&th, NULL, spinner, NULL))
		return 2;
	while (!tid)
		nap(100000);
	/* The scheduler's clock against CLOCK_MONOTONIC: a fresh server's
	 * deadline is its clock + PERIOD. */
	for (i = 0; i < 3; i++) {
		long long r, d, t0 = now_ns();

		if (set_attr(6) || server(&r, &d)) {
			perror("SCHED_DEADLINE");
			set_attr(0);
			return 2;
		}
		offset = d - (t0 + PERIOD);
		set_attr(0);
		nap(300000000);
	}
	printf("scheduler clock - CLOCK_MONOTONIC: %+.3f ms\n", (double)offset / 1e6);
	for (i = 0; i < iterations; i++) {
		long long r = 0, d = 0, r2 = 0, d2 = 0, window, at;
		int k = i % 9, was_stuck;
		unsigned long c0;

		if (set_attr(6)) {
			perror("SCHED_DEADLINE");
			return 2;
		}
		nap(3000000);
		if (server(&r, &d) || r > 0) { /* not throttled: try again */
			set_attr(0);
			nap(150000000);
			continue;
		}
		set_attr(0);
		window = -r * (PERIOD / BUDGET);
		at = d - offset + (k == 0 ? -1000000 : k == 8 ? window + 1000000 : window * k / 8);
		nap(at - now_ns());
		if (set_attr(6)) {
			perror("SCHED_DEADLINE again");
			set_attr(0);
			nap(200000000);
			continue;
		}
		c0 = count;
		nap(50000000);
		was_stuck = count == c0 && !server(&r2, &d2) && d2 == d;
		if (k == 0 || k == 8) {
			controls++;
			controls_stuck += was_stuck;
		} else {
			inside++;
			stuck += was_stuck;
		}
		printf("iteration %d: set SCHED_DEADLINE again at D%+.2f ms, 0-lag Z at D+%.2f ms: %s\n",
		       i, (double)(at + offset - d) / 1e6, (double)window / 1e6, was_stuck ? "STUCK" : "ran");
		set_attr(0);
		nap(200000000);
	}
	printf("inside (D, Z]: %d of %d stuck; before D or after Z: %d of %d stuck\n",
	       stuck, inside, controls_stuck, controls);
	return stuck || controls_stuck ? 1 : 0;
}
