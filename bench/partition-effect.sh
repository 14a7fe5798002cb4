#!/usr/bin/env bash
# Before/after effect of `rtmgr partition apply` on the RT CPU's latency, measured with
# an independent tool (cyclictest) under a stress-ng load, interleaved in rounds so
# that drift (the hypervisor, other guests) hits both configurations alike.
#   stock:     no partition, cyclictest SCHED_FIFO 99 on the RT CPU, load on every CPU
#   partition: rtmgr partition apply --rt-cpus RT; cyclictest via `rtmgr run --class rt0`;
#              the same load, started from the NRT set, stays on the NRT CPUs
# Usage: sudo bench/partition-effect.sh [ROUNDS=3] [SECONDS_PER_RUN=20] [RT_CPU=last]
# Prints a table and writes JSON to bench/results/partition-effect.json. Restores the
# machine on exit, error or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}; SECS=${2:-20}; RT=${3:-$(( $(nproc --all) - 1 ))}
RTMGR=${RTMGR:-target/release/rtmgr}
[ -x "$RTMGR" ] || cargo build --release -p rtmgr >/dev/null
for t in cyclictest stress-ng; do command -v $t >/dev/null || { echo "missing $t: apt-get install -y rt-tests stress-ng" >&2; exit 2; }; done
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 2; }
out=$(mktemp -d); mkdir -p bench/results
cleanup() { pkill -x stress-ng 2>/dev/null || true; sleep 0.3; pkill -9 -x stress-ng 2>/dev/null || true; "$RTMGR" partition reset >/dev/null || true; rm -rf "$out"; }
trap cleanup EXIT; trap 'exit 130' INT TERM
LOOPS=$(( SECS * 1000 ))
load() { stress-ng --cpu "$(nproc)" --hdd 1 --sock 1 --vm 1 --vm-bytes 64M --timeout $((SECS + 5))s -q 2>/dev/null & }
ct() { "$@" cyclictest -q -m -p 99 -a "$RT" -t 1 -i 1000 -l "$LOOPS" -h 20000 > "$1.txt" 2>/dev/null; }
# percentile from cyclictest's histogram (1 µs buckets, overflows counted as > 20000 µs)
pct() { awk -v p="$2" '/^[0-9]/{n[$1+0]=$2; tot+=$2} /Histogram Overflows/{ov=$4+0}
  END{tot+=ov; need=p*tot; c=0; for(i=0;i<20000;i++){c+=n[i]; if(c>=need){print i; exit}} print ">20000"}' "$1"; }
mx() { awk '/Max Latencies/{print $4+0}' "$1"; }
for r in $(seq 1 "$ROUNDS"); do
  for cfg in stock partition; do
    if [ $cfg = partition ]; then "$RTMGR" partition apply --rt-cpus "$RT" >/dev/null; fi
    load; sleep 1
    if [ $cfg = partition ]; then
      "$RTMGR" run --class rt0 --cpu "$RT" --mlock -- cyclictest -q -m -p 99 -a "$RT" -t 1 -i 1000 -l "$LOOPS" -h 20000 > "$out/$cfg.$r.txt" 2>/dev/null
    else
      chrt -f 99 cyclictest -q -m -p 99 -a "$RT" -t 1 -i 1000 -l "$LOOPS" -h 20000 > "$out/$cfg.$r.txt" 2>/dev/null
    fi
    pkill -x stress-ng || true; wait 2>/dev/null || true
    [ $cfg = partition ] && "$RTMGR" partition reset >/dev/null
    printf 'round %d %-9s p99 %5s µs  p99.9 %5s µs  max %6s µs\n' "$r" "$cfg" "$(pct "$out/$cfg.$r.txt" 0.99)" "$(pct "$out/$cfg.$r.txt" 0.999)" "$(mx "$out/$cfg.$r.txt")" >&2
  done
done
# Merge rounds per configuration and report.
json="{\"schema\":\"rtmgr.bench.partition-effect/1\",\"rounds\":$ROUNDS,\"seconds_per_run\":$SECS,\"rt_cpu\":$RT,\"configs\":{"
printf '\n%-10s %8s %8s %8s %8s %9s\n' config samples p50_us p99_us p99.9_us max_us
sep=""
for cfg in stock partition; do
  awk '/^[0-9]/{n[$1+0]+=$2} /Histogram Overflows/{ov+=$4} /Max Latencies/{if($4+0>m)m=$4+0}
    END{for(i in n) print i, n[i]; print "# Histogram Overflows: " ov+0; print "# Max Latencies: " m+0}' "$out/$cfg".*.txt | sort -n > "$out/$cfg.all"
  n=$(awk '/^[0-9]/{s+=$2} END{print s}' "$out/$cfg.all")
  p50=$(pct "$out/$cfg.all" 0.5); p99=$(pct "$out/$cfg.all" 0.99); p999=$(pct "$out/$cfg.all" 0.999); m=$(mx "$out/$cfg.all")
  printf '%-10s %8s %8s %8s %8s %9s\n' $cfg "$n" "$p50" "$p99" "$p999" "$m"
  json+="$sep\"$cfg\":{\"samples\":$n,\"p50_us\":\"$p50\",\"p99_us\":\"$p99\",\"p99_9_us\":\"$p999\",\"max_us\":$m}"; sep=","
done
json+="}}"
echo "$json" > bench/results/partition-effect.json
echo "$json"
