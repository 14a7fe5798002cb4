#!/usr/bin/env bash
# Issue 27 item 4: the daemon's kernel steps for a grant and a release,
# without the daemon (docs/repro/dl_stranded.c), in the variants the
# soak's stranded threads suggest, inside a partition as `rtmgr serve`
# makes it (RT CPU = the last CPU, its cpuset rtmgr-rt/cpuN a root domain of
# its own). Does any thread stay runnable without running? Root only; takes
# the machine lock, applies a partition with a private journal and resets
# it at the end, also on failure and Ctrl-C.
#   bash bench/dl-stranded.sh [CYCLES_PER_VARIANT] [OUT_DIR]
#   RTMGR=path/to/rtmgr (default: a release build of this tree)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-4000}
OUT=${2:-bench/results/dl-stranded-$(date -u +%Y%m%dT%H%M%SZ)}
[ "$(id -u)" = 0 ] || { echo "bench/dl-stranded.sh: root only" >&2; exit 2; }
. bench/rt-domain.sh
start_rt_domain_bench dl-stranded
finish() {
  give_back_rt_domain
  rm -rf "$WORK"
}
trap finish EXIT
trap 'exit 130' INT TERM
cc -Wall -Wextra -Werror -O2 -pthread -o "$WORK/dl_stranded" docs/repro/dl_stranded.c
make_rt_domain
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(uname -r), $(nproc --all) CPUs, RT CPU $RT_CPU"
  echo "\$ bash bench/dl-stranded.sh $*"
} > "$OUT/README.txt"
status=0
while read -r variant; do
  echo "== $variant" | tee -a "$OUT/README.txt"
  # shellcheck disable=SC2086
  "$WORK/dl_stranded" --rt-cpuset "$DOMAIN" --nrt-cpuset "$NRT" --fifo $variant "$N" \
    > "$WORK/out.txt" 2>/dev/null || { rc=$?; [ "$rc" = 1 ] || status=$rc; }
  cat "$WORK/out.txt" >> "$OUT/README.txt"
  tail -1 "$WORK/out.txt"
done <<'VARIANTS'
--workers 4 --nap-us 100
--workers 4 --nap-us 0
--workers 4 --nap-us 100 --after-run
--workers 4 --nap-us 100 --spin-us 300
--workers 4 --nap-us 100 --defer-back-ms 10
--workers 4 --nap-us 100 --spin-us 300 --defer-back-ms 10
--workers 8 --nap-us 0 --spin-us 1000 --step-us 300 --defer-back-ms 10
--workers 16 --nap-us 1000 --step-us 100
--workers 16 --nap-us 1000 --step-us 100 --defer-back-ms 10
--workers 16 --nap-us 1000 --spin-us 200 --step-us 100 --rebuild-every 10
VARIANTS
echo "written: $OUT/README.txt"
exit "$status"
