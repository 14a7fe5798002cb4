//! The irqbalance and tuned status items on fake machines: a fake irqbalance
//! on its socket, tuned profiles and variables files in the fake /etc.

use super::*;
use crate::fake::{irqbalance as fake_irqbalance, FakeMachine};

fn write(m: &FakeMachine, path: &str, text: &str) {
    crate::host::write_fake_file(&m.host(), path, text);
}

fn rt1() -> CpuSet {
    CpuSet::single(1)
}

#[test]
fn no_irqbalance_and_no_tuned_are_fine() {
    let m = FakeMachine::new(2).typical_tasks().build();
    write(
        &m,
        "/etc/default/irqbalance",
        "IRQBALANCE_BANNED_CPULIST=1\n",
    );
    let ib = irqbalance_item(&m.host(), Some(&rt1()));
    assert_eq!(ib.verdict, Verdict::Ok);
    assert_eq!(
        ib.value,
        "not running (/etc/default/irqbalance bans CPUs 1)"
    );
    let t = tuned_item(&m.host(), Some(&rt1()));
    assert_eq!(
        (t.verdict, t.value.as_str()),
        (Verdict::Ok, "no active profile (tuned not running)")
    );
}

#[test]
fn irqbalance_that_does_not_ban_the_rt_cpus_is_named_with_what_it_undoes() {
    let m = FakeMachine::new(2)
        .typical_tasks()
        .task(600, "irqbalance")
        .build();
    let _heard = fake_irqbalance::serve(&m, 600, Some("0"));
    let i = irqbalance_item(&m.host(), Some(&rt1()));
    assert_eq!(i.verdict, Verdict::Warn);
    assert!(
        i.value.starts_with(
            "running (pid 600), bans CPUs 0 (asked through /run/irqbalance/irqbalance600.sock)"
        ),
        "{i:?}"
    );
    assert!(
        i.why.contains("puts IRQs back on RT CPUs 1") && i.why.contains("--irqbalance ban"),
        "{i:?}"
    );
    let before = irqbalance_item(&m.host(), None);
    assert!(before.why.contains("refuses beside it"), "{before:?}");
}

#[test]
fn irqbalance_banning_the_rt_cpus_is_fine_and_without_socket_its_rules_are_read() {
    let m = FakeMachine::new(2)
        .typical_tasks()
        .task(600, "irqbalance")
        .build();
    write(&m, "/proc/600/environ", "IRQBALANCE_BANNED_CPULIST=1\0");
    let i = irqbalance_item(&m.host(), Some(&rt1()));
    assert_eq!(i.verdict, Verdict::Ok, "{i:?}");
    assert!(i.value.contains("bans CPUs 1 (by its rules"), "{i:?}");
}

#[test]
fn a_cpu_partitioning_profile_on_other_cpus_warns() {
    let m = FakeMachine::new(4)
        .typical_tasks()
        .task(700, "tuned")
        .build();
    write(&m, "/etc/tuned/active_profile", "cpu-partitioning\n");
    write(
        &m,
        "/usr/lib/tuned/cpu-partitioning/tuned.conf",
        "[main]\ninclude=network-latency\n[variables]\nisolated_cores = ${isolated_cores}\n",
    );
    write(
        &m,
        "/etc/tuned/cpu-partitioning-variables.conf",
        "# isolated_cores=2,4-7\nisolated_cores=2-3\n",
    );
    write(
        &m,
        "/proc/cmdline",
        "quiet nohz=on nohz_full=2-3 tuned.non_isolcpus=00000003\n",
    );
    let t = tuned_item(&m.host(), Some(&rt1()));
    assert_eq!(t.verdict, Verdict::Warn);
    assert_eq!(
        t.value,
        "profile cpu-partitioning (tuned running (pid 700)), isolated_cores 2-3 (/etc/tuned/cpu-partitioning-variables.conf); kernel command line: nohz_full=2-3 tuned.non_isolcpus=00000003"
    );
    assert!(t.why.contains("RT CPUs it does not isolate: 1"), "{t:?}");
    let same = tuned_item(&m.host(), Some(&CpuSet::parse_list("2-3").unwrap()));
    assert_eq!(same.verdict, Verdict::Ok, "{same:?}");
}

#[test]
fn an_exported_child_profile_is_followed_to_its_isolated_cores() {
    let m = FakeMachine::new(2).typical_tasks().build();
    write(&m, "/etc/tuned/active_profile", "rtmgr\n");
    write(
        &m,
        "/etc/tuned/rtmgr/tuned.conf",
        "[main]\ninclude=cpu-partitioning\n[variables]\nisolated_cores=1\n",
    );
    let t = tuned_item(&m.host(), Some(&rt1()));
    assert_eq!(t.verdict, Verdict::Ok, "{t:?}");
    assert!(
        t.value.contains("isolated_cores 1 (profile rtmgr)"),
        "{t:?}"
    );
    assert!(t.why.starts_with("not running"), "{t:?}");
}
