#!/usr/bin/env bash
# Issue 29 item 5: what an idle `rtmgr serve` costs. A daemon with
# rt_cpus = "0" (or RT_CPUS), the balancer on, no client and no
# reservation; its utime+stime from /proc/PID/stat (and per thread) over
# SECONDS_ after a warm-up, as % of one CPU. Root only; it starts its own
# daemon with a private state directory, holds the machine lock, and gives
# the machine back at the end, also on Ctrl-C. Measure alone.
#   bash bench/idle-daemon.sh [SECONDS_] [OUT_DIR]      RTMGR=path RT_CPUS=0
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
OUT=${2:-bench/results/idle-daemon-$(date -u +%Y%m%dT%H%M%SZ)}
RT_CPUS=${RT_CPUS:-0}
[ "$(id -u)" = 0 ] || { echo "bench/idle-daemon.sh: root only (it starts rtmgr serve)" >&2; exit 2; }
if [ -z "${RTMGR:-}" ]; then
  cargo build --release -p rtmgr >/dev/null
  RTMGR=${CARGO_TARGET_DIR:-$PWD/target}/release/rtmgr
fi
. bench/machine-lock.sh
take_machine_lock
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STATE=$(mktemp -d /tmp/rtmgr-idle.XXXXXX)
cat > "$STATE/rtmgr.toml" <<CFG
rt_cpus = "$RT_CPUS"
[serve]
state_dir = "$STATE/state"
balancer = true
CFG
. bench/scratch-daemon.sh
finish() {
  trap - INT TERM EXIT
  stop_scratch_daemon
}
trap finish EXIT
trap 'exit 130' INT TERM
start_scratch_daemon
sleep 5
ticks() { awk '{print $14+$15}' "$1" 2>/dev/null || echo 0; }
declare -A T0
for t in /proc/$DPID/task/*; do T0[$t]=$(ticks "$t/stat"); done
P0=$(ticks /proc/$DPID/stat)
sleep "$SECS"
P1=$(ticks /proc/$DPID/stat)
HZ=$(getconf CLK_TCK)
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(uname -r), $(nproc --all) CPUs, rt_cpus=\"$RT_CPUS\", balancer on, no client"
  echo "\$ RT_CPUS=$RT_CPUS bash bench/idle-daemon.sh $SECS"
  awk -v d=$((P1 - P0)) -v s="$SECS" -v hz="$HZ" 'BEGIN{printf "daemon: %d ticks in %d s = %.2f %% of one CPU\n", d, s, 100*d/hz/s}'
  for t in /proc/$DPID/task/*; do
    c=$(ticks "$t/stat"); n=$(cat "$t/comm" 2>/dev/null || echo gone)
    awk -v d=$((c - ${T0[$t]:-0})) -v s="$SECS" -v hz="$HZ" -v n="$n" 'BEGIN{printf "  %-16s %4d ticks %.2f %%\n", n, d, 100*d/hz/s}'
  done
} | tee "$OUT/README.txt"
