#!/usr/bin/env bash
# Live figures of the balancer (README "balance"), root only, on this machine:
#  1. overhead of `rtmgr balance` at T = 50 ms with N (default 500) extra tasks,
#     alone and with HOGS (default 3) busy processes it has to balance,
#  2. the 2-CPU ARTiS §3.3 scenario live under linux, shield and rtmgr.
# Holds the machine lock throughout; every change is undone on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${RTMGR:-target/release/rtmgr}
N=${N:-500}
DUR=${DUR:-30}
OUT=${OUT:-/tmp/rtmgr-balance-bench}
mkdir -p "$OUT"
J="$OUT/journal"
. bench/machine-lock.sh
take_machine_lock
export RTMGR_LOCK_HELD=1
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$BIN" partition reset --journal "$J" >/dev/null 2>&1 || true
}
trap cleanup EXIT INT TERM

# N threads that wake every 100 ms for a few µs of work (a busy desktop/server),
# with HOGS busy processes on top in the second run (then the balancer
# has work: the NRT CPU is overloaded and the RT CPU gets guests).
overhead() {
  local label=$1 hogs=$2
  echo "== overhead ($label): $N sleeping/waking tasks + $hogs busy, T = 50 ms, $DUR s" >&2
  "$BIN" partition apply --rt-cpus 1 --journal "$J" >&2
  python3 - "$N" <<'PY' &
import sys, threading, time
def w():
    while True:
        s = 0
        for i in range(200): s += i
        time.sleep(0.1)
for _ in range(int(sys.argv[1])):
    threading.Thread(target=w, daemon=True).start()
time.sleep(3600)
PY
  pids+=($!)
  if [ "$hogs" -gt 0 ]; then
    stress-ng --cpu "$hogs" --timeout $((DUR + 10))s >/dev/null 2>&1 &
    pids+=($!)
  fi
  sleep 2
  "$BIN" balance --journal "$J" --duration-s "$DUR" --scan-every "${SCAN:-20}" --json > "$OUT/overhead-$label.json"
  cat "$OUT/overhead-$label.json"
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
  "$BIN" partition reset --journal "$J" >&2
}
overhead sleepers 0
overhead hogs "${HOGS:-3}"

[ -n "${SKIP_LB:-}" ] && exit 0
echo "== live lb: scenarios/live-2cpu.lbu" >&2
"$BIN" lb scenarios/live-2cpu.lbu --balancer linux,shield,rtmgr --journal "$J" --save "$OUT/lb-live.json"
