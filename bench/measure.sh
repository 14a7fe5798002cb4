#!/usr/bin/env bash
# Reproduce the measurement figures of the README ("measure" and "evaluate"
# sections). Root only; takes about 5 minutes. Each step writes its JSON report
# (schema: docs/report-schema.md) and SVG plots into $OUT and prints its table.
#   bash bench/measure.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/results/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
cargo build --release -p rtmgr >/dev/null
R=$PWD/target/release/rtmgr
[ -n "${CARGO_TARGET_DIR:-}" ] && R=$CARGO_TARGET_DIR/release/rtmgr
echo "# $(uname -r), $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/README.txt"

step() { echo; echo "\$ rtmgr $*" | tee -a "$OUT/README.txt"; "$R" "$@" | tee -a "$OUT/README.txt"; }

# 1. The main job: stock vs shield vs idle-guests vs balanced, interleaved (~60 s).
step evaluate --out "$OUT/evaluate"
# 2. rtmgr's probe vs cyclictest, alternated under the same `all` load (~40 s).
step measure latency --compare-cyclictest --duration 40s --rounds 4 --load all \
  --json "$OUT/compare.json" --svg "$OUT/compare.svg"
# 3. McKenney Fig. 8: tails vs number of parallel RT tasks on one CPU,
#    K = 1, 2, 4, 8 interleaved in 3 rounds of 5 s (README table: medians).
for r in 1 2 3; do
  for k in 1 2 4 8; do
    step measure latency --cpus 1 --interval 1ms --duration 5s --parallel "$k" \
      --json "$OUT/parallel-r$r-k$k.json" --svg "$OUT/parallel-r$r-k$k.svg"
  done
done
# 4. ARTiS §3.2: execution-time variation of 1M divisions under the `all` load.
step measure exec --runs 300 --load all --json "$OUT/exec.json" --svg "$OUT/exec.svg"
# 5. DROPS §5.3: periodicity of two tasks woken alternately by a 100 µs timer.
step measure periodicity --duration 5s --json "$OUT/periodicity.json" --svg "$OUT/periodicity.svg"
step measure periodicity --duration 5s --load all --json "$OUT/periodicity-all.json" --svg "$OUT/periodicity-all.svg"
echo; echo "results in $OUT"
