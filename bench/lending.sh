#!/usr/bin/env bash
# Issue 11's goal, measured: N full `rtmgr evaluate --trace` runs (default 3),
# then per run balanced against shield on the same RT CPU — p99.9 and max
# ratios, ordinary-work throughput ratio — and each configuration's top tail
# causes. Root only; about 1.5 min per run. Measure alone (no build or test
# running meanwhile): the figures are the machine's.
#   bash bench/lending.sh [RUNS] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
OUT=${2:-bench/results/lending-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
cargo build --release -p rtmgr >/dev/null
R=${CARGO_TARGET_DIR:-$PWD/target}/release/rtmgr
echo "# $(uname -r), $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/README.txt"
for i in $(seq 1 "$RUNS"); do
  echo "\$ rtmgr evaluate --trace --out $OUT/run$i" | tee -a "$OUT/README.txt"
  "$R" evaluate --trace --out "$OUT/run$i" > "$OUT/run$i.txt" 2>&1
done
# One line per run: the goal's three ratios, then the top causes.
for i in $(seq 1 "$RUNS"); do
  jq -r --arg run "$i" '
    def cfg($n): .configs[] | select(.name == $n);
    def geo($t): ($t | map(.ops_per_s | log) | add / length | exp);
    (cfg("shield")) as $s | (cfg("balanced")) as $b |
    "run \($run): RT CPU \(.rt_cpus) (\(.rt_choice // "given" | .[0:60])…), load engine \(.load_engine); " +
    "balanced/shield p99.9 \(($b.result.summary.p99_9_ns / $s.result.summary.p99_9_ns * 100 | round) / 100)x (goal <= 1.2), " +
    "max \(($b.result.summary.max_ns / $s.result.summary.max_ns * 100 | round) / 100)x (goal <= 1.5), " +
    "throughput \((geo($b.throughput) / geo($s.throughput) * 100 | round) / 100)x (goal >= 1.25)",
    (.configs[] | "  \(.name): p99 \(.result.summary.p99_ns / 1000 | round) µs, p99.9 \(.result.summary.p99_9_ns / 1000 | round) µs, max \(.result.summary.max_ns / 1000 | round) µs; tail: " +
      ([.tail_causes.causes[:3][]? | "\(.label) \(.total_ns / 1000 | round) µs/\(.samples)"] | join("; ")))
  ' "$OUT/run$i/report.json" | tee -a "$OUT/README.txt"
done
echo "results in $OUT"
