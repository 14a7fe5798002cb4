//! The EPERM explanation on fake trees: a v1 cpu cgroup without RT budget, a
//! v2 cgroup with the cpu controller under RT group scheduling, an
//! unprivileged process; the probe's EPERM comes from the fake kernel.

use super::*;
use crate::fake::FakeMachine;
use crate::host::FAKE_FIFO_ERRNO;

fn write(m: &FakeMachine, path: &str, text: &str) {
    crate::host::write_fake_file(&m.host(), path, text);
}

/// A kernel with RT group scheduling and RT throttling on; the probe refused.
fn refused_machine(ncpu: u32, cgroup: crate::fake::FakeCgroup) -> FakeMachine {
    let m = FakeMachine::new(ncpu).cgroup(cgroup).build();
    write(&m, "/proc/sys/kernel/osrelease", "6.1.0-fake\n");
    write(&m, "/boot/config-6.1.0-fake", "CONFIG_RT_GROUP_SCHED=y\n");
    write(&m, "/proc/sys/kernel/sched_rt_runtime_us", "950000\n");
    write(&m, FAKE_FIFO_ERRNO, &libc::EPERM.to_string());
    m
}

#[test]
fn a_v1_cpu_cgroup_without_rt_budget_is_named() {
    let m = refused_machine(2, crate::fake::FakeCgroup::V1);
    let mi = m.root().join("proc/self/mountinfo");
    let mut text = std::fs::read_to_string(&mi).unwrap();
    text.push_str("32 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n");
    std::fs::write(mi, text).unwrap();
    write(
        &m,
        "/proc/self/cgroup",
        "5:cpuset:/\n4:cpu,cpuacct:/user.slice\n0::/\n",
    );
    write(
        &m,
        "/sys/fs/cgroup/cpu,cpuacct/cpu.rt_runtime_us",
        "950000\n",
    );
    write(
        &m,
        "/sys/fs/cgroup/cpu,cpuacct/user.slice/cpu.rt_runtime_us",
        "0\n",
    );
    let i = rt_permission_item(&m.host());
    assert_eq!(i.verdict, Verdict::Warn);
    assert_eq!(i.value, "SCHED_FIFO refused: EPERM (rt_group_no_budget)");
    assert!(
        i.why
            .contains("cpu cgroup /user.slice no RT budget (cpu.rt_runtime_us = 0)")
            && i.why.contains("fix: give the cgroup a budget"),
        "{i:?}"
    );
}

#[test]
fn a_v2_cpu_controller_under_rt_group_scheduling_is_named() {
    let m = refused_machine(2, crate::fake::FakeCgroup::V2);
    write(&m, "/proc/self/cgroup", "0::/system.slice/app.service\n");
    write(
        &m,
        "/sys/fs/cgroup/system.slice/app.service/cpu.weight",
        "100\n",
    );
    let i = rt_permission_item(&m.host());
    assert_eq!(i.value, "SCHED_FIFO refused: EPERM (v2_cpu_controller)");
    assert!(i.why.contains("v2 has no RT budget file"), "{i:?}");
}

#[test]
fn an_unprivileged_process_and_an_unknown_cause() {
    let m = refused_machine(2, crate::fake::FakeCgroup::V1);
    write(
        &m,
        "/proc/self/status",
        "Name:\trtmgr\nCapEff:\t0000000000000000\n",
    );
    write(
        &m,
        "/proc/self/limits",
        "Max realtime priority     0                    0\n",
    );
    let i = rt_permission_item(&m.host());
    assert_eq!(i.value, "SCHED_FIFO refused: EPERM (no_cap_sys_nice)");
    assert!(i.why.contains("RLIMIT_RTPRIO is 0"), "{i:?}");
    write(
        &m,
        "/proc/self/limits",
        "Max realtime priority     unlimited            unlimited\n",
    );
    let i = rt_permission_item(&m.host());
    assert_eq!(i.value, "SCHED_FIFO refused: EPERM (cause unknown)");
    assert!(i.why.contains("container runtime"), "{i:?}");
}

#[test]
fn without_a_probe_the_facts_still_speak() {
    let m = FakeMachine::new(2).build();
    let i = rt_permission_item(&m.host());
    assert_eq!(i.verdict, Verdict::Ok, "{i:?}");
    write(&m, "/proc/self/status", "CapEff:\t0000000000000000\n");
    write(
        &m,
        "/proc/self/limits",
        "Max realtime priority     0                    0\n",
    );
    let i = rt_permission_item(&m.host());
    assert_eq!(i.verdict, Verdict::Warn);
    assert!(
        i.value
            .starts_with("not tried here; SCHED_FIFO would be refused"),
        "{i:?}"
    );
}

#[test]
fn on_this_machine_the_probe_answers() {
    let i = rt_permission_item(&Host::real());
    assert!(i.value.starts_with("SCHED_FIFO "), "{i:?}");
}
