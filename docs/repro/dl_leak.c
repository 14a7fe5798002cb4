/*
 * dl_leak.c: a SCHED_DEADLINE task that is asleep (past its 0-lag time)
 * when another process sets it back to SCHED_OTHER leaves its bandwidth
 * booked in its root domain's dl_bw->total_bw. Later SCHED_DEADLINE
 * admissions in that root domain fail with EBUSY although no deadline
 * task is left. See docs/kernel-dl-bandwidth-leak.md.
 *
 * Build: gcc -Wall -Wextra -O2 -o dl_leak dl_leak.c
 * Run (root): ./dl_leak [--running | --shrink] [ROUNDS]
 *   default    the child sleeps when it is set back: EBUSY after a few rounds
 *   --running  the child spins (queued) when it is set back: no leak
 *   --shrink   the parent first shrinks the sleeping child's reservation to
 *              1024 ns every 4 s (bandwidth rounds to 0), then sets it
 *              back: no leak
 *
 * Each round forks a child that makes itself SCHED_DEADLINE with 60 % of a
 * CPU (6 ms every 10 ms), lets it sleep 100 ms, sets it back to SCHED_OTHER
 * from the parent, and kills it. The default root domain holds
 * ncpus * (0.95 - 0.05 fair server) of deadline bandwidth, so without a
 * leak every round is admitted; with the leak, round ~1.5 * ncpus + 1 is
 * refused. Exit status: 0 no refusal, 1 refused (leak), 2 setup error.
 *
 * Cleanup after a leak: rebuild the root domains, e.g. on cgroup v1
 *   echo 0 > /sys/fs/cgroup/cpuset/cpuset.sched_load_balance
 *   echo 1 > /sys/fs/cgroup/cpuset/cpuset.sched_load_balance
 * or take a CPU offline and back online.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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

static int set_attr(pid_t pid, uint32_t policy, uint64_t runtime, uint64_t period)
{
	struct sched_attr a;

	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.sched_policy = policy;
	a.sched_runtime = runtime;
	a.sched_deadline = period;
	a.sched_period = period;
	return (int)syscall(SYS_sched_setattr, pid, &a, 0);
}

static void nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

enum mode { SLEEPING, RUNNING, SHRINK };

/* One round: 0 admitted, errno of a refused admission otherwise. */
static int round_once(enum mode mode)
{
	int fds[2], err = 0;
	pid_t child;

	if (pipe(fds))
		return -1;
	child = fork();
	if (child < 0)
		return -1;
	if (child == 0) {
		int e = 0;

		close(fds[0]);
		if (set_attr(0, SCHED_DEADLINE, 6000000, 10000000))
			e = errno;
		if (write(fds[1], &e, sizeof(e)) != sizeof(e))
			_exit(2);
		if (e)
			_exit(1);
		for (;;) {
			if (mode != RUNNING)
				pause();
		}
	}
	close(fds[1]);
	if (read(fds[0], &err, sizeof(err)) != sizeof(err))
		err = -1;
	close(fds[0]);
	if (!err) {
		nap_ms(100); /* asleep well past its 0-lag time */
		if (mode == SHRINK &&
		    set_attr(child, SCHED_DEADLINE, 1024, 4000000000ULL))
			perror("shrink");
		if (set_attr(child, SCHED_OTHER, 0, 0))
			perror("SCHED_OTHER");
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return err;
}

int main(int argc, char **argv)
{
	enum mode mode = SLEEPING;
	long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
	int rounds = (int)(2 * ncpus + 2), i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--running"))
			mode = RUNNING;
		else if (!strcmp(argv[i], "--shrink"))
			mode = SHRINK;
		else if (atoi(argv[i]) > 0)
			rounds = atoi(argv[i]);
		else {
			fprintf(stderr, "usage: %s [--running | --shrink] [ROUNDS]\n", argv[0]);
			return 2;
		}
	}
	for (i = 1; i <= rounds; i++) {
		int err = round_once(mode);

		if (err < 0) {
			perror("setup");
			return 2;
		}
		if (err) {
			printf("round %d: SCHED_DEADLINE refused: %s; bandwidth leaked by %d earlier round(s)\n",
			       i, strerror(err), i - 1);
			return 1;
		}
		printf("round %d: admitted\n", i);
	}
	printf("%d rounds admitted: no leak\n", rounds);
	return 0;
}
