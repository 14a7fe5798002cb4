#!/usr/bin/env bash
# Issue 27: how much CPU the daemon spends per grant round trip (reserve ->
# granted -> release), and the round trips it gives, for two rtmgr builds
# alternated in the same minutes (A, B, A, B…; a fresh daemon each run).
# The clients are crates/rtmgr/examples/grant_client.rs (a few µs of CPU
# each, no bystander); the daemon's threads' CPU (schedstat) and read(2)
# calls (/proc/PID/task/TID/io syscr) are differenced around each run and
# divided by its round trips. On this VM the guest's CPU times include what
# the host takes unseen: compare A and B run by run, not with other days.
# Root only; holds the machine lock; gives the machine back on exit.
#   bash bench/grant-cpu-ab.sh RTMGR_A RTMGR_B [OUT_DIR]
#   CLIENTS=16 N=1600 (round trips per run) ROUNDS=4 CLASS=rt1:20 BUDGET_NS=500000
#   CLIENT_ARGS="--spin --pace-us 20000": more grant_client options
# Writes OUT_DIR/runs.jsonl (one JSON object per run, "version": 1) and
# prints a table.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench/grant-cpu-ab.sh: root only (it starts rtmgr serve)" >&2; exit 2; }
[ $# -ge 2 ] || { echo "usage: bash bench/grant-cpu-ab.sh RTMGR_A RTMGR_B [OUT_DIR]" >&2; exit 2; }
A=$(realpath "$1"); B=$(realpath "$2")
OUT=${3:-bench/results/grant-cpu-ab-$(date -u +%Y%m%dT%H%M%SZ)}
CLIENTS=${CLIENTS:-16}; N=${N:-1600}; ROUNDS=${ROUNDS:-4}; CLASS=${CLASS:-rt1:20}; BUDGET_NS=${BUDGET_NS:-500000}
cargo build --release -p rtmgr --example grant_client >/dev/null
DRIVER=${CARGO_TARGET_DIR:-$PWD/target}/release/examples/grant_client
. bench/machine-lock.sh
take_machine_lock
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(uname -r), $(nproc --all) CPUs; A=$A B=$B" > "$OUT/README.txt"
echo "\$ CLIENTS=$CLIENTS N=$N ROUNDS=$ROUNDS CLASS=$CLASS BUDGET_NS=$BUDGET_NS CLIENT_ARGS=\"${CLIENT_ARGS:-}\" bash bench/grant-cpu-ab.sh $*" >> "$OUT/README.txt"
STATE=
RTMGR=
RT_CPU=$(tr ',' '\n' < /sys/devices/system/cpu/online | tail -1 | sed 's/.*-//')
. bench/scratch-daemon.sh
trap 'stop_scratch_daemon' EXIT INT TERM
# Each daemon thread: name, run ns (schedstat), read calls, write calls.
snap() { for t in /proc/"$DPID"/task/*; do
  echo "$(cat "$t/comm" | tr ' ' _) $(cut -d' ' -f1 "$t/schedstat") $(awk '/^syscr|^syscw/{printf "%s ", $2}' "$t/io")"; done; }
: > "$OUT/runs.jsonl"
for round in $(seq "$ROUNDS"); do
  for side in A B; do
    RTMGR=$([ $side = A ] && echo "$A" || echo "$B")
    STATE=$(mktemp -d /tmp/rtmgr-cpu-ab.XXXXXX)
    write_scratch_config on
    start_scratch_daemon
    echo "round $round/$ROUNDS: $side" >&2
    snap > "$STATE/before"
    "$DRIVER" --socket "$STATE/state/rtmgr.sock" --clients "$CLIENTS" --requests "$N" \
      --class "$CLASS" --budget-ns "$BUDGET_NS" ${CLIENT_ARGS:-} > "$STATE/client.json"
    snap > "$STATE/after"
    python3 - "$STATE" "$side" "$round" "$CLIENTS" >> "$OUT/runs.jsonl" <<'PY'
import json, sys
state, side, rnd, clients = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = json.load(open(state + "/client.json"))
n = len(c["reserve_ns"])
def rows(f):
    out = {}
    for l in open(f):
        name, *v = l.split()
        out[name if name.startswith("rtmgr-") else "loop"] = [int(x) for x in v]
    return out
b, a = rows(state + "/before"), rows(state + "/after")
threads = {k: {"cpu_us_per_round_trip": (a[k][0] - b[k][0]) / 1e3 / max(n, 1),
               "reads_per_round_trip": (a[k][1] - b[k][1]) / max(n, 1)}
           for k in a if k in b and k in ("loop", "rtmgr-grant")}
def q(xs):
    s = sorted(xs)
    return {"p50_ns": s[len(s) // 2], "p99_ns": s[min(len(s) - 1, int(.99 * len(s)))], "max_ns": s[-1],
            "mean_ns": sum(s) // len(s)} if s else {}
print(json.dumps({"version": 1, "side": side, "round": rnd, "clients": clients, "round_trips": n,
                  "failures": len(c["failures"]), "daemon": threads,
                  "reserve": q(c["reserve_ns"]), "release": q(c["release_ns"])}))
PY
    stop_scratch_daemon
  done
done
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys
print("side round  loop µs/rt  worker µs/rt  reads/rt  reserve p50/p99 ms  release p50/p99 ms  failed")
for l in open(sys.argv[1]):
    r = json.loads(l); d = r["daemon"]
    lp, wk = d.get("loop", {}), d.get("rtmgr-grant", {})
    print("%-4s %5d %11.1f %13.1f %9.1f %9.2f / %5.2f %9.2f / %5.2f %7d" % (
        r["side"], r["round"], lp.get("cpu_us_per_round_trip", 0), wk.get("cpu_us_per_round_trip", 0),
        lp.get("reads_per_round_trip", 0) + wk.get("reads_per_round_trip", 0),
        r["reserve"]["p50_ns"] / 1e6, r["reserve"]["p99_ns"] / 1e6,
        r["release"]["p50_ns"] / 1e6, r["release"]["p99_ns"] / 1e6, r["failures"]))
PY
echo "written: $OUT/runs.jsonl" >&2
