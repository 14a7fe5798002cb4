#!/usr/bin/env bash
# Instructions per simulated event of `Sim::run` (callgrind: repeatable on a
# shared machine, unlike wall-clock events/s) for the two ARTiS §3.3
# scenarios under every balancer, as `rtmgr lb --sim` runs them.
#   bench/sim-instructions.sh [BALANCER...]   (default: all four)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p rtmgr-sim --example sim_reports
bin=${CARGO_TARGET_DIR:-target}/release/examples/sim_reports
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for s in artis-3.3 artis-3.3-64cpu; do
  for b in "${@:-linux shield artis rtmgr}"; do
    for b1 in $b; do
      events=$("$bin" "$tmp/r" "$s" "$b1" | awk '{print $3}')
      valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" --toggle-collect='*Sim::run*' \
        "$bin" "$tmp/r" "$s" "$b1" >/dev/null 2>&1
      ir=$(awk '/^summary:/ {print $2}' "$tmp/cg")
      echo "$s $b1: $events events, $ir instructions, $((ir / events)) per event"
    done
  done
done
