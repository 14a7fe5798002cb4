#!/usr/bin/env bash
# The README's first command on a machine without stress-ng (a fresh Debian, a
# minimal image): `cargo run --release -p rtmgr -- evaluate --quick` (with
# RTMGR=PATH, that binary as it is, built already) with a PATH
# that holds every program of this PATH but stress-ng (symlinks in a temporary
# directory), then checks of its report: the built-in load engine ran, every
# round and configuration was measured, every loaded configuration has
# throughput for the six built-in load components, and nothing is left behind:
# no load process or load directory, and the machine as it was (IRQ masks,
# defaults, cpusets, journal), compared under the machine lock before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "evaluate-without-stress-ng: skip: rtmgr evaluate needs root"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# What rtmgr changes while it runs and must give back.
machine_state() {
  cat /proc/irq/default_smp_affinity /sys/devices/virtual/workqueue/cpumask 2>/dev/null || true
  for f in /proc/irq/[0-9]*/smp_affinity; do echo "$f $(cat "$f" 2>/dev/null)"; done
  cat /sys/fs/cgroup/cpuset/cpuset.sched_load_balance 2>/dev/null || true
  ls -d /sys/fs/cgroup/cpuset/rtmgr* /sys/fs/cgroup/unified/rtmgr* /sys/fs/cgroup/rtmgr* \
    /run/rtmgr/journal.jsonl 2>/dev/null || true
}

# Run "$@" holding rtmgr's machine lock the way rtmgr takes it (flock, then
# check the file is still the one locked; remove it on release), so that no
# other rtmgr is half-way through a change while the state is read.
with_machine_lock() {
  local lock=/run/lock/rtmgr.lock rc=0
  mkdir -p /run/lock
  while :; do
    exec 9<>"$lock"
    flock 9
    [ "$(stat -L -c %i /proc/$$/fd/9)" = "$(stat -c %i "$lock" 2>/dev/null)" ] && break
    exec 9>&-
  done
  "$@" || rc=$?
  rm -f "$lock"
  exec 9>&-
  return $rc
}

with_machine_lock machine_state >"$tmp/before"
mkdir "$tmp/bin" "$tmp/tmp"
IFS=: read -ra dirs <<< "$PATH"
for d in "${dirs[@]}"; do
  [ -d "$d" ] || continue
  for f in "$d"/*; do
    name=${f##*/}
    # The first of a name on PATH wins, as for the shell.
    [ "$name" = stress-ng ] || [ -e "$tmp/bin/$name" ] || ln -s "$f" "$tmp/bin/$name"
  done
done
if PATH="$tmp/bin" command -v stress-ng >/dev/null; then
  echo "evaluate-without-stress-ng: stress-ng is still on PATH" >&2
  exit 1
fi
# RTMGR=PATH: a binary built already, run as it is: .ci/run gives the debug build
# the tests made (a cold release build, 4 min, does not fit in its 20 minutes
# beside them, and `cargo run` without the tests' features rebuilt three crates,
# 35 s). Without it, the README's command.
run_rtmgr=(cargo run --release -p rtmgr --)
if [ -n "${RTMGR:-}" ]; then
  [ -x "$RTMGR" ] || { echo "evaluate-without-stress-ng: RTMGR=$RTMGR is not an executable" >&2; exit 1; }
  run_rtmgr=("$(realpath "$RTMGR")")
fi
PATH="$tmp/bin" TMPDIR="$tmp/tmp" "${run_rtmgr[@]}" evaluate --quick --out "$tmp/ev"
report="$tmp/ev/report.json"
fail() { echo "evaluate-without-stress-ng: $*" >&2; exit 1; }
grep -q '"schema": "rtmgr.report/3"' "$report" || fail "not a rtmgr.report/3 report"
grep -q '"load_engine": "builtin"' "$report" || fail "the built-in load engine did not run"
grep -q '"partial": false' "$report" || fail "the run was cut short"
grep -q '"rounds_done": 4' "$report" || fail "not every round ran"
grep -q '"intervals"' "$report" || fail "no intervals in the report"
grep -q '"name": "shield-twin"' "$report" || fail "no A/A control (shield-twin)"
# 5 loaded configurations (stock, shield, idle-guests, balanced, shield-twin),
# each with its throughput and that of each of its 4 rounds.
for c in int-float write-fsync tcp-loopback futex-mutex file-lock cache-walk; do
  n=$(grep -c "\"component\": \"$c\"" "$report" || true)
  [ "$n" = 25 ] || fail "component $c has throughput $n times; expected 5 loaded configurations x (1 + 4 rounds)"
done
[ -z "$(ls -A "$tmp/tmp")" ] || fail "load directories left behind: $(ls "$tmp/tmp")"
if grep -lsz -- "$tmp/tmp/[r]tmgr-load" /proc/[0-9]*/cmdline >/dev/null; then
  fail "a load process outlived evaluate"
fi
with_machine_lock machine_state >"$tmp/after"
diff "$tmp/before" "$tmp/after" >&2 || fail "the machine was not given back as it was (diff above: before, after)"
echo "evaluate-without-stress-ng: ok (report checked, nothing left behind)"
