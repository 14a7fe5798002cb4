#!/usr/bin/env python3
"""How long a cgroup v1 cpuset attach of a sleeping process takes after an
idle spell of G ms (docs/partition.md, the favordynmods knob; issue 27: a
grant's cpuset move). Without cgroup2's favordynmods the write waits for an
RCU grace period once no move happened in about the last one.

    sudo python3 bench/attach-after-idle.py [GAPS_MS=0,2,10,50,200,1000] [N=12] [--json]

Root only. Makes a scratch cpuset `rtmgr-attach-bench-<pid>` (CPU 1 or the
only CPU, memory node 0) and a `sleep` child, moves the child in and back N
times per gap, and removes both on exit, Ctrl-C included (a kill -9 leaves
the cpuset; `rtmgr partition reset` removes rtmgr cgroups left behind).
Measure alone. Prints p50/max per gap and whether favordynmods is mounted.
"""
import json, os, subprocess, sys, time


def mounts():
    """(mount point, file system type, superblock options) of each mount."""
    for line in open("/proc/self/mountinfo"):
        left, _, right = line.partition(" - ")
        fs, _, opts = (right.split() + ["", "", ""])[:3]
        yield left.split()[4], fs, opts.split(",")


def cpuset_mount():
    return next((at for at, fs, opts in mounts() if fs == "cgroup" and "cpuset" in opts), None)


def favordynmods_mounted():
    return next((at for at, fs, opts in mounts() if fs.startswith("cgroup") and "favordynmods" in opts), None)


def per_threadgroup_since_boot():
    """Did favordynmods get set and cleared on this boot (6.18+ keeps the
    per-threadgroup rwsem until reboot, and says so once in dmesg)?"""
    try:
        log = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return "per threadgroup rwsem mechanism can't be disabled" in log


def main():
    args = [a for a in sys.argv[1:] if a != "--json"]
    gaps = [int(g) for g in (args[0] if args else "0,2,10,50,200,1000").split(",")]
    n = int(args[1]) if len(args) > 1 else 12
    if os.geteuid() != 0:
        sys.exit("attach-after-idle: root only (it creates a cpuset)")
    root = cpuset_mount()
    if root is None:
        sys.exit("attach-after-idle: needs a cgroup v1 cpuset hierarchy (none mounted here)")
    cpus = open(os.path.join(root, "cpuset.cpus")).read().strip()
    d = os.path.join(root, f"rtmgr-attach-bench-{os.getpid()}")
    os.mkdir(d)
    child = None
    out = {"version": 1, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "kernel": os.uname().release, "favordynmods_on": favordynmods_mounted(),
           "per_threadgroup_kept_since_boot": per_threadgroup_since_boot(),
           "samples_per_gap": n, "gaps": []}
    try:
        open(os.path.join(d, "cpuset.cpus"), "w").write("1" if "1" in cpus else cpus)
        open(os.path.join(d, "cpuset.mems"), "w").write("0")
        child = subprocess.Popen(["sleep", "3600"])
        for gap in gaps:
            us = []
            for _ in range(n):
                time.sleep(gap / 1000)
                t0 = time.perf_counter_ns()
                open(os.path.join(d, "tasks"), "w").write(str(child.pid))
                us.append((time.perf_counter_ns() - t0) // 1000)
                open(os.path.join(root, "tasks"), "w").write(str(child.pid))
            us.sort()
            out["gaps"].append({"gap_ms": gap, "p50_us": us[len(us) // 2], "max_us": us[-1], "samples_us": us})
            if "--json" not in sys.argv:
                print(f"after {gap:5d} ms idle: attach p50 {us[len(us)//2]:6d} µs  max {us[-1]:6d} µs", flush=True)
    except KeyboardInterrupt:
        out["interrupted"] = True
    finally:
        if child is not None:
            child.kill()
            child.wait()
        for _ in range(50):
            try:
                os.rmdir(d)
                break
            except OSError:
                time.sleep(0.02)
    if "--json" in sys.argv:
        print(json.dumps(out))
        return
    print(f"favordynmods mounted: {out['favordynmods_on'] or 'no'}")
    if out["per_threadgroup_kept_since_boot"]:
        print("but it was set once since boot: the kernel keeps its per-threadgroup rwsem until reboot (dmesg)")


if __name__ == "__main__":
    main()
