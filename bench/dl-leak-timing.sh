#!/usr/bin/env bash
# Issue 27: is the bandwidth of a thread set back from SCHED_DEADLINE while
# it sleeps kept by the kernel (docs/kernel-dl-bandwidth-leak.md), and does
# it depend on how soon after the thread's last wake-up it is set back
# (before or after its 0-lag time)? bench/dl-leak-timing.py in each variant,
# inside a partition as `rtmgr serve` makes it (RT CPU = the last CPU, its
# cpuset rtmgr-rt/cpuN a root domain of its own), the root domain rebuilt
# before each variant and at the end. No daemon. Root only; takes the
# machine lock, applies a partition with a private journal and resets it at
# the end, also on failure and Ctrl-C.
#   bash bench/dl-leak-timing.sh [CYCLES] [OUT_DIR]
#   RTMGR=path/to/rtmgr (default: a release build of this tree)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-40}
OUT=${2:-bench/results/dl-leak-timing-$(date -u +%Y%m%dT%H%M%SZ)}
[ "$(id -u)" = 0 ] || { echo "bench/dl-leak-timing.sh: root only" >&2; exit 2; }
. bench/rt-domain.sh
start_rt_domain_bench dl-leak-timing
rebuild() { echo 0 > "$DOMAIN/cpuset.sched_load_balance"; echo 1 > "$DOMAIN/cpuset.sched_load_balance"; }
finish() {
  if [ -n "$DOMAIN" ]; then rebuild 2>/dev/null || true; fi
  give_back_rt_domain
  rm -rf "$WORK"
}
trap finish EXIT
trap 'exit 130' INT TERM
make_rt_domain
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(uname -r), $(nproc --all) CPUs, RT CPU $RT_CPU"
  echo "\$ bash bench/dl-leak-timing.sh $*"
} > "$OUT/README.txt"
: > "$OUT/runs.jsonl"
# runtime ns, set back µs after the wake-up, gap µs before the next cycle.
while read -r runtime after gap; do
  rebuild
  python3 bench/dl-leak-timing.py "$DOMAIN/tasks" "$NRT/tasks" "$runtime" "$after" "$gap" "$N" \
    | tee -a "$OUT/runs.jsonl"
done <<'VARIANTS'
2000000 1000 2000
2000000 1000 12000
500000 1000 2000
500000 1000 12000
500000 100 2000
500000 100 12000
2000000 100 2000
2000000 100 12000
VARIANTS
python3 - "$OUT/runs.jsonl" <<'PY' | tee -a "$OUT/README.txt"
import json, sys
print("runtime/10 ms  set back after wake  gap     admitted  EBUSY  first EBUSY")
for l in open(sys.argv[1]):
    r = json.loads(l)
    print("%8.1f ms %14d µs %7d µs %8d %6d  %s" % (r["runtime_ns"] / 1e6, r["set_back_after_wake_us"],
          r["gap_us"], r["admitted"], r["ebusy"], r["first_ebusy"]))
PY
echo "written: $OUT/runs.jsonl"
