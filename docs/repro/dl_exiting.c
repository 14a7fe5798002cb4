/*
 * dl_exiting.c: does a SCHED_DEADLINE process with a small budget get stuck
 * while it exits (runnable, never running, its replenishment not coming)?
 * The soak's stranded threads of 2026-11-29 were exiting client processes
 * (`rtmgr reserve -- sleep 0.05`, some SIGKILLed) on their first grant
 * (docs/serve.md "Stranded threads"); this tries the same without rtmgr.
 *
 * Build: gcc -Wall -Wextra -O2 -o dl_exiting dl_exiting.c
 * Run (root): ./dl_exiting [ITERATIONS [TASKS_FILE]]   (default 200)
 * TASKS_FILE: a cpuset's `tasks` the child joins first, e.g. an RT CPU's
 * own root domain under a running `rtmgr serve`
 * (/sys/fs/cgroup/cpuset/rtmgr-rt/cpu1/tasks), as the soak's clients were.
 * Each iteration forks a child that makes itself SCHED_DEADLINE (0.2 ms
 * every 10 ms, as the soak's clients; in the default root domain, so on
 * any CPU: pinned to one of several it would be refused), touches 8 MiB
 * and execs `sleep 0.05`, as the soak's `rtmgr reserve -- sleep 0.05`;
 * every other child is SIGKILLed 0-3 ms after it became SCHED_DEADLINE
 * instead. A child not reaped 1 s later is reported
 * with its state, flags and server (/proc/PID/stat, /proc/PID/sched), then
 * set SCHED_OTHER by the parent (which frees it) and reaped. Exit status:
 * 0 none stuck, 1 stuck at least once, 2 setup error.
 *
 * Result on this VM (kernel 6.18, 2026-11-29): 0 of 200 stuck in the
 * default root domain, 0 of 200 in the RT CPU's own root domain of a
 * scratch `rtmgr serve` (bench/scratch-daemon.sh). The soak's cases were
 * the daemon's: its check compared a deadline on the scheduler's clock
 * with CLOCK_MONOTONIC, 12 ms apart on that boot (docs/serve.md).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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

static int set_attr(pid_t pid, uint32_t policy)
{
	struct sched_attr a;
	memset(&a, 0, sizeof a);
	a.size = sizeof a;
	a.sched_policy = policy;
	if (policy == 6) {
		a.sched_runtime = 200000;
		a.sched_deadline = 10000000;
		a.sched_period = 10000000;
	}
	return syscall(SYS_sched_setattr, pid, &a, 0);
}

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The line of /proc/PID/sched that starts with key, or "". */
static void sched_line(pid_t pid, const char *key, char *out, size_t n)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/sched", pid);
	out[0] = 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, key, strlen(key)) == 0) {
			line[strcspn(line, "\n")] = 0;
			snprintf(out, n, "%s", line);
			break;
		}
	fclose(f);
}

static void report(pid_t pid, int i)
{
	char path[64], stat[512] = "", rt[256], dl[256];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (f) {
		if (!fgets(stat, sizeof stat, f))
			stat[0] = 0;
		fclose(f);
	}
	char *p = strrchr(stat, ')');
	char state = '?';
	unsigned long flags = 0;
	if (p)
		sscanf(p + 2, "%c %*d %*d %*d %*d %*d %lu", &state, &flags);
	sched_line(pid, "dl.runtime", rt, sizeof rt);
	sched_line(pid, "dl.deadline", dl, sizeof dl);
	printf("iteration %d: child %d not reaped after 1 s: state %c, flags 0x%lx%s; %s; %s\n",
	       i, pid, state, flags, (flags & 0x4) ? " (exiting)" : "", rt, dl);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200;
	const char *tasks = argc > 2 ? argv[2] : NULL;
	int stuck = 0;
	srand(12345);
	for (int i = 0; i < n; i++) {
		int pipefd[2];
		if (pipe(pipefd))
			return 2;
		pid_t pid = fork();
		if (pid < 0)
			return 2;
		if (pid == 0) {
			close(pipefd[0]);
			if (tasks) {
				FILE *t = fopen(tasks, "w");
				if (!t || fprintf(t, "%d\n", getpid()) < 0 || fclose(t)) {
					perror(tasks);
					_exit(2);
				}
			}
			if (set_attr(0, 6)) {
				perror("child setup");
				_exit(2);
			}
			if (write(pipefd[1], "x", 1) != 1)
				_exit(2);
			size_t len = 8 << 20;
			char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (m != MAP_FAILED)
				memset(m, 1, len);
			/* As `rtmgr reserve -- sleep 0.05`: the program is exec'd. */
			execl("/bin/sleep", "sleep", "0.05", (char *)NULL);
			_exit(2);
		}
		char c;
		close(pipefd[1]);
		if (read(pipefd[0], &c, 1) != 1) {
			waitpid(pid, NULL, 0);
			return 2;
		}
		close(pipefd[0]);
		if (i % 2 == 1) {
			struct timespec t = {0, (rand() % 3000) * 1000L};
			nanosleep(&t, NULL);
			kill(pid, SIGKILL);
		}
		double t0 = now_ms();
		int status, reaped = 0;
		while (now_ms() - t0 < 1000) {
			if (waitpid(pid, &status, WNOHANG) == pid) {
				reaped = 1;
				break;
			}
			struct timespec t = {0, 1000000};
			nanosleep(&t, NULL);
		}
		if (!reaped) {
			stuck++;
			report(pid, i);
			set_attr(pid, 0);
			waitpid(pid, &status, 0);
		}
	}
	printf("%d of %d children stuck while exiting\n", stuck, n);
	return stuck ? 1 : 0;
}
