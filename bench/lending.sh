#!/usr/bin/env bash
# Issue 20's goals, measured: the host-preemption test, then RUNS full
# `rtmgr evaluate` runs per load engine (default 5, builtin and stress-ng),
# and per run balanced against the shield on the same RT CPU: p99.9 and max
# ratios over all samples and over the samples the host did not stall,
# ordinary-work throughput ratio, and what the balancer did (lends, lending
# off and why, machinery CPU). Root only; about 70 s per run. Measure alone
# (no build, test or helper running meanwhile): the figures are the machine's.
#   bash bench/lending.sh [RUNS] [OUT_DIR]        (ENGINES="builtin" to pick)
# On a machine with >= 4 cores and no steal this shows what lending gains
# (goal there: throughput >= 1.25x the shield's within the same tail bounds);
# on a VM whose host preempts busy vCPUs it shows the balancer not lending.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
OUT=${2:-bench/results/lending-$(date -u +%Y%m%dT%H%M%SZ)}
ENGINES=${ENGINES:-builtin stress-ng}
command -v jq >/dev/null || { echo "bench/lending.sh needs jq (apt-get install jq)" >&2; exit 2; }
mkdir -p "$OUT"
cargo build --release -p rtmgr >/dev/null
R=${CARGO_TARGET_DIR:-$PWD/target}/release/rtmgr
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(uname -r), $(nproc) CPUs, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "\$ rtmgr status --host-test --json"
} | tee "$OUT/README.txt"
# The host test caches its result in /run/rtmgr: put back what was there.
CACHE=/run/rtmgr/host-preemption.json
BEFORE=$(mktemp)
had_dir=$([ -d /run/rtmgr ] && echo 1 || echo 0)
had_cache=$([ -e "$CACHE" ] && cp "$CACHE" "$BEFORE" && echo 1 || echo 0)
restore_cache() {
  if [ "$had_cache" = 1 ]; then cp "$BEFORE" "$CACHE"; else rm -f "$CACHE"; fi
  if [ "$had_dir" = 0 ]; then rmdir /run/rtmgr 2>/dev/null || true; fi
  rm -f "$BEFORE"
}
trap restore_cache EXIT
"$R" status --host-test --json > "$OUT/host-test.json"
jq -r '"host test: \(.host_preemption.verdict // "none")"' "$OUT/host-test.json" | tee -a "$OUT/README.txt"
for engine in $ENGINES; do
  for i in $(seq 1 "$RUNS"); do
    echo "\$ rtmgr evaluate --load-engine $engine --out $OUT/$engine-run$i" | tee -a "$OUT/README.txt"
    "$R" evaluate --load-engine "$engine" --out "$OUT/$engine-run$i" > "$OUT/$engine-run$i.txt" 2>&1
  done
done
# One line per run with the goals' ratios, then the balancer's line.
summary() {
  jq -r --arg run "$1" '
    def cfg($n): .configs[] | select(.name == $n);
    def geo($t): ($t | map(.ops_per_s | log) | add / length | exp);
    def r($a; $b): if $a == null or $b == null or $b == 0 then "-" else (($a / $b * 100 | round) / 100 | tostring) end;
    (cfg("shield")) as $s | (cfg("balanced")) as $b |
    "\($run): p99.9 \(r($b.result.summary.p99_9_ns; $s.result.summary.p99_9_ns))x (goal <= 1.2), " +
    "max \(r($b.result.summary.max_ns; $s.result.summary.max_ns))x (goal <= 1.5 in 4 of 5), " +
    "throughput \(r(geo($b.throughput); geo($s.throughput)))x (goal >= 1.0 median, >= 0.95 each), " +
    "guest p99.9 \(r($b.result.guest_summary.p99_9_ns; $s.result.guest_summary.p99_9_ns))x; " +
    "shield p99.9/max \($s.result.summary.p99_9_ns / 1000 | round)/\($s.result.summary.max_ns / 1000 | round) µs, " +
    "balanced \($b.result.summary.p99_9_ns / 1000 | round)/\($b.result.summary.max_ns / 1000 | round) µs, " +
    "host-stalled samples shield \($s.result.host_stalled_samples // 0) balanced \($b.result.host_stalled_samples // 0)",
    "  balancer: \($b.balancer.lends // 0) lends, machinery \(($b.balancer.machinery_cpu_percent // 0) * 100 | round / 100) % of a CPU; " +
      ([$b.balancer.lending[]? | (.reason // "lending on on CPU \(.cpu)")] | join("; "))
  ' "$2"
}
for engine in $ENGINES; do
  for i in $(seq 1 "$RUNS"); do
    summary "$engine run $i" "$OUT/$engine-run$i/report.json" | tee -a "$OUT/README.txt"
  done
done
echo "results in $OUT"
