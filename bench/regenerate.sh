#!/usr/bin/env bash
# Every file under bench/results that this tree can regenerate, and how the others were made.
#   bench/regenerate.sh          # rewrite the simulated results (lb-sim-*.json) and the
#                                # docs/balance.md tables made from them
#   bench/regenerate.sh check    # the same into a temporary copy; fail on any difference
#                                # (CI: scripts/test.sh; a few seconds)
#   bench/regenerate.sh list     # every file under bench/results and the command behind it
# The simulator is deterministic (seeded; `cargo test -p rtmgr-sim` checks it event by
# event), so a simulated result is a function of the code and its scenario: the committed
# ones must equal what the code gives today. Their timing fields (wall_s, events_per_s:
# this machine's speed) are left out. The live results are measurements of one machine at
# one time: `list` prints the command that would take them again (root, the machine lock,
# a quiet machine), never runs it.
# RTMGR=path/to/rtmgr selects the binary (default: the debug build, built if needed).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-write}

# scenario -> the balancers its committed result compares
SIM_SCENARIOS=(artis-3.3 artis-3.3-kernel artis-3.3-64cpu rotation-2cpu)
SIM_BALANCERS=linux,shield,artis,rtmgr
DOC=docs/balance.md

list() {
  cat <<'LIST'
simulated (bench/regenerate.sh rewrites them; `check` in CI):
LIST
  for s in "${SIM_SCENARIOS[@]}"; do
    echo "  bench/results/lb-sim-$s.json    rtmgr lb scenarios/$s.lbu --sim --balancer $SIM_BALANCERS --json (timing fields left out)"
  done
  cat <<'LIST'
live (measurements of one machine at one time: root, a quiet machine; not run here):
  bench/results/lb-live-2cpu.json             sudo rtmgr lb scenarios/live-2cpu.lbu --balancer shield,rtmgr,shield,rtmgr --save bench/results/lb-live-2cpu.json   (2026-11-22, 2-vCPU VM)
  bench/results/lb-live-rotation-2cpu.json    sudo rtmgr lb scenarios/rotation-2cpu.lbu --balancer shield,rtmgr,shield,rtmgr,shield,rtmgr --save bench/results/lb-live-rotation-2cpu.json   (2026-11-22, 2-vCPU VM)
  bench/results/partition-effect.json         sudo bench/partition-effect.sh 3 20   (2026-11-22, 2-vCPU VM)
  bench/results/first-runs-20261123/          the commands listed in its README.txt (2026-11-23, 2-vCPU VM)
  bench/results/lending-20261123/             sudo bash bench/lending.sh 3 bench/results/lending-20261123, only its README.txt kept (2026-11-23, 2-vCPU VM, load average in its first line)
  bench/results/lending-20261126/             sudo bash bench/lending.sh 5 bench/results/lending-20261126, its README.txt, host-test.json and a summary.md table kept (2026-11-26, 2-vCPU VM, alone); evaluate-trace-builtin.txt: sudo rtmgr evaluate --load-engine builtin --trace
  bench/results/evaluate-intervals-20261127/  five `sudo rtmgr evaluate --out DIR` in a row, two `sudo rtmgr status --host-test --json` around `bash bench/capacity-hand.sh 3 3`, `sudo cargo test --release -p rtmgr-lab --test host_stall_live -- --nocapture`; summary.md (2026-11-27, 2-vCPU VM, alone)
  bench/results/grant-latency-20261127/       sudo bash bench/grant-latency.sh 50 DIR, its README.txt, grant-latency.json, floor.json, table.txt and a summary.md (2026-11-27, 2-vCPU VM, alone)
  bench/results/crash-cycles-20261127/        sudo bash bench/crash-cycles.sh 20 (2026-11-27, 2-vCPU VM, alone)
LIST
}

# Write the simulated results into DIR and the tables into the document DOC_OUT.
generate() {
  local dir=$1 doc_out=$2 bin
  if [ -n "${RTMGR:-}" ]; then
    bin=$RTMGR
  else
    cargo build -q -p rtmgr
    bin=${CARGO_TARGET_DIR:-target}/debug/rtmgr
  fi
  local raw
  raw=$(mktemp)
  for s in "${SIM_SCENARIOS[@]}"; do
    "$bin" lb "scenarios/$s.lbu" --sim --balancer "$SIM_BALANCERS" --json > "$raw"
    python3 bench/lb_sim_results.py strip "$raw" "$dir/lb-sim-$s.json"
  done
  rm -f "$raw"
  [ "$doc_out" = "$DOC" ] || cp "$DOC" "$doc_out"
  python3 bench/lb_sim_results.py tables "$doc_out" "$dir"
}

case $mode in
  write)
    generate bench/results "$DOC"
    echo "rewrote ${#SIM_SCENARIOS[@]} simulated results under bench/results and the tables of $DOC" ;;
  check)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp" "$tmp/balance.md"
    status=0
    for s in "${SIM_SCENARIOS[@]}"; do
      f=lb-sim-$s.json
      diff -q "bench/results/$f" "$tmp/$f" >/dev/null ||
        { echo "bench/results/$f differs from what the code gives today" >&2; status=1; }
    done
    diff -u "$DOC" "$tmp/balance.md" >&2 ||
      { echo "$DOC: its generated tables differ from the simulated results" >&2; status=1; }
    if [ $status -ne 0 ]; then
      echo "run bench/regenerate.sh, review the differences and commit them" >&2
      exit 1
    fi
    echo "the ${#SIM_SCENARIOS[@]} simulated results and the tables of $DOC are what the code gives today" ;;
  list) list ;;
  *) echo "usage: $0 [write|check|list]" >&2; exit 2 ;;
esac
