#!/usr/bin/env bash
# Simulated reports bit-identical (issue 19 item 7): every scenario of
# scenarios/ under every balancer, as `rtmgr lb --sim` runs it, written as
# JSON by the sim_reports example and compared byte for byte with a saved set.
#   bench/sim-identical.sh save DIR    # keep the reports of this tree in DIR
#   bench/sim-identical.sh check DIR   # compare this tree's reports with DIR
# Also prints each run's events and M events/s (noisy unless the machine is idle).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: $0 save|check DIR}
ref=${2:?usage: $0 save|check DIR}
cargo build --release -q -p rtmgr-sim --example sim_reports
bin=${CARGO_TARGET_DIR:-target}/release/examples/sim_reports
case $mode in
  save) "$bin" "$ref" ;;
  check)
    new=$(mktemp -d)
    trap 'rm -rf "$new"' EXIT
    "$bin" "$new"
    diff -r "$ref" "$new" && echo "all $(ls "$new" | wc -l) reports identical to $ref" ;;
  *) echo "usage: $0 save|check DIR" >&2; exit 2 ;;
esac
