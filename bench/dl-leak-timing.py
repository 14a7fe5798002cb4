#!/usr/bin/env python3
"""When does the kernel keep the bandwidth of a thread set back from
SCHED_DEADLINE? (docs/kernel-dl-bandwidth-leak.md; issue 27: why one rtmgr
client re-granted in a closed loop starts most hard grants pending.)

A thread of this process in the RT CPU's cpuset (a root domain of its own),
asleep on a pipe as a client in recv(). Each cycle: SCHED_DEADLINE
(RUNTIME every 10 ms) set from this thread; the thread woken once (it runs
a few µs and sleeps again); AFTER_US later set back to SCHED_OTHER; GAP_US
later the next cycle. Prints one JSON line: how many cycles the kernel
admitted, refused (EBUSY), and the first refused. Standard library only;
root; bench/dl-leak-timing.sh gives it the partition and rebuilds the root
domain between runs.
    dl-leak-timing.py RT_TASKS NRT_TASKS RUNTIME_NS AFTER_US GAP_US CYCLES
"""
import ctypes
import errno
import json
import os
import sys
import threading
import time

SCHED_DEADLINE, SCHED_OTHER = 6, 0
NR_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}[os.uname().machine]
libc = ctypes.CDLL(None, use_errno=True)


class SchedAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32), ("flags", ctypes.c_uint64),
                ("nice", ctypes.c_int32), ("priority", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64)]


def set_attr(tid, policy, runtime=0, period=0):
    a = SchedAttr(ctypes.sizeof(SchedAttr), policy, 0, 0, 0, runtime, period, period)
    if libc.syscall(NR_SCHED_SETATTR, tid, ctypes.byref(a), 0) != 0:
        return ctypes.get_errno()
    return 0


def main():
    rt_tasks, nrt_tasks = sys.argv[1], sys.argv[2]
    runtime, after_us, gap_us, cycles = (int(x) for x in sys.argv[3:7])
    r, w = os.pipe()
    box = []

    def sleeper():
        box.append(threading.get_native_id())
        while os.read(r, 1) != b"q":
            pass

    t = threading.Thread(target=sleeper)
    t.start()
    while not box:
        time.sleep(0.001)
    tid = box[0]
    out = {"runtime_ns": runtime, "period_ns": 10_000_000, "set_back_after_wake_us": after_us,
           "gap_us": gap_us, "cycles": cycles, "admitted": 0, "ebusy": 0, "other_errors": 0,
           "first_ebusy": None}
    try:
        with open(rt_tasks, "w") as f:
            f.write(str(tid))
        os.write(w, b"x")  # it runs once on the RT CPU, then sleeps there
        time.sleep(0.002)
        for i in range(cycles):
            e = set_attr(tid, SCHED_DEADLINE, runtime, 10_000_000)
            if e == 0:
                out["admitted"] += 1
            elif e == errno.EBUSY:
                out["ebusy"] += 1
                if out["first_ebusy"] is None:
                    out["first_ebusy"] = i
            else:
                out["other_errors"] += 1
            os.write(w, b"x")
            time.sleep(after_us / 1e6)
            set_attr(tid, SCHED_OTHER)
            time.sleep(gap_us / 1e6)
    finally:
        set_attr(tid, SCHED_OTHER)
        with open(nrt_tasks, "w") as f:
            f.write(str(tid))
        os.write(w, b"q")
        t.join()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
