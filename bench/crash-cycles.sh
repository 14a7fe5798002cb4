#!/usr/bin/env bash
# Issue 30's goal: N cycles of `rtmgr serve` with live rt0 and rt1 grants
# (a sleeping and a running client each), kill -9, restart (the grants are
# re-adopted), SIGTERM. A cycle is exact when the daemon exits 0 with no
# error line and every granted process ends as an ungranted `sleep` started
# beside them: cpuset, affinity, policy and priority, every rlimit, I/O
# priority (no CPU mask left behind). Prints "K/N exact, exit 0" last.
# Root only; the daemon runs as a user runs it (balancer on) in a private
# state directory; holds the machine lock and gives the machine back (also
# on Ctrl-C). Not a timing: takes about 3 s per cycle.
#   bash bench/crash-cycles.sh [N]          (RTMGR=path/to/rtmgr to skip the build)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20}
[ "$(id -u)" = 0 ] || { echo "bench/crash-cycles.sh: root only (it starts rtmgr serve)" >&2; exit 2; }
PY=$(command -v /usr/bin/python3 || command -v python3) || { echo "needs python3" >&2; exit 2; }
if [ -z "${RTMGR:-}" ]; then
  cargo build --release -p rtmgr >/dev/null
  RTMGR=${CARGO_TARGET_DIR:-$PWD/target}/release/rtmgr
fi
. bench/machine-lock.sh
take_machine_lock
STATE=$(mktemp -d /tmp/rtmgr-crash-cycles.XXXXXX)
chmod 755 "$STATE"
SOCK=$STATE/state/rtmgr.sock
RT_CPU=$(tr ',' '\n' < /sys/devices/system/cpu/online | tail -1 | sed 's/.*-//')
printf 'rt_cpus = "%s"\n[serve]\nstate_dir = "%s"\n' "$RT_CPU" "$STATE/state" > "$STATE/rtmgr.toml"
export RTMGR_LOCK_HELD=1
RUNNER='import time
while True:
    t = time.monotonic()
    while time.monotonic() - t < 0.002: pass
    time.sleep(0.008)'
DPID=
KIDS=()
cleanup() {
  for k in "${KIDS[@]}"; do kill "$k" 2>/dev/null || true; done
  KIDS=()
  if [ -n "$DPID" ]; then kill -TERM "$DPID" 2>/dev/null || true; wait "$DPID" 2>/dev/null || true; DPID=; fi
  if [ -e "$STATE/state/journal.jsonl" ] || [ -e "$STATE/state/grants.jsonl" ]; then
    "$RTMGR" partition reset --journal "$STATE/state/journal.jsonl" 9>&- >/dev/null || true
  fi
}
trap 'cleanup; rm -rf "$STATE"' EXIT
trap 'exit 130' INT TERM
start() {
  rm -f "$SOCK"
  "$RTMGR" serve --config "$STATE/rtmgr.toml" 9>&- 2>"$STATE/serve.log" &
  DPID=$!
  for _ in $(seq 200); do [ -S "$SOCK" ] && return 0; sleep 0.05; done
  return 1
}
listed() { "$RTMGR" reservations --socket "$SOCK" --json 9>&- | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)))'; }
# What a revocation must give back, without the pid.
seen() {
  local p=$1
  grep ':cpuset:' "/proc/$p/cgroup" | cut -d: -f3
  grep Cpus_allowed_list "/proc/$p/status"
  "$PY" -c 'import os,sys; p=int(sys.argv[1]); print(os.sched_getscheduler(p), os.sched_getparam(p).sched_priority, os.getpriority(os.PRIO_PROCESS, p))' "$p"
  cat "/proc/$p/limits"
  ionice -p "$p"
}
# From here on a failing step fails its cycle, with the reason, not the script.
set +e
exact=0
for i in $(seq 1 "$N"); do
  why=
  start || why="the daemon did not start: $(tail -1 "$STATE/serve.log")"
  sleep 300 9>&- & KIDS+=($!); control=$!
  args=(--socket "$SOCK" --period 10ms --budget 1ms)
  "$RTMGR" reserve "${args[@]}" -- sleep 300 9>&- 2>/dev/null & KIDS+=($!)
  "$RTMGR" reserve "${args[@]}" -- "$PY" -c "$RUNNER" 9>&- 2>/dev/null & KIDS+=($!)
  "$RTMGR" reserve "${args[@]}" --class rt1:20 -- sleep 300 9>&- 2>/dev/null & KIDS+=($!)
  "$RTMGR" reserve "${args[@]}" --class rt1:20 -- "$PY" -c "$RUNNER" 9>&- 2>/dev/null & KIDS+=($!)
  for _ in $(seq 100); do [ "$(listed)" = 4 ] && break; sleep 0.05; done
  [ -n "$why" ] || [ "$(listed)" = 4 ] || why="not granted: $(listed) of 4"
  kill -9 "$DPID"; wait "$DPID" 2>/dev/null
  start || why=${why:-"the daemon did not restart: $(tail -1 "$STATE/serve.log")"}
  [ -n "$why" ] || [ "$(listed)" = 4 ] || why="re-adopted $(listed) of 4"
  kill -TERM "$DPID"
  wait "$DPID"; rc=$?
  DPID=
  [ -n "$why" ] || [ "$rc" = 0 ] || why="exit $rc"
  [ -n "$why" ] || ! grep -q 'error:\|could not undo' "$STATE/serve.log" || why=$(grep -m1 'error:\|could not undo' "$STATE/serve.log")
  want=$(seen "$control")
  for k in "${KIDS[@]:1}"; do
    [ -n "$why" ] && break
    got=$(seen "$k")
    [ "$got" = "$want" ] || why="pid $k differs from an ungranted process: $(diff <(echo "$want") <(echo "$got") | grep '^[<>]' | tr '\n' ' ')"
  done
  cleanup
  if [ -z "$why" ]; then exact=$((exact + 1)); echo "cycle $i: exact, exit 0"; else echo "cycle $i: $why"; fi
done
echo "$exact/$N exact, exit 0"
[ "$exact" = "$N" ]
