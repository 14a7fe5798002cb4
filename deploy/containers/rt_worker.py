#!/usr/bin/env python3
"""A containerised real-time worker asking the node's rtmgr for a
reservation through the mounted socket (docs/containers.md; DROPS "Taming
Linux" §4.1: resources on request through the resource manager's protocol).

Its main thread starts a worker thread; the worker names itself by the
thread id it sees (in the container's PID namespace: rtmgr translates it
through /proc/PID/task/*/status NSpid), sleeps in recv() for the answer,
runs a periodic loop for --seconds, and releases. Prints one JSON line:
what the worker saw, and the reservation as the daemon granted it.

    rt_worker.py [--socket /run/rtmgr/rtmgr.sock] [--class rt1:20]
                 [--period-ms 10] [--budget-us 500] [--seconds 5]

Needs rtmgr_client.py (crates/rtmgr/tests/conformance/) beside it or in
the repository; Python standard library otherwise.
"""

import argparse
import json
import os
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ beside a read-only mount
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "../../crates/rtmgr/tests/conformance")]
from rtmgr_client import Client  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", default=os.environ.get("RTMGR_SOCKET", "/run/rtmgr/rtmgr.sock"))
    p.add_argument("--class", dest="cls", default="rt1:20")
    p.add_argument("--period-ms", type=float, default=10)
    p.add_argument("--budget-us", type=float, default=500)
    p.add_argument("--seconds", type=float, default=5)
    a = p.parse_args()
    out = {}

    def worker():
        tid = threading.get_native_id()
        out.update(pid_seen=os.getpid(), tid_seen=tid)
        c = Client(a.socket)
        period = int(a.period_ms * 1e6)
        r = c.reserve(period, int(a.budget_us * 1e3), cls=a.cls, threads=[tid], name="rt-worker")
        out["answer"] = r
        if r.get("result") != "granted":
            return
        out["policy"] = os.sched_getscheduler(0) & ~0x40000000
        next_t = time.monotonic_ns()
        end = next_t + int(a.seconds * 1e9)
        while next_t < end:  # the periodic work would go here
            next_t += period
            time.sleep(max(0, next_t - time.monotonic_ns()) / 1e9)
        out["release"] = c.release(r["reservation"]["id"])

    t = threading.Thread(target=worker, name="rt-worker")
    t.start()
    t.join()
    print(json.dumps(out), flush=True)
    granted = out.get("answer", {}).get("result") == "granted"
    return 0 if granted and out.get("release", {}).get("result") == "released" else 1


if __name__ == "__main__":
    sys.exit(main())
