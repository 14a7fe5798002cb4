#!/usr/bin/env bash
# The hand test behind `rtmgr status` item cpu_capacity (issue 28): a C spinner,
# 1 thread then 2 threads (one per CPU, pinned), PHASE_S seconds each, interleaved
# for ROUNDS rounds; per round the work of 2 over the work of 1, and the steal
# /proc/stat accounted meanwhile. Run it in the same minute as
# `sudo rtmgr status --host-test` and compare its effective_cpus (±0.2 is the goal).
#   bash bench/capacity-hand.sh [ROUNDS=3] [PHASE_S=3] [CPUS=0,1]
# Needs cc; changes nothing on the machine (plain user threads, removed temp files).
set -euo pipefail
rounds=${1:-3}
phase=${2:-3}
cpus=${3:-0,1}
command -v cc >/dev/null || { echo "capacity-hand: needs a C compiler (cc)" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/spin.c" <<'C'
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* Each thread: pinned to its CPU, units of 10 000 dependent multiply-adds
   (rtmgr's WORK_UNIT) until the phase ends; prints the total units. */
static volatile int stop;
struct arg { int cpu; unsigned long units; char pad[64]; };
static void *spin(void *p) {
    struct arg *a = p;
    cpu_set_t s; CPU_ZERO(&s); CPU_SET(a->cpu, &s);
    if (pthread_setaffinity_np(pthread_self(), sizeof s, &s)) { perror("affinity"); exit(1); }
    unsigned long x = 1;
    while (!stop) {
        for (int i = 0; i < 10000; i++) x = x * 6364136223846793005UL + 1;
        __asm__ volatile("" : "+r"(x));
        a->units++;
    }
    return NULL;
}
int main(int argc, char **argv) {
    double secs = atof(argv[1]);
    int n = argc - 2;
    pthread_t t[64]; struct arg a[64];
    for (int i = 0; i < n; i++) { memset(&a[i], 0, sizeof a[i]); a[i].cpu = atoi(argv[i + 2]); pthread_create(&t[i], NULL, spin, &a[i]); }
    usleep((useconds_t)(secs * 1e6));
    stop = 1;
    unsigned long total = 0;
    for (int i = 0; i < n; i++) { pthread_join(t[i], NULL); total += a[i].units; }
    printf("%lu\n", total);
    return 0;
}
C
cc -O2 -pthread -o "$dir/spin" "$dir/spin.c"
IFS=, read -r -a list <<<"$cpus"
steal() { awk '/^cpu[0-9]/ { s += $9 } END { print s }' /proc/stat; }
echo "round  1 thread (units)  ${#list[@]} threads (units)  ratio  steal ticks (10 ms)"
for r in $(seq 1 "$rounds"); do
  s0=$(steal)
  one=$("$dir/spin" "$phase" "${list[-1]}")
  all=$("$dir/spin" "$phase" "${list[@]}")
  s1=$(steal)
  awk -v r="$r" -v a="$one" -v b="$all" -v s=$((s1 - s0)) \
    'BEGIN { printf "%5d  %17d  %18d  %5.2f  %d\n", r, a, b, b / a, s }'
done
