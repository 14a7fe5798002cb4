/*
 * dl_stranded.c: does a thread that another thread makes SCHED_DEADLINE (or
 * SCHED_FIFO) and sets back to SCHED_OTHER, over and over, while it naps in
 * short sleeps or yields, ever stay runnable without running ("stranded")?
 * This is the daemon's grant and release of clients that wait for their
 * answer, without the daemon (docs/serve.md, "Stranded threads").
 *
 * Build: gcc -Wall -Wextra -O2 -pthread -o dl_stranded dl_stranded.c
 * Run (root): ./dl_stranded [options] [CYCLES]
 *   --rt-cpuset DIR --nrt-cpuset DIR
 *               cgroup v1 cpusets: each grant moves the worker into DIR (its
 *               RT CPU, a root domain of its own, e.g. rtmgr's
 *               rtmgr-rt/cpuN) and each release back into the NRT one, as
 *               the daemon does. Without them nothing is moved (the default
 *               root domain; the kernel refuses SCHED_DEADLINE for a thread
 *               pinned to less than all of it, so nothing is pinned).
 *   --workers W threads granted in turn, each held while the others are
 *               granted and released (default 4, as the soak test)
 *   --nap-us U  each worker's sleep per loop, default 100 (0: sched_yield)
 *   --spin-us P then it runs P us (default 0; over 100 it overruns its
 *               deadline budget and is throttled, as a spinning client is)
 *   --step-us S time between two grants, default 500
 *   --gap-us G  the worker released waits G us at SCHED_OTHER before it is
 *               granted again (default 0: at once; the daemon's clients ask
 *               again a round trip later)
 *   --defer-back-ms M
 *               a released worker goes back to the NRT cpuset only M ms
 *               later, and a worker granted again before that is not moved
 *               (the daemon's release of a deadline grant: its placement
 *               comes back a period after its policy)
 *   --fifo      the controller runs at SCHED_FIFO 1, as the daemon's loop
 * Cycle c releases worker c % W and grants it again, alternately SCHED_DEADLINE
 * (100 us every 10 ms) and SCHED_FIFO 10, as the soak's clients alternate
 * rt0 and rt1. A worker that waits outside its RT root domain when granted
 * SCHED_DEADLINE (EPERM) gets SCHED_FIFO 1 until /proc shows it on its RT
 * CPU's run queue (with --after-run: until it has also run since), then
 * SCHED_DEADLINE: the daemon's placeholder. A deadline worker is
 * stranded when /proc says R and its sum_exec_runtime (schedstat) has not
 * moved for 50 ms: it is printed, with its CPU's part of the kernel's debug
 * view if debugfs is mounted, and its policy set again (which puts it
 * back). Exit status: 0 none stranded, 1 stranded at least once, 2 setup
 * error. Every worker is set back to SCHED_OTHER (and into the NRT cpuset)
 * at the end, also on SIGINT/SIGTERM.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef SCHED_DEADLINE
#define SCHED_DEADLINE 6
#endif

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

#define MAX_WORKERS 64
#define DL_RUNTIME 100000ULL
#define DL_PERIOD 10000000ULL

struct worker {
	volatile pid_t tid;
	volatile unsigned long loops;
	int policy;          /* what it was granted, SCHED_OTHER when released */
	int pending;         /* at the placeholder, waiting to run on its RT CPU */
	uint64_t pend_exec;  /* its CPU time when the placeholder was set */
	uint64_t last_exec;
	uint64_t still_since;
	uint64_t back_at;    /* released, still in the RT cpuset until then */
	int in_rt;           /* in the RT cpuset */
};

static struct worker workers[MAX_WORKERS];
static int nworkers = 4, rt_cpu = -1;
static long nap_us = 100;
static int after_run;
static long spin_us, defer_back_ms, gap_us;
static const char *rt_cpuset, *nrt_cpuset;
static volatile sig_atomic_t stop;

/* Rebuilds the RT cpuset's root domain as the daemon does to give leaked
 * bandwidth back (dl_leak.c): its load balancing off and on again. */
static int rebuild_root_domain(void)
{
	char path[512];
	FILE *f;
	int i, ok = 1;

	snprintf(path, sizeof(path), "%s/cpuset.sched_load_balance", rt_cpuset);
	for (i = 0; i < 2; i++) {
		f = fopen(path, "w");
		if (!f)
			return -1;
		ok &= fprintf(f, "%d\n", i) > 0;
		ok &= fclose(f) == 0;
	}
	return ok ? 0 : -1;
}

static int set_attr(pid_t pid, uint32_t policy, uint32_t prio, uint64_t runtime, uint64_t period)
{
	struct sched_attr a;

	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.sched_policy = policy;
	a.sched_priority = prio;
	a.sched_runtime = runtime;
	a.sched_deadline = period;
	a.sched_period = period;
	return (int)syscall(SYS_sched_setattr, pid, &a, 0);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void nap_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL) };

	nanosleep(&ts, NULL);
}

/* Moves a thread into a cgroup v1 cpuset (its tasks file); 0 on success. */
static int move_to(const char *dir, pid_t tid)
{
	char path[512];
	FILE *f;
	int ok;

	snprintf(path, sizeof(path), "%s/tasks", dir);
	f = fopen(path, "w");
	if (!f)
		return -1;
	ok = fprintf(f, "%d\n", (int)tid) > 0;
	return (fclose(f) == 0 && ok) ? 0 : -1;
}

static void *work(void *arg)
{
	struct worker *w = arg;

	w->tid = (pid_t)syscall(SYS_gettid);
	for (;;) {
		if (nap_us > 0)
			nap_ns((uint64_t)nap_us * 1000);
		else
			sched_yield();
		if (spin_us > 0) {
			uint64_t until = now_ns() + (uint64_t)spin_us * 1000;

			while (now_ns() < until)
				;
		}
		w->loops++;
	}
	return NULL;
}

/* A thread's state letter, sum_exec_runtime and CPU; 0 on success. */
static int sample(pid_t tid, char *state, uint64_t *exec_ns, int *cpu)
{
	char path[64], buf[1024], *p;
	unsigned long long exec;
	FILE *f;
	int i;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(path, "r");
	if (!f || !fgets(buf, sizeof(buf), f)) {
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	p = strrchr(buf, ')');
	if (!p)
		return -1;
	*state = p[2];
	p += 2; /* the state, field 3; the CPU is field 39 */
	for (i = 0; i < 36 && p; i++)
		p = strchr(p + 1, ' ');
	*cpu = p ? atoi(p + 1) : -1;
	snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	i = fscanf(f, "%llu", &exec);
	fclose(f);
	*exec_ns = exec;
	return i == 1 ? 0 : -1;
}

static void print_cpu_debug(int cpu)
{
	char line[512], want[32];
	FILE *f = fopen("/sys/kernel/debug/sched/debug", "r");
	size_t n;
	int in = 0;

	if (!f)
		return;
	n = (size_t)snprintf(want, sizeof(want), "cpu#%d", cpu);
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "cpu#", 4))
			in = !strncmp(line, want, n) && (line[n] == ',' || line[n] == '\n');
		if (in)
			fputs(line, stdout);
	}
	fclose(f);
}

static long rebuilds;

/* SCHED_DEADLINE for w; on EBUSY (bandwidth leaked by a worker released
 * asleep, dl_leak.c) the RT root domain is rebuilt and it is tried again. */
static int set_deadline(struct worker *w)
{
	if (!set_attr(w->tid, SCHED_DEADLINE, 0, DL_RUNTIME, DL_PERIOD))
		return 0;
	if (errno != EBUSY || !rt_cpuset)
		return -1;
	if (rebuild_root_domain())
		return -1;
	rebuilds++;
	return set_attr(w->tid, SCHED_DEADLINE, 0, DL_RUNTIME, DL_PERIOD);
}

static void release(struct worker *w)
{
	set_attr(w->tid, SCHED_OTHER, 0, 0, 0);
	w->policy = SCHED_OTHER;
	w->pending = 0;
	w->still_since = 0;
	if (!w->in_rt)
		return;
	if (defer_back_ms > 0) {
		w->back_at = now_ns() + (uint64_t)defer_back_ms * 1000000ULL;
		return;
	}
	if (nrt_cpuset && move_to(nrt_cpuset, w->tid))
		perror(nrt_cpuset);
	w->in_rt = 0;
}

/* Released workers whose deferred move back is due go back. */
static void move_back_due(void)
{
	int i;

	for (i = 0; i < nworkers; i++) {
		struct worker *w = &workers[i];

		if (w->back_at && now_ns() >= w->back_at) {
			w->back_at = 0;
			w->in_rt = 0;
			if (nrt_cpuset && move_to(nrt_cpuset, w->tid))
				perror(nrt_cpuset);
		}
	}
}

/* Grants w policy; -1 with errno on a refusal other than the placeholder's. */
static int grant(struct worker *w, int policy, long *placeholders)
{
	char st;
	int cpu;

	w->back_at = 0;
	if (rt_cpuset && !w->in_rt) {
		if (move_to(rt_cpuset, w->tid))
			return -1;
		w->in_rt = 1;
	}
	w->policy = policy;
	if (policy == SCHED_FIFO)
		return set_attr(w->tid, SCHED_FIFO, 10, 0, 0);
	if (!set_deadline(w))
		return 0;
	if (errno != EPERM || !rt_cpuset)
		return -1;
	(*placeholders)++;
	w->pending = 1;
	if (sample(w->tid, &st, &w->pend_exec, &cpu))
		return -1;
	return set_attr(w->tid, SCHED_FIFO, 1, 0, 0);
}

/* Placeholders that ran on their RT CPU get SCHED_DEADLINE; deadline
 * workers runnable without CPU time for 50 ms are stranded. */
static int watch(long cycle, long *stranded)
{
	int i;

	for (i = 0; i < nworkers; i++) {
		struct worker *w = &workers[i];
		uint64_t exec, t = now_ns();
		char st;
		int cpu;

		if (w->policy != SCHED_DEADLINE || sample(w->tid, &st, &exec, &cpu))
			continue;
		if (w->pending) {
			if (cpu == rt_cpu && (!after_run || exec != w->pend_exec)) {
				if (set_deadline(w)) {
					perror("SCHED_DEADLINE after the placeholder");
					return -1;
				}
				w->pending = 0;
			}
			continue;
		}
		if (st != 'R' || exec != w->last_exec) {
			w->still_since = 0;
		} else if (!w->still_since) {
			w->still_since = t;
		} else if (t - w->still_since >= 50000000ULL) {
			(*stranded)++;
			printf("cycle %ld: worker %d stranded on CPU %d: R, no CPU time for %.1f ms\n",
			       cycle, (int)w->tid, cpu, (double)(t - w->still_since) / 1e6);
			print_cpu_debug(cpu);
			fflush(stdout);
			set_attr(w->tid, SCHED_OTHER, 0, 0, 0);
			set_attr(w->tid, SCHED_DEADLINE, 0, DL_RUNTIME, DL_PERIOD);
			w->still_since = 0;
		}
		w->last_exec = exec;
	}
	return 0;
}

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	long cycles = 2000, step_us = 500, c, stranded = 0, placeholders = 0, rebuild_every = 0;
	int fifo = 0, i, status = 0;
	pthread_t th;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rt-cpuset") && i + 1 < argc)
			rt_cpuset = argv[++i];
		else if (!strcmp(argv[i], "--nrt-cpuset") && i + 1 < argc)
			nrt_cpuset = argv[++i];
		else if (!strcmp(argv[i], "--workers") && i + 1 < argc)
			nworkers = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--nap-us") && i + 1 < argc)
			nap_us = atol(argv[++i]);
		else if (!strcmp(argv[i], "--step-us") && i + 1 < argc)
			step_us = atol(argv[++i]);
		else if (!strcmp(argv[i], "--rebuild-every") && i + 1 < argc)
			rebuild_every = atol(argv[++i]);
		else if (!strcmp(argv[i], "--spin-us") && i + 1 < argc)
			spin_us = atol(argv[++i]);
		else if (!strcmp(argv[i], "--gap-us") && i + 1 < argc)
			gap_us = atol(argv[++i]);
		else if (!strcmp(argv[i], "--defer-back-ms") && i + 1 < argc)
			defer_back_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--after-run"))
			after_run = 1;
		else if (!strcmp(argv[i], "--fifo"))
			fifo = 1;
		else if (atol(argv[i]) > 0)
			cycles = atol(argv[i]);
		else
			break;
	}
	if (i < argc || nworkers < 1 || nworkers > MAX_WORKERS || !rt_cpuset != !nrt_cpuset ||
	    (rebuild_every && !rt_cpuset)) {
		fprintf(stderr, "usage: %s [--rt-cpuset DIR --nrt-cpuset DIR [--rebuild-every N]] [--workers W] [--nap-us U] [--spin-us P] [--step-us S] [--gap-us G] [--defer-back-ms M] [--after-run] [--fifo] [CYCLES]\n", argv[0]);
		return 2;
	}
	if (rt_cpuset) {
		char path[512];
		FILE *f;

		snprintf(path, sizeof(path), "%s/cpuset.cpus", rt_cpuset);
		f = fopen(path, "r");
		if (!f || fscanf(f, "%d", &rt_cpu) != 1) {
			perror(path);
			return 2;
		}
		fclose(f);
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	for (i = 0; i < nworkers; i++) {
		if (pthread_create(&th, NULL, work, &workers[i]))
			return 2;
		while (!workers[i].tid)
			nap_ns(100000);
		workers[i].policy = SCHED_OTHER;
	}
	if (fifo) {
		struct sched_param p = { .sched_priority = 1 };

		if (sched_setscheduler(0, SCHED_FIFO, &p))
			perror("controller at SCHED_FIFO 1");
	}
	for (c = 1; c <= cycles && !stop; c++) {
		struct worker *w = &workers[c % nworkers];
		int policy = (c / nworkers) % 2 ? SCHED_FIFO : SCHED_DEADLINE;
		uint64_t until;

		release(w);
		if (gap_us > 0)
			nap_ns((uint64_t)gap_us * 1000);
		if (rebuild_every && c % rebuild_every == 0) {
			if (rebuild_root_domain()) {
				perror("rebuilding the RT cpuset's root domain");
				status = 2;
				break;
			}
			rebuilds++;
		}
		if (grant(w, policy, &placeholders)) {
			fprintf(stderr, "cycle %ld: granting %s: %s%s\n", c,
				policy == SCHED_FIFO ? "SCHED_FIFO" : "SCHED_DEADLINE", strerror(errno),
				errno == EBUSY ? " (bandwidth leaked by earlier cycles: see dl_leak.c)" : "");
			status = 2;
			break;
		}
		until = now_ns() + (uint64_t)step_us * 1000;
		do {
			move_back_due();
			if (watch(c, &stranded)) {
				status = 2;
				break;
			}
			nap_ns(100000);
		} while (now_ns() < until);
		if (status)
			break;
		if (c % 1000 == 0)
			fprintf(stderr, "%ld cycles, %ld stranded\n", c, stranded);
	}
	for (i = 0; i < nworkers; i++)
		release(&workers[i]);
	printf("%ld cycles, %d workers: %ld stranded, %ld placed at SCHED_FIFO 1 first, %ld root-domain rebuilds\n",
	       c - 1, nworkers, stranded, placeholders, rebuilds);
	return status ? status : stranded ? 1 : 0;
}
