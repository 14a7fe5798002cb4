#!/usr/bin/env python3
"""A raw client of rtmgr's protocol, standard library only, written from
docs/protocol.md as a user of the daemon would (DROPS "Taming Linux" §4.1:
the resource manager gives resources to tasks through a protocol).

It is the protocol's conformance client (issue 27): each thread that asks
for a reservation names its own thread id and blocks in recv() for the
answer, as most programs do.

    rtmgr_client.py --socket PATH conformance [--only NAME,...] [--skip NAME,...]
    rtmgr_client.py --socket PATH bench --clients N --class rt0|rt1 \
        --state sleeping|running --requests R [--metrics URL] [--out FILE.json]
    rtmgr_client.py floor --cpuset-dir DIR --back-dir DIR --requests R [--clients N] [--out FILE.json]

`conformance` prints one line per check and a JSON summary last; exit 0 when
every check passed. `bench` times reserve -> granted -> release round trips
from N client processes at once (`running`: each spins for the grant's
answer, and waits asleep for the release's, since a thread spinning at
SCHED_FIFO would run into RLIMIT_RTTIME); `floor` times the kernel steps a
grant makes, on a throwaway sleeping thread (bench/grant-latency.sh runs both).
During a `bench` cell a bystander client (SCHED_FIFO 2 as root) asks `list`
every 2 ms and times its answers: how long other clients wait while grants
are made. With `--metrics URL` (a daemon built with the feature `metrics`),
`bench` also keeps the daemon's own time per answer during the cell
(`rtmgr_answer_seconds`, request read until answer written), scraped before
and after: what of a round trip is the daemon's, and what is the client's.
"""

import argparse
import ctypes
import json
import os
import platform
import resource
import socket
import subprocess
import sys
import threading
import time

V = 1


class ProtocolError(Exception):
    pass


class Client:
    """One connection: newline-delimited JSON, one answer per request."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.buf = b""
        self.read_ns = 0

    def close(self):
        self.sock.close()

    def send_raw(self, line):
        self.sock.sendall(line if isinstance(line, bytes) else line.encode())

    def recv_line(self, spin=False):
        """One answer line. Blocks in recv() unless `spin` (busy polling)."""
        while b"\n" not in self.buf:
            if spin:
                try:
                    chunk = self.sock.recv(65536, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    continue
            else:
                chunk = self.sock.recv(65536)
            # When the answer was read, before any parsing: what follows is
            # the client's own time (at rt0's 0.2 ms budget a Python thread
            # can exhaust its runtime parsing the answer and wait out the
            # rest of its period).
            self.read_ns = time.monotonic_ns()
            if not chunk:
                raise ProtocolError("the daemon closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, obj, spin=False):
        self.send_raw(json.dumps(obj) + "\n")
        return self.recv_line(spin)

    def reserve(self, period_ns, budget_ns, cls="rt0", threads=None, spin=False, **extra):
        req = {"v": V, "op": "reserve", "period_ns": period_ns, "budget_ns": budget_ns, "class": cls}
        req["threads"] = threads if threads is not None else [threading.get_native_id()]
        req.update(extra)
        return self.request(req, spin)

    def release(self, rid, spin=False):
        return self.request({"v": V, "op": "release", "id": rid}, spin)

    def list(self):
        return self.request({"v": V, "op": "list"})

    def status(self):
        return self.request({"v": V, "op": "status"})


# --- conformance ---------------------------------------------------------

MS = 1_000_000


SCHED_RESET_ON_FORK = 0x40000000


def policy_of(tid):
    """The thread's policy, without the reset-on-fork flag grants set."""
    return os.sched_getscheduler(tid) & ~SCHED_RESET_ON_FORK


def in_thread(fn):
    """Run fn in a new thread (its own tid), return what it returned or raise."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # reported to the caller
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def ids(c):
    return sorted(r["id"] for r in c.list()["reservations"])


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def check_status(path):
    c = Client(path)
    r = c.status()
    expect(r.get("v") == V and r.get("result") == "status", r)
    expect("rt_cpus" in r["status"], r)


def error_case(path, line, code):
    """One bad line: one error with `code`, and nothing changed."""
    c = Client(path)
    before = ids(c)
    c.send_raw(line + "\n")
    r = c.recv_line()
    expect(r.get("result") == "error" and r.get("code") == code, "%r -> %r" % (line, r))
    expect(isinstance(r.get("message"), str) and r["message"], r)
    expect(ids(c) == before, "a bad line changed the reservations")
    # The connection still serves the next request.
    expect(c.list()["result"] == "list", "connection unusable after an error")


def check_malformed(path):
    error_case(path, '{"v":1,"op":"reserve",', "bad_json")


def check_version(path):
    error_case(path, '{"v":99,"op":"list"}', "unsupported_version")


def check_unknown_op(path):
    error_case(path, '{"v":1,"op":"grant_me_everything"}', "unknown_op")


def check_unknown_field(path):
    error_case(path, '{"v":1,"op":"reserve","period_ns":10000000,"budget_ns":1000000,"colour":"blue"}', "bad_request")


def refused_unchanged(path, ask, want_result, want_code):
    def body():
        c = Client(path)
        before = ids(c)
        tid = threading.get_native_id()
        pol = policy_of(tid)
        r = ask(c)
        key = "code" if want_result == "error" else "reason"
        expect(r.get("result") == want_result and r.get(key) == want_code, r)
        expect(ids(c) == before, "a refused request changed the reservations")
        expect(policy_of(tid) == pol, "a refused request changed the thread's policy")

    in_thread(body)


def check_unknown_class(path):
    refused_unchanged(path, lambda c: c.reserve(10 * MS, 1 * MS, cls="rt7"), "error", "invalid_request")


def check_budget_over_period(path):
    refused_unchanged(path, lambda c: c.reserve(10 * MS, 20 * MS, cls="rt1:20"), "error", "invalid_request")


def check_over_capacity(path):
    # 95 % of a CPU, above any admission cap.
    refused_unchanged(path, lambda c: c.reserve(10 * MS, 9_500_000, cls="rt1:20"), "refused", "admission")


def check_not_my_thread(path):
    refused_unchanged(path, lambda c: c.reserve(10 * MS, 1 * MS, cls="rt1:20", threads=[1]), "refused", "permission")


def check_release_unknown(path):
    c = Client(path)
    r = c.release(2**53)
    expect(r.get("result") == "error" and r.get("code") == "not_found", r)


def grant_and_release(path, cls, want_policy, budget_ns=1 * MS):
    """This thread reserves for itself, asleep in recv() meanwhile; it is
    listed, runs at the policy; release gives SCHED_OTHER back."""

    def body():
        c = Client(path)
        tid = threading.get_native_id()
        r = c.reserve(10 * MS, budget_ns, cls=cls)
        expect(r.get("result") == "granted", r)
        res = r["reservation"]
        expect(res["threads"] == [tid] or len(res["threads"]) == 1, res)
        if tid in res.get("pending", []):
            # SCHED_FIFO 1 until this thread, awake now on its RT CPU, is
            # seen there by the daemon, or its own policy (SCHED_OTHER here)
            # while held for an earlier overrun (docs/protocol.md
            # "Pending"): 2 s at most.
            end = time.monotonic() + 2
            while policy_of(tid) != want_policy and time.monotonic() < end:
                expect(policy_of(tid) in (os.SCHED_FIFO, os.SCHED_OTHER),
                       "pending at policy %d" % policy_of(tid))
                time.sleep(0.005)
        expect(policy_of(tid) == want_policy, "policy %d after the grant" % policy_of(tid))
        expect(res["id"] in ids(c), "granted but not listed")
        time.sleep(0.02)  # sleep while granted, as a periodic thread does
        r = c.release(res["id"])
        expect(r == {"v": V, "result": "released", "id": res["id"]}, r)
        expect(res["id"] not in ids(c), "released but still listed")
        expect(policy_of(tid) == os.SCHED_OTHER, "policy %d after release" % policy_of(tid))

    in_thread(body)


def check_soft_sleeping(path):
    grant_and_release(path, "rt1:20", os.SCHED_FIFO)


SCHED_DEADLINE = 6


def check_hard_sleeping(path):
    grant_and_release(path, "rt0", SCHED_DEADLINE)


def check_concurrent_soft(path):
    """16 threads at once, each asleep in recv() for its own grant."""
    errors = []

    def one():
        try:
            grant_and_release(path, "rt1:20", os.SCHED_FIFO, budget_ns=200_000)
        except BaseException as e:
            errors.append(repr(e))

    ts = [threading.Thread(target=one) for _ in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    expect(not errors, "; ".join(errors[:3]))


def check_pipelined(path):
    """Requests sent in one write are answered in order, one answer each:
    a grant (its kernel steps on the daemon's worker), the same thread
    again (refused: it holds the grant), a list that shows the grant."""

    def body():
        c = Client(path)
        tid = threading.get_native_id()
        req = {"v": V, "op": "reserve", "period_ns": 10 * MS, "budget_ns": MS,
               "class": "rt1:20", "threads": [tid]}
        line = json.dumps(req) + "\n"
        c.send_raw(line + line + json.dumps({"v": V, "op": "list"}) + "\n")
        granted, again, listed = c.recv_line(), c.recv_line(), c.recv_line()
        expect(granted.get("result") == "granted", granted)
        rid = granted["reservation"]["id"]
        expect(again.get("result") == "refused" and "already holds" in again.get("message", ""), again)
        expect(listed.get("result") == "list", listed)
        expect(rid in [r["id"] for r in listed["reservations"]], listed)
        r = c.release(rid)
        expect(r.get("result") == "released", r)

    in_thread(body)


CHECKS = [
    ("status", check_status),
    ("malformed_line", check_malformed),
    ("unsupported_version", check_version),
    ("unknown_op", check_unknown_op),
    ("unknown_field", check_unknown_field),
    ("unknown_class", check_unknown_class),
    ("budget_over_period", check_budget_over_period),
    ("over_capacity", check_over_capacity),
    ("not_my_thread", check_not_my_thread),
    ("release_unknown", check_release_unknown),
    ("soft_sleeping", check_soft_sleeping),
    ("concurrent_soft", check_concurrent_soft),
    ("pipelined", check_pipelined),
    ("hard_sleeping", check_hard_sleeping),
]


def conformance(args):
    only = set(filter(None, (args.only or "").split(",")))
    skip = set(filter(None, (args.skip or "").split(",")))
    results = {}
    for name, fn in CHECKS:
        if (only and name not in only) or name in skip:
            continue
        try:
            fn(args.socket)
            results[name] = "ok"
        except Exception as e:  # one line per failed check
            results[name] = "FAILED: %s" % e
        print("%-20s %s" % (name, results[name]), flush=True)
    print(json.dumps({"version": 1, "checks": results}))
    return 0 if all(v == "ok" for v in results.values()) else 1


# --- bench: round trips --------------------------------------------------


def bench_client(path, cls, spin, n, period_ns, budget_ns, start_at, w):
    """One client process: n reserve/release round trips, one JSON line out."""
    out = {"reserve_ns": [], "release_ns": [], "failures": []}
    try:
        c = Client(path)
        # Asleep until the start, all together: spinning there, the N
        # clients shared the NRT CPU, and one preempted between its t0 and
        # its send counted the others' spinning (tens of ms) as the daemon's.
        time.sleep(max(0.0, start_at - time.monotonic()))
        for _ in range(n):
            t0 = time.monotonic_ns()
            r = c.reserve(period_ns, budget_ns, cls=cls, spin=spin)
            t1 = c.read_ns
            if r.get("result") != "granted":
                out["failures"].append(r.get("message") or r.get("code") or r.get("reason"))
                continue
            out["reserve_ns"].append(t1 - t0)
            t2 = time.monotonic_ns()
            # Blocking for this answer: a thread spinning at SCHED_FIFO
            # would run into RLIMIT_RTTIME (SIGXCPU).
            rr = c.release(r["reservation"]["id"])
            t3 = c.read_ns
            if rr.get("result") == "released":
                out["release_ns"].append(t3 - t2)
            else:
                out["failures"].append("release: %s" % rr)
    except Exception as e:
        out["failures"].append(repr(e))
    os.write(w, (json.dumps(out) + "\n").encode())


def fifo_if_allowed():
    """SCHED_FIFO 2 for the calling process if it may (root), else nothing;
    whether it did."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(2))
        return True
    except OSError:
        return False


def bystander(path, start_at, stop_r, w):
    """Another client during a cell: a `list` every 2 ms, asleep in recv,
    timed (is anyone's answer held up by the grants of others?). At
    SCHED_FIFO 2 when it may (root): above the daemon's loop, so that its
    figure is the daemon's wait, not its own wait for a CPU beside the
    cell's clients."""
    import select
    out = {"list_ns": [], "failures": [], "fifo": False}
    try:
        out["fifo"] = fifo_if_allowed()
        c = Client(path)
        while time.monotonic() < start_at:
            time.sleep(0.001)
        while not select.select([stop_r], [], [], 0.002)[0]:
            t0 = time.monotonic_ns()
            r = c.list()
            if r.get("result") == "list":
                out["list_ns"].append(c.read_ns - t0)
            else:
                out["failures"].append("list: %s" % r)
    except Exception as e:
        out["failures"].append("bystander: %r" % e)
    os.write(w, (json.dumps(out) + "\n").encode())


def answer_buckets(url):
    """The daemon's `rtmgr_answer_seconds` buckets by request: {op: {le: count}}."""
    import urllib.request
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line.startswith("rtmgr_answer_seconds_bucket{"):
            continue
        labels, value = line[len("rtmgr_answer_seconds_bucket{"):].split("} ")
        kv = dict(x.split("=", 1) for x in labels.split(","))
        le = kv["le"].strip('"')
        out.setdefault(kv["op"].strip('"'), {})[le] = float(value)
    return out


def bucket_diff(before, after):
    """The cell's own answers: cumulative counts after minus before, as
    [[upper bound (s, or "+Inf"), count], ...], smallest bound first."""
    out = {}
    for op, b in after.items():
        rows = [(float(le), le, n - before.get(op, {}).get(le, 0.0)) for le, n in b.items()]
        out[op] = [[le if le == "+Inf" else f, n] for f, le, n in sorted(rows)]
    return out


def in_processes(n, run):
    """n forked processes (no shared GIL) that start together: each runs
    run(start_at, w) and writes its JSON line to w. Their pids, the pipe's
    two ends (the caller closes w once every writer is forked) and the start."""
    r, w = os.pipe()
    start_at = time.monotonic() + 0.2 + 0.005 * n
    kids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                run(start_at, w)
            finally:
                os._exit(0)
        kids.append(pid)
    return kids, r, w, start_at


COUNTERS = ("pending_fallbacks", "pending_held", "pending_refused", "stranded_repaired")


def steal_ticks():
    """Each CPU's steal counter from /proc/stat (USER_HZ ticks): the time the
    host ran something else while the vCPU had work."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            parts = line.split()
            if parts[0].startswith("cpu") and parts[0] != "cpu" and len(parts) > 8:
                out[parts[0]] = int(parts[8])
    return out


def daemon_counters(path):
    """The daemon's status counters of pending and stranded threads (0 when absent)."""
    c = Client(path)
    try:
        st = c.status().get("status", {})
    finally:
        c.close()
    return {k: st.get(k, 0) for k in COUNTERS}


def bench(args):
    """N client processes, started together, and a bystander."""
    if args.op == "list" and not args.driver:
        raise SystemExit("bench --op list needs --driver")
    daemon_before = answer_buckets(args.metrics) if args.metrics else None
    counters_before = daemon_counters(args.socket)
    steal_before, t_before = steal_ticks(), time.monotonic()
    per = max(1, -(-args.requests // args.clients))
    cls = "rt0" if args.cls == "rt0" else "rt1:20"
    spin = args.state == "running"
    driver = None
    if args.driver:
        # A lean client program does the round trips (crates/rtmgr/examples/
        # grant_client.rs: µs of CPU each where this one takes ~0.5 ms); its
        # one JSON line is read like the forked clients' lines.
        cmd = [args.driver, "--socket", args.socket, "--clients", str(args.clients),
               "--requests", str(per * args.clients), "--class", cls,
               "--period-ns", str(args.period_ns), "--budget-ns", str(args.budget_ns)]
        cmd += ["--spin"] if spin else []
        cmd += ["--op", "list"] if args.op == "list" else []
        cmd += ["--runq"] if args.runq else []
        cmd += ["--pace-us", str(args.pace_us)] if args.pace_us else []
        driver = subprocess.Popen(cmd, stdout=subprocess.PIPE)
        kids, start_at = [], time.monotonic() + 0.2
        r, w = driver.stdout.fileno(), os.open("/dev/null", os.O_WRONLY)
    else:
        kids, r, w, start_at = in_processes(
            args.clients,
            lambda start_at, w: bench_client(args.socket, cls, spin, per, args.period_ns, args.budget_ns, start_at, w))
    stop_r, stop_w = os.pipe()
    br, bw = os.pipe()
    # --no-bystander: none (its own CPU, ~0.25 ms of Python per `list` at
    # SCHED_FIFO 2, is then not taken from the cell's clients on the NRT CPU).
    # With a lean driver the bystander is the lean program too (a few µs
    # per `list`), run until the stop pipe closes, at SCHED_FIFO 2 if it may.
    lean_side = None
    if driver is not None and not args.no_bystander:
        lean_side = subprocess.Popen(
            [args.driver, "--socket", args.socket, "--bystander",
             "--start-at", str(time.time_ns() + 200_000_000)],
            stdin=stop_r, stdout=bw, preexec_fn=fifo_if_allowed)
    side = os.fork() if not args.no_bystander and lean_side is None else None
    if side == 0:
        os.close(r)
        os.close(w)
        os.close(stop_w)
        os.close(br)
        try:
            bystander(args.socket, start_at, stop_r, bw)
        finally:
            os._exit(0)
    os.close(stop_r)
    os.close(bw)
    os.close(w)
    data = b""
    if driver is not None:
        data = driver.stdout.read()
        driver.wait()
    else:
        with os.fdopen(r, "rb") as f:
            data = f.read()
    os.close(stop_w)  # the clients are done: the bystander stops
    with os.fdopen(br, "rb") as f:
        side_data = f.read()
    if side is not None:
        os.waitpid(side, 0)
    if lean_side is not None:
        lean_side.wait()
    cell = {"clients": args.clients, "class": "list" if args.op == "list" else args.cls,
            "state": args.state, "requests": per * args.clients,
            "client": "lean" if args.driver else "python", "pace_us": args.pace_us,
            "period_ns": args.period_ns, "budget_ns": args.budget_ns,
            "reserve_ns": [], "release_ns": [], "failures": []}
    for pid in kids:
        _, st = os.waitpid(pid, 0)
        if os.WIFSIGNALED(st):
            cell["failures"].append("client process killed by signal %d" % os.WTERMSIG(st))
    for line in data.decode().splitlines():
        one = json.loads(line)
        for k in ("reserve_ns", "release_ns", "failures"):
            cell[k] += one[k]
        # Each client's first round trip (a new connection, the thread's
        # first move, all sent at once): the lean driver lists them, a
        # Python client's line starts with its own.
        if one.get("reserve_first_ns") is not None:
            cell.setdefault("reserve_first_ns", []).extend(one["reserve_first_ns"])
        elif one["reserve_ns"]:
            cell.setdefault("reserve_first_ns", []).append(one["reserve_ns"][0])
        for k in ("reserve_runq_ns", "release_runq_ns"):
            if one.get(k) is not None:
                cell[k] = cell.get(k, []) + one[k]
    cell["bystander_list_ns"] = []
    for line in side_data.decode().splitlines():
        one = json.loads(line)
        cell["bystander_list_ns"] += one["list_ns"]
        cell["failures"] += one["failures"]
    cell["reserve"] = summary(cell["reserve_ns"])
    cell["reserve_first"] = summary(cell.get("reserve_first_ns", []))
    cell["release"] = summary(cell["release_ns"])
    cell["bystander_list"] = summary(cell["bystander_list_ns"])
    after = daemon_counters(args.socket)
    # The host's share of each vCPU during the cell (steal / elapsed).
    tick, elapsed = os.sysconf("SC_CLK_TCK"), time.monotonic() - t_before
    steal_after = steal_ticks()
    cell["steal_share"] = {c: round((steal_after.get(c, 0) - v) / tick / max(elapsed, 1e-9), 4)
                           for c, v in steal_before.items()}
    # Threads granted pending (SCHED_FIFO 1 first), held for a 0-lag time,
    # refused, and stranded threads repaired, during this cell.
    cell["daemon_counters"] = {k: after[k] - counters_before[k] for k in COUNTERS}
    if daemon_before is not None:
        # Cumulative bucket counts of the daemon's answer times in this cell.
        cell["daemon_answer_buckets"] = bucket_diff(daemon_before, answer_buckets(args.metrics))
    emit(cell, args.out)
    return 0


def summary(xs):
    if not xs:
        return {"n": 0}
    s = sorted(xs)

    def q(p):
        return s[min(len(s) - 1, int(p * len(s)))]

    return {"n": len(s), "p50_ns": q(0.50), "p99_ns": q(0.99), "max_ns": s[-1]}


def emit(obj, out):
    text = json.dumps(obj)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


# --- floor: the kernel steps alone ---------------------------------------

# x86_64 and aarch64 system call numbers.
SYSCALLS = {
    "x86_64": {"sched_setattr": 314, "ioprio_set": 251, "ioprio_get": 252},
    "aarch64": {"sched_setattr": 274, "ioprio_set": 30, "ioprio_get": 31},
}


class SchedAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32), ("flags", ctypes.c_uint64),
                ("nice", ctypes.c_int32), ("priority", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64)]


def floor(args):
    """Each kernel step a grant makes, timed on a throwaway thread of this
    process that sleeps (as the clients above do): a cgroup v1 cpuset attach
    into the RT CPU's cpuset and back, sched_setscheduler (FIFO and back),
    sched_setattr (DEADLINE and back, after the thread ran on its RT CPU),
    prlimit (RLIMIT_RTTIME) and ioprio_set. Everything is put back."""
    nr = SYSCALLS.get(platform.machine())
    libc = ctypes.CDLL(None, use_errno=True)
    wake = threading.Event()
    stop = threading.Event()
    tid_box = []

    def sleeper():
        tid_box.append(threading.get_native_id())
        while not stop.is_set():
            wake.wait()
            wake.clear()

    t = threading.Thread(target=sleeper)
    t.start()
    while not tid_box:
        time.sleep(0.001)
    tid = tid_box[0]
    steps = {k: [] for k in ("cpuset_attach", "sched_setscheduler", "sched_setattr", "prlimit", "ioprio_set")}
    errors = {}

    def timed(name, fn):
        t0 = time.monotonic_ns()
        try:
            fn()
        except OSError as e:
            errors[name] = errors.get(name, 0) + 1
            errors[name + "_last"] = str(e)
            return
        steps[name].append(time.monotonic_ns() - t0)

    def write(path, text):
        with open(path, "w") as f:
            f.write(text)

    def setattr_(policy, runtime=0, deadline=0, period=0):
        a = SchedAttr(ctypes.sizeof(SchedAttr), policy, 0, 0, 0, runtime, deadline, period)
        if libc.syscall(nr["sched_setattr"], tid, ctypes.byref(a), 0) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))

    def ioprio_set(raw):
        if libc.syscall(nr["ioprio_set"], 1, tid, raw) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))

    old_io = libc.syscall(nr["ioprio_get"], 1, tid) if nr else -1
    old_rt = resource.prlimit(os.getpid(), resource.RLIMIT_RTTIME)
    try:
        for _ in range(args.requests):
            timed("cpuset_attach", lambda: write(os.path.join(args.cpuset_dir, "tasks"), str(tid)))
            wake.set()  # let it run once on its RT CPU
            time.sleep(0.002)
            timed("sched_setscheduler", lambda: os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(20)))
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            if nr:
                timed("sched_setattr", lambda: setattr_(SCHED_DEADLINE, 100_000, 10 * MS, 10 * MS))
                setattr_(os.SCHED_OTHER)
            timed("prlimit", lambda: resource.prlimit(os.getpid(), resource.RLIMIT_RTTIME, (200_000, old_rt[1])))
            resource.prlimit(os.getpid(), resource.RLIMIT_RTTIME, old_rt)
            if nr:
                timed("ioprio_set", lambda: ioprio_set((1 << 13) | 4))
                ioprio_set(old_io if old_io >= 0 else 0)
            write(os.path.join(args.back_dir, "tasks"), str(tid))
            time.sleep(0.005)
    finally:
        try:
            setattr_(os.SCHED_OTHER) if nr else None
        except OSError:
            pass
        resource.prlimit(os.getpid(), resource.RLIMIT_RTTIME, old_rt)
        try:
            write(os.path.join(args.back_dir, "tasks"), str(tid))
        except OSError:
            pass
        stop.set()
        wake.set()
        t.join()
    out = {"steps": {k: summary(v) | {"samples_ns": v} for k, v in steps.items()}, "errors": errors}
    if args.clients > 1:
        out["concurrent"] = attach_concurrently(args)
    emit(out, args.out)
    return 0


def attach_loop(args, n, start_at, w):
    """One of `attach_concurrently`'s processes: its own sleeping thread
    moved into the RT CPU's cpuset and back, n times, at once again."""
    out = {"attach_ns": [], "attach_back_ns": [], "failures": []}
    stop = threading.Event()
    tid_box = []

    def sleeper():
        tid_box.append(threading.get_native_id())
        stop.wait()

    t = threading.Thread(target=sleeper)
    t.start()
    while not tid_box:
        time.sleep(0.001)
    tid = str(tid_box[0])
    try:
        time.sleep(max(0.0, start_at - time.monotonic()))
        for _ in range(n):
            for key, d in (("attach_ns", args.cpuset_dir), ("attach_back_ns", args.back_dir)):
                t0 = time.monotonic_ns()
                with open(os.path.join(d, "tasks"), "w") as f:
                    f.write(tid)
                out[key].append(time.monotonic_ns() - t0)
    except OSError as e:
        out["failures"].append(repr(e))
    finally:
        try:
            with open(os.path.join(args.back_dir, "tasks"), "w") as f:
                f.write(tid)
        except OSError:
            pass
        stop.set()
        t.join()
    os.write(w, (json.dumps(out) + "\n").encode())


def attach_concurrently(args):
    """The kernel's cpuset attaches alone under the bench's concurrency:
    --clients processes, started together, each moving its own sleeping
    thread into the RT CPU's cpuset and back in a closed loop, as the bench's
    clients are granted and released (no daemon, no other step). An
    attach's time here includes its wait for the others' (the kernel takes
    `cgroup_mutex` for each): the floor of a `reserve` at that concurrency."""
    per = max(1, -(-args.requests // args.clients))
    kids, r, w, _ = in_processes(args.clients, lambda start_at, w: attach_loop(args, per, start_at, w))
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    for pid in kids:
        os.waitpid(pid, 0)
    got = {"attach_ns": [], "attach_back_ns": [], "failures": []}
    for line in data.decode().splitlines():
        for k, v in json.loads(line).items():
            got[k] += v
    return {"clients": args.clients, "attach": summary(got["attach_ns"]),
            "attach_back": summary(got["attach_back_ns"]), "failures": got["failures"]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", default=os.environ.get("RTMGR_SOCKET", "/run/rtmgr/rtmgr.sock"))
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("conformance")
    c.add_argument("--only")
    c.add_argument("--skip")
    b = sub.add_parser("bench")
    b.add_argument("--clients", type=int, default=1)
    b.add_argument("--class", dest="cls", choices=["rt0", "rt1"], default="rt1")
    b.add_argument("--state", choices=["sleeping", "running"], default="sleeping")
    b.add_argument("--requests", type=int, default=50)
    b.add_argument("--period-ns", type=int, default=10 * MS)
    b.add_argument("--budget-ns", type=int, default=100_000)
    b.add_argument("--metrics", help="the daemon's /metrics URL: keep its own answer times too")
    b.add_argument("--op", choices=["reserve", "list"], default="reserve",
                   help="list: the driver asks `list` instead (no grant): the cell's floor")
    b.add_argument("--driver", help="a client program that makes the round trips instead of forked "
                   "Python clients (bench/grant-latency.sh's CLIENT_PROGRAM=lean)")
    b.add_argument("--no-bystander", action="store_true",
                   help="no bystander client during the cell (bench/grant-latency.sh's BYSTANDER=0)")
    b.add_argument("--pace-us", type=int, default=0,
                   help="with --driver: each client starts a round trip every this many µs, all in step "
                        "(0: a closed loop, asking again as soon as answered)")
    b.add_argument("--runq", action="store_true",
                   help="with --driver: also keep, per round trip, how long the client's own thread "
                   "waited runnable for a CPU (bench/grant-latency.sh's RUNQ=1)")
    b.add_argument("--out")
    f = sub.add_parser("floor")
    f.add_argument("--cpuset-dir", required=True)
    f.add_argument("--back-dir", required=True)
    f.add_argument("--requests", type=int, default=50)
    f.add_argument("--clients", type=int, default=1,
                   help="also time the attaches alone from this many processes at once")
    f.add_argument("--out")
    a = p.parse_args()
    return {"conformance": conformance, "bench": bench, "floor": floor}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
