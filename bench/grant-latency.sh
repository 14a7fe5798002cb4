#!/usr/bin/env bash
# Issue 27 item 6: the daemon's reserve -> granted -> release round trip,
# p50/p99/max, for 1, 16 and 64 concurrent clients, rt0 and rt1, client
# threads sleeping in recv() or running (spinning) while they wait; and, in
# the same run, the kernel steps a grant makes, alone, as the floor (a v1
# cpuset attach of a sleeping thread, sched_setscheduler, sched_setattr,
# prlimit, ioprio_set), and the attaches alone from as many processes at
# once as each cell has clients (its reserves' floor: each attach waits for
# the others' under cgroup_mutex). The clients are the protocol's conformance client
# (crates/rtmgr/tests/conformance/rtmgr_client.py, Python standard library).
# Root only. It starts its own daemon (private state directory, balancer
# off, a root rule without rate limit), holds the machine lock throughout and
# gives the machine back at the end, also on Ctrl-C (the cells done so far
# are then the result). Measure alone: the figures are the machine's.
#   bash bench/grant-latency.sh [REQUESTS_PER_CELL] [OUT_DIR]
#   CLIENTS="1 16 64" CLASSES="rt0 rt1" STATES="sleeping running" BUDGET_NS=2000000 RTMGR=path/to/rtmgr
#   WORKERS="on off" ROUNDS=3: each round runs every cell with the daemon's
#   grant worker on, then off ([serve] grant_worker), a fresh daemon each,
#   so the two are compared in the same minutes; a cell's figures merge its
#   rounds. A bystander client (SCHED_FIFO 2) asks `list` every 2 ms during each cell;
#   BYSTANDER=0: none (its ~0.25 ms of Python per `list`, above the daemon,
#   is then not taken from the clients on the NRT CPU). With
#   CLIENT_PROGRAM=lean the bystander is the lean program too (a few µs
#   per `list`; grant_client --bystander).
#   PACE_US=U (lean clients): each client starts a round trip every U µs,
#   all in step, instead of a closed loop (concurrent programs that each
#   re-reserve now and then, their requests arriving together).
#   RUNQ=1 (lean clients): each round trip's share the client's own thread
#   waited runnable for a CPU (schedstat run delay), as reserve_client_runq.
#   FAVORDYNMODS=1: the daemon sets cgroup2's favordynmods for its lifetime
#   (its `favordynmods` knob): a grant's cpuset move no longer waits for an
#   RCU grace period after an idle spell. On kernels from 6.18 the first set
#   switches the kernel to a per-threadgroup rwsem until reboot: compare
#   with and without on a fresh boot, the without run first.
#   CLIENT_PROGRAM=lean: the round trips are made by crates/rtmgr/examples/
#   grant_client.rs (a few µs of CPU each) instead of forked Python clients
#   (~0.5 ms each, which 16 or 64 clients queue for on one RT CPU); the
#   counters and the daemon's times stay the conformance client's. Each concurrency gets a floor cell, class `list`: the same
#   clients asking `list` twice a loop (no grant, no kernel step).
#   The daemon's own time per answer (request read until answer written,
#   its `rtmgr_answer_seconds` histogram, scraped around each cell) is
#   reported beside the clients' round trips: the daemon is built with the
#   feature `metrics` (an RTMGR given must be too, or DAEMON_TIMES=0).
# Writes OUT_DIR/grant-latency.json (command, date, machine, kernel, cells,
# floor) and prints the table.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-50}
OUT=${2:-bench/results/grant-latency-$(date -u +%Y%m%dT%H%M%SZ)}
CLIENTS=${CLIENTS:-1 16 64}
CLASSES=${CLASSES:-rt0 rt1}
STATES=${STATES:-sleeping running}
WORKERS=${WORKERS:-on off}
ROUNDS=${ROUNDS:-3}
# Each grant: BUDGET_NS every 10 ms, at most 8 ms / clients so that every
# client of a cell fits under the admission cap (0.9) at once. The Python
# client needs ~0.5 ms of CPU per round trip: with less, a hard (rt0)
# grant's thread overruns its budget, and a re-grant at once continues the
# kernel's server where it stopped (runtime spent, deadline ahead): the next
# answer waits for the thread's own replenishment, a period or two — the
# client's time, not the daemon's (the 64-client rt0 cells, and
# BUDGET_NS=100000 with one client, show it).
BUDGET_NS=${BUDGET_NS:-2000000}
[ "$(id -u)" = 0 ] || { echo "bench/grant-latency.sh: root only (it starts rtmgr serve)" >&2; exit 2; }
PY=$(command -v /usr/bin/python3 || command -v python3) || { echo "needs python3" >&2; exit 2; }
DAEMON_TIMES=${DAEMON_TIMES:-1}
if [ -z "${RTMGR:-}" ]; then
  cargo build --release -p rtmgr $([ "$DAEMON_TIMES" = 1 ] && echo --features metrics) >/dev/null
  RTMGR=${CARGO_TARGET_DIR:-$PWD/target}/release/rtmgr
fi
METRICS_ADDR=
if [ "$DAEMON_TIMES" = 1 ]; then
  METRICS_ADDR=127.0.0.1:$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
CLIENT=crates/rtmgr/tests/conformance/rtmgr_client.py
CLIENT_PROGRAM=${CLIENT_PROGRAM:-python}
DRIVER=
if [ "$CLIENT_PROGRAM" = lean ]; then
  cargo build --release -p rtmgr --example grant_client >/dev/null
  DRIVER=${CARGO_TARGET_DIR:-$PWD/target}/release/examples/grant_client
elif [ "$CLIENT_PROGRAM" != python ]; then
  echo "bench/grant-latency.sh: CLIENT_PROGRAM is python or lean, not $CLIENT_PROGRAM" >&2; exit 2
fi
. bench/machine-lock.sh
take_machine_lock
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
COMMAND="STATE_PARENT=${STATE_PARENT:-/tmp} CLIENT_PROGRAM=${CLIENT_PROGRAM:-python} BYSTANDER=${BYSTANDER:-1} RUNQ=${RUNQ:-0} PACE_US=${PACE_US:-0} FAVORDYNMODS=${FAVORDYNMODS:-0} CLIENTS=\"$CLIENTS\" CLASSES=\"$CLASSES\" STATES=\"$STATES\" WORKERS=\"$WORKERS\" ROUNDS=$ROUNDS BUDGET_NS=$BUDGET_NS bash bench/grant-latency.sh $*"
# Where the daemon keeps its state (journals, socket): /run on a usual
# system is tmpfs; STATE_PARENT=/dev/shm puts it on tmpfs where /run is not.
STATE=$(mktemp -d "${STATE_PARENT:-/tmp}/rtmgr-grant-latency.XXXXXX")
SOCK=$STATE/state/rtmgr.sock
RT_CPU=$(tr ',' '\n' < /sys/devices/system/cpu/online | tail -1 | sed 's/.*-//')
. bench/scratch-daemon.sh
finish() {
  trap - INT TERM EXIT
  stop_scratch_daemon
  report
}
report() {
  "$PY" - "$OUT" "$COMMAND" "$N" <<'PYEOF'
import glob, json, os, platform, re, sys, time
out, command, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def summary(xs):
    if not xs:
        return {"n": 0}
    s = sorted(xs)
    q = lambda p: s[min(len(s) - 1, int(p * len(s)))]
    return {"n": len(s), "p50_ns": q(0.50), "p99_ns": q(0.99), "max_ns": s[-1]}
merged = {}
for f in sorted(glob.glob(os.path.join(out, "cell-*.json"))):
    with open(f) as fh:
        c = json.load(fh)
    worker = os.path.basename(f).split("-")[1]
    key = (c["clients"], c["class"], c["state"], worker)
    m = merged.setdefault(key, {"clients": c["clients"], "class": c["class"], "state": c["state"],
                                "grant_worker": worker, "rounds": 0, "budget_ns": c.get("budget_ns"),
                                "period_ns": c.get("period_ns"), "reserve_ns": [], "release_ns": [],
                                "bystander_list_ns": [], "failures": []})
    m["rounds"] += 1
    for k in ("reserve_ns", "release_ns", "bystander_list_ns", "failures", "reserve_first_ns"):
        m[k] = m.get(k, []) + c.get(k, [])
    for k in ("reserve_runq_ns", "release_runq_ns"):
        if k in c:
            m[k] = m.get(k, []) + c[k]
    for cpu, share in c.get("steal_share", {}).items():
        m.setdefault("steal_share_by_round", {}).setdefault(cpu, []).append(share)
    for k, v in c.get("daemon_counters", {}).items():
        m.setdefault("daemon_counters", {})[k] = m.get("daemon_counters", {}).get(k, 0) + v
    for op, rows in c.get("daemon_answer_buckets", {}).items():
        acc = m.setdefault("daemon_buckets", {}).setdefault(op, {})
        for le, n in rows:
            acc[le] = acc.get(le, 0) + n
    # Each round's p99 too: their spread is the figure's interval.
    for k in ("reserve", "bystander_list"):
        p99 = summary(c.get(k + "_ns", [])).get("p99_ns")
        if p99 is not None:
            m.setdefault(k + "_p99_by_round_ns", []).append(p99)
cells = []
for key in sorted(merged):
    c = merged[key]
    c["reserve"], c["release"] = summary(c.pop("reserve_ns")), summary(c.pop("release_ns"))
    c["reserve_first"] = summary(c.pop("reserve_first_ns"))
    c["bystander_list"] = summary(c.pop("bystander_list_ns"))
    for op in ("reserve", "release"):
        if op + "_runq_ns" in c:
            c[op + "_client_runq"] = summary(c.pop(op + "_runq_ns"))
    # The daemon's own answer times: each quantile is the upper bound of the
    # bucket it falls in (buckets x1.5 apart: at most 50 % above the true one).
    for op, acc in c.pop("daemon_buckets", {}).items():
        rows = sorted(((float(le), n) for le, n in acc.items()))
        total = rows[-1][1] if rows else 0
        def bound(p):
            return next((int(le * 1e9) if le != float("inf") else None for le, n in rows if n >= p * total), None)
        c["daemon_" + op] = {"n": int(total), "p50_le_ns": bound(0.50), "p99_le_ns": bound(0.99)} if total else {"n": 0}
    cells.append(c)
floor = None
if os.path.exists(os.path.join(out, "floor.json")):
    with open(os.path.join(out, "floor.json")) as fh:
        floor = json.load(fh)
    floor["concurrent"] = []
    for f in sorted(glob.glob(os.path.join(out, "floor-*.json"))):
        with open(f) as fh:
            floor["concurrent"].append(json.load(fh)["concurrent"])
model = ""
try:
    with open("/proc/cpuinfo") as fh:
        model = next((l.split(":", 1)[1].strip() for l in fh if l.startswith("model name")), "")
except OSError:
    pass
doc = {"version": 2, "command": command, "requests_per_cell": n,
       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
       "machine": {"cpus": os.cpu_count(), "model": model, "arch": platform.machine(),
                   "hostname": platform.node()},
       "kernel": platform.release(), "cells": cells, "floor": floor}
with open(os.path.join(out, "grant-latency.json"), "w") as fh:
    json.dump(doc, fh, indent=1)
us = lambda s, k: "-" if not s or s.get("n", 0) == 0 else "%.0f" % (s[k] / 1000)
print("%-5s %-9s %7s %-6s %6s %9s %9s %9s %9s %9s %9s %9s %8s" % ("class", "threads", "clients", "worker", "n", "res p50", "res p99", "res max", "rel p50", "rel p99", "list p50", "list p99", "failed"))
for c in cells:
    r, l, b = c["reserve"], c["release"], c.get("bystander_list", {})
    print("%-5s %-9s %7d %-6s %6d %9s %9s %9s %9s %9s %9s %9s %8d" % (c["class"], c["state"], c["clients"], c["grant_worker"], r.get("n", 0),
          us(r, "p50_ns"), us(r, "p99_ns"), us(r, "max_ns"), us(l, "p50_ns"), us(l, "p99_ns"),
          us(b, "p50_ns"), us(b, "p99_ns"), len(c["failures"])))
if any(c.get("daemon_reserve") for c in cells):
    print("the daemon's own time, request read until answer written (bucket upper bounds, µs):")
    d = lambda s, k: "-" if not s or s.get(k) is None else "%.0f" % (s[k] / 1000)
    for c in cells:
        r, l = c.get("daemon_reserve", {}), c.get("daemon_release", {})
        print("  %-5s %-9s %3d %-4s reserve p50 <= %6s  p99 <= %6s   release p50 <= %6s  p99 <= %6s" % (
            c["class"], c["state"], c["clients"], c["grant_worker"], d(r, "p50_le_ns"), d(r, "p99_le_ns"),
            d(l, "p50_le_ns"), d(l, "p99_le_ns")))
if any(c.get("daemon_counters") for c in cells):
    print("the daemon's counters during each cell (status): pending = granted at SCHED_FIFO 1 first; held = of those, until a 0-lag time;")
    print(" refused = SCHED_DEADLINE refused at a look; stranded = stranded threads repaired")
    for c in cells:
        k = c.get("daemon_counters", {})
        print("  %-5s %-9s %3d %-4s pending %5d  held %5d  refused %4d  stranded %3d" % (
            c["class"], c["state"], c["clients"], c["grant_worker"], k.get("pending_fallbacks", 0),
            k.get("pending_held", 0), k.get("pending_refused", 0), k.get("stranded_repaired", 0)))
if any(c.get("steal_share_by_round") for c in cells):
    print("steal during each cell, share of its time per vCPU, min-max over the rounds (/proc/stat: the host ran something else)")
    for c in cells:
        st = c.get("steal_share_by_round", {})
        print("  %-5s %-9s %3d %-4s %s" % (c["class"], c["state"], c["clients"], c["grant_worker"],
              "  ".join("%s %.1f-%.1f %%" % (cpu, 100 * min(v), 100 * max(v)) for cpu, v in sorted(st.items()))))
if any(c.get("reserve_first", {}).get("n") for c in cells):
    print("each client's first round trip (a new connection, the thread's first move; a cell's clients send theirs at once), ms:")
    for c in cells:
        f = c.get("reserve_first", {})
        if f.get("n"):
            print("  %-5s %-9s %3d %-4s first: n %3d  p50 %6.2f  max %6.2f" % (
                c["class"], c["state"], c["clients"], c["grant_worker"], f["n"], f["p50_ns"] / 1e6, f["max_ns"] / 1e6))
print("p99 per round, min-max over the rounds (ms):")
for c in cells:
    rng = lambda k: "-" if not c.get(k) else "%.2f-%.2f" % (min(c[k]) / 1e6, max(c[k]) / 1e6)
    print("  %-5s %-9s %3d %-4s reserve %-13s list %s" % (c["class"], c["state"], c["clients"], c["grant_worker"],
          rng("reserve_p99_by_round_ns"), rng("bystander_list_p99_by_round_ns")))
print("(µs; reserve = request sent until the answer was read: recv() returned, before the client parses it; release likewise;")
print(" list = a bystander client's `list` every 2 ms during the cell, at SCHED_FIFO 2: how long others wait while grants are made)")
if floor:
    print("floor, the kernel steps alone on a sleeping thread (µs):")
    for k, s in floor["steps"].items():
        print("  %-20s n %3d  p50 %7s  p99 %7s  max %7s" % (k, s.get("n", 0), us(s, "p50_ns"), us(s, "p99_ns"), us(s, "max_ns")))
    if floor.get("errors"):
        print("  errors:", floor["errors"])
    for conc in floor.get("concurrent", []):
        a, b = conc["attach"], conc["attach_back"]
        print("  %2d processes at once, cpuset attach  p50 %7s  p99 %7s  max %7s;  and back  p99 %7s" % (
            conc["clients"], us(a, "p50_ns"), us(a, "p99_ns"), us(a, "max_ns"), us(b, "p99_ns")))
        for c in cells:
            if c["clients"] == conc["clients"] and c["reserve"].get("n") and a.get("n"):
                print("     %-5s %-9s %-4s reserve p99 / attach p99 at once: %.1f" % (
                    c["class"], c["state"], c["grant_worker"], c["reserve"]["p99_ns"] / a["p99_ns"]))
failures = sorted({re.sub(r"\d+", "N", f) for c in cells for f in c["failures"]})
if failures:
    print("failures (first 5 kinds):", "; ".join(failures[:5]))
print("written:", os.path.join(out, "grant-latency.json"))
PYEOF
}
trap finish EXIT
trap 'exit 130' INT TERM
set -- $WORKERS
write_scratch_config "$1"
start_scratch_daemon
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(uname -r), $(nproc --all) CPUs, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "\$ $COMMAND"
} > "$OUT/README.txt"
# The floor: cgroup v1 only (on v2 a grant attaches no thread).
PART=$("$RTMGR" partition show --json --journal "$STATE/state/journal.jsonl" 9>&-)
LAYOUT=$(echo "$PART" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["layout"])')
if [ "$LAYOUT" = v1 ]; then
  RT_DIR=$(echo "$PART" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["rt_cgroup"])')/cpu$RT_CPU
  NRT_DIR=$(echo "$PART" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["nrt_cgroup"])')
  "$PY" "$CLIENT" floor --cpuset-dir "$RT_DIR" --back-dir "$NRT_DIR" --requests "$N" --out "$OUT/floor.json" 9>&-
  # The attaches alone at each cell's concurrency: the floor of its reserves.
  for clients in $CLIENTS; do
    [ "$clients" -gt 1 ] || continue
    "$PY" "$CLIENT" floor --cpuset-dir "$RT_DIR" --back-dir "$NRT_DIR" --requests "$N" --clients "$clients" \
      --out "$OUT/floor-$(printf %02d "$clients").json" 9>&-
  done
fi
# Rounds, each with the worker on and off in turn (a daemon each), so that
# the two are compared in the same minutes of the host.
for round in $(seq "$ROUNDS"); do
  for worker in $WORKERS; do
    stop_scratch_daemon
    write_scratch_config "$worker"
    start_scratch_daemon
    for clients in $CLIENTS; do
      for class in $CLASSES; do
        for state in $STATES; do
          echo "round $round/$ROUNDS, worker $worker: $class $state, $clients client(s)" >&2
          budget=$(( BUDGET_NS < 8000000 / clients ? BUDGET_NS : 8000000 / clients ))
          "$PY" "$CLIENT" --socket "$SOCK" bench --clients "$clients" --class "$class" --state "$state" \
            --requests "$N" --budget-ns "$budget" ${METRICS_ADDR:+--metrics http://$METRICS_ADDR/metrics} ${DRIVER:+--driver "$DRIVER"} $([ "${RUNQ:-0}" = 1 ] && [ -n "$DRIVER" ] && echo --runq) $([ "${BYSTANDER:-1}" = 0 ] && echo --no-bystander) \
            $([ "${PACE_US:-0}" != 0 ] && [ -n "$DRIVER" ] && echo --pace-us "$PACE_US") \
            --out "$OUT/cell-$worker-r$round-$class-$state-$(printf %02d "$clients").json" 9>&-
        done
      done
      # The lean client's floor: as many clients asking `list` (no grant,
      # no kernel step) through the same socket and loop.
      if [ -n "$DRIVER" ]; then
        echo "round $round/$ROUNDS, worker $worker: list floor, $clients client(s)" >&2
        "$PY" "$CLIENT" --socket "$SOCK" bench --clients "$clients" --op list --driver "$DRIVER" $([ "${BYSTANDER:-1}" = 0 ] && echo --no-bystander) \
          $([ "${PACE_US:-0}" != 0 ] && echo --pace-us "$PACE_US") \
          --requests "$N" ${METRICS_ADDR:+--metrics http://$METRICS_ADDR/metrics} \
          --out "$OUT/cell-$worker-r$round-list-sleeping-$(printf %02d "$clients").json" 9>&-
      fi
    done
  done
done
