//! The run-time knobs of a partition against fake v1 and v2 machines: each one
//! applied, its files checked, reset, and the machine exactly as before; a
//! machine without a knob's files gets a note, not an error.

use rtmgr_core::partition::{
    validate, ApplyReport, KnobId, KnobReport, PartitionConfig, PartitionPlan,
};
use rtmgr_linux::fake::{FakeBuilder, FakeCgroup, FakeMachine};
use rtmgr_linux::partition::{self, ApplyOptions};
use rtmgr_linux::{snapshot, Host};
use std::path::Path;

const JOURNAL: &str = "/run/rtmgr/journal.jsonl";

fn opts() -> ApplyOptions {
    ApplyOptions {
        journal: JOURNAL.into(),
        replace: false,
    }
}

/// Apply `toml` on a 4-CPU fake machine of each layout, let `check` look at
/// the machine and the report, reset, and compare with the state before.
fn each_layout(
    toml: &str,
    build: impl Fn(FakeBuilder) -> FakeBuilder,
    check: impl Fn(&Host, &ApplyReport),
) {
    for cg in [FakeCgroup::V1, FakeCgroup::V2] {
        let m = build(FakeMachine::new(4).cgroup(cg).typical_tasks()).build();
        let host = m.host();
        let before = snapshot::capture(&host);
        let plan = plan_for(&host, toml);
        let (_, report) = partition::apply(&host, &plan, &opts()).unwrap();
        check(&host, &report);
        partition::reset(&host, Path::new(JOURNAL)).unwrap();
        let d = before.diff(&snapshot::capture(&host));
        assert!(d.is_empty(), "{cg:?}: not restored: {d:?}");
        assert!(!host.exists("/run/rtmgr"));
    }
}

/// A partition plan from a TOML config, for this host's CPUs.
fn plan_for(host: &Host, toml: &str) -> PartitionPlan {
    let cfg = PartitionConfig::from_toml(toml).unwrap();
    validate(&cfg, None, &rtmgr_linux::cpus::online(host).unwrap()).unwrap()
}

fn knob(r: &ApplyReport, k: KnobId) -> &KnobReport {
    r.knobs
        .iter()
        .find(|x| x.knob == k)
        .unwrap_or_else(|| panic!("no report for {k}: {:?}", r.knobs))
}

/// The journal as a `kill -9` before apply finished leaves it: no `applied` record.
fn cut_before_applied(host: &Host) {
    let j = host.path(JOURNAL);
    let text = std::fs::read_to_string(&j).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("\"op\":\"applied\""))
        .collect();
    std::fs::write(&j, kept.join("\n") + "\n").unwrap();
}

fn read(host: &Host, p: &str) -> String {
    host.read(p).unwrap().trim().to_string()
}

#[test]
fn workqueue_masks_go_to_the_nrt_cpus_and_come_back() {
    each_layout(
        "rt_cpus = \"3\"",
        |b| b,
        |host, r| {
            for q in ["cpumask", "writeback/cpumask", "blkcg_punt_bio/cpumask"] {
                assert_eq!(
                    read(host, &format!("/sys/devices/virtual/workqueue/{q}")),
                    "7"
                );
            }
            let k = knob(r, KnobId::Workqueues);
            assert!(k.available);
            assert_eq!(
                k.lines.len(),
                3,
                "writeback once, not again through the bus: {k:?}"
            );
        },
    );
}

#[test]
fn knobs_left_out_by_the_config_do_nothing() {
    each_layout(
        "rt_cpus = \"3\"\nknobs = [\"cgroups\", \"tasks\"]",
        |b| b,
        |host, r| {
            assert_eq!(
                read(host, "/sys/devices/virtual/workqueue/writeback/cpumask"),
                "f"
            );
            assert_eq!(read(host, "/proc/irq/36/smp_affinity"), "f");
            let names: Vec<KnobId> = r.knobs.iter().map(|k| k.knob).collect();
            assert_eq!(names, vec![KnobId::Cgroups, KnobId::Tasks]);
        },
    );
}

#[test]
fn missing_files_are_a_note_not_an_error() {
    let m = FakeMachine::new(2).typical_tasks().build();
    std::fs::remove_dir_all(m.root().join("sys/devices/virtual/workqueue")).unwrap();
    std::fs::remove_dir_all(m.root().join("sys/bus/workqueue")).unwrap();
    let host = m.host();
    let plan = plan_for(&host, "rt_cpus = \"1\"");
    let (_, r) = partition::apply(&host, &plan, &opts()).unwrap();
    let k = knob(&r, KnobId::Workqueues);
    assert!(!k.available, "{k:?}");
    assert!(k.lines[0].contains("no workqueue cpumask"), "{k:?}");
    partition::reset(&host, Path::new(JOURNAL)).unwrap();
}

#[test]
fn sysctls_as_tuned_sets_them_and_back() {
    each_layout(
        "rt_cpus = \"2-3\"",
        |b| b,
        |host, r| {
            assert_eq!(read(host, "/proc/sys/kernel/timer_migration"), "0");
            assert_eq!(read(host, "/proc/sys/vm/stat_interval"), "10");
            assert_eq!(read(host, "/proc/sys/kernel/watchdog_cpumask"), "0-1");
            for k in [
                KnobId::TimerMigration,
                KnobId::StatInterval,
                KnobId::Watchdog,
            ] {
                let k = knob(r, k);
                assert!(k.available && k.lines.len() == 1, "{k:?}");
                assert!(k.lines[0].contains("->"), "{k:?}");
            }
        },
    );
}

#[test]
fn a_missing_sysctl_is_said_once() {
    let m = FakeMachine::new(2).typical_tasks().build();
    std::fs::remove_file(m.root().join("proc/sys/kernel/watchdog_cpumask")).unwrap();
    let host = m.host();
    let before = snapshot::capture(&host);
    let plan = plan_for(&host, "rt_cpus = \"1\"");
    let (_, r) = partition::apply(&host, &plan, &opts()).unwrap();
    let k = knob(&r, KnobId::Watchdog);
    assert!(!k.available);
    assert_eq!(k.lines.len(), 1);
    assert!(k.lines[0].contains("no kernel.watchdog_cpumask"), "{k:?}");
    partition::reset(&host, Path::new(JOURNAL)).unwrap();
    assert!(before.diff(&snapshot::capture(&host)).is_empty());
}

#[test]
fn packet_steering_leaves_the_rt_cpus() {
    each_layout(
        "rt_cpus = \"2-3\"",
        |b| b,
        |host, r| {
            let q = "/sys/class/net";
            assert_eq!(read(host, &format!("{q}/lo/queues/rx-0/rps_cpus")), "3");
            assert_eq!(read(host, &format!("{q}/eth0/queues/rx-1/rps_cpus")), "3");
            // tx-0 was CPU 0 only; tx-1 was CPUs 1-3 and keeps CPU 1.
            assert_eq!(read(host, &format!("{q}/eth0/queues/tx-0/xps_cpus")), "1");
            assert_eq!(read(host, &format!("{q}/eth0/queues/tx-1/xps_cpus")), "2");
            let k = knob(r, KnobId::Rps);
            assert!(
                k.lines.iter().any(|l| l == "lo rx-0 rps_cpus: 0 -> 3"),
                "{k:?}"
            );
            assert!(k.lines.iter().any(|l| l == "1 already as wanted"), "{k:?}");
        },
    );
}

#[test]
fn a_managed_disk_interrupt_on_an_rt_cpu_is_named_and_its_completions_move() {
    each_layout(
        "rt_cpus = \"1\"",
        |b| b.managed_irq(36, 1, 25_000),
        |host, r| {
            assert_eq!(read(host, "/sys/block/vda/queue/rq_affinity"), "2");
            assert_eq!(read(host, "/sys/block/loop0/queue/rq_affinity"), "1");
            let k = knob(r, KnobId::Block);
            assert!(
                k.lines[0].starts_with(
                    "vda: completion IRQ 36 virtio1-req.0 is kernel-managed and lands on RT CPU 1"
                ) && k.lines[0].contains("isolcpus=managed_irq,domain,1"),
                "{k:?}"
            );
            // The irqs knob could not move it either.
            assert!(
                r.not_moved.values().flatten().any(|i| i.starts_with("36 ")),
                "{r:?}"
            );
        },
    );
    // On an NRT CPU it is no business of the RT CPUs.
    each_layout(
        "rt_cpus = \"1\"",
        |b| b.managed_irq(36, 0, 25_000),
        |host, r| {
            assert_eq!(read(host, "/sys/block/vda/queue/rq_affinity"), "1");
            let k = knob(r, KnobId::Block);
            assert_eq!(
                k.lines,
                vec!["no block device's completion interrupt lands on an RT CPU"]
            );
        },
    );
}

#[test]
fn deep_idle_states_and_governor_of_the_rt_cpus_only() {
    each_layout(
        "rt_cpus = \"3\"",
        |b| b.cpuidle().cpufreq(),
        |host, r| {
            let cpu = |c: u32, f: &str| read(host, &format!("/sys/devices/system/cpu/cpu{c}/{f}"));
            assert_eq!(
                cpu(3, "cpuidle/state2/disable"),
                "1",
                "C6 off on the RT CPU"
            );
            assert_eq!(cpu(3, "cpuidle/state1/disable"), "0", "C1 stays");
            assert_eq!(cpu(3, "cpuidle/state0/disable"), "0", "POLL stays");
            assert_eq!(cpu(2, "cpuidle/state2/disable"), "0", "NRT CPUs keep C6");
            assert_eq!(cpu(3, "cpufreq/scaling_governor"), "performance");
            assert_eq!(cpu(0, "cpufreq/scaling_governor"), "powersave");
            assert!(knob(r, KnobId::Cpuidle).lines[0].contains("cpu3 C6 (170 µs to leave)"));
        },
    );
}

#[test]
fn without_cpuidle_and_cpufreq_they_say_not_available() {
    each_layout(
        "rt_cpus = \"3\"",
        |b| b,
        |_, r| {
            let idle = knob(r, KnobId::Cpuidle);
            assert!(
                !idle.available && idle.lines[0].contains("cpuidle driver: none"),
                "{idle:?}"
            );
            let freq = knob(r, KnobId::Cpufreq);
            assert!(
                !freq.available && freq.lines[0].contains("no cpufreq"),
                "{freq:?}"
            );
        },
    );
}

fn preempt_now(host: &Host) -> String {
    read(host, "/sys/kernel/debug/sched/preempt")
}

#[test]
fn preempt_full_for_the_partition_lifetime_then_back() {
    for want in ["full", "lazy"] {
        let cfg = format!("rt_cpus = \"3\"\npreempt = \"{want}\"");
        each_layout(
            &cfg,
            |b| b.preempt_dynamic(true),
            |host, r| {
                let now = preempt_now(host);
                assert!(now.contains(&format!("({want})")), "{now}");
                let k = knob(r, KnobId::Preempt);
                assert_eq!(k.lines, vec![format!("sched/preempt: voluntary -> {want}")]);
            },
        );
    }
    // Without --preempt nothing changes.
    each_layout(
        "rt_cpus = \"3\"",
        |b| b.preempt_dynamic(true),
        |host, _| {
            assert!(preempt_now(host).contains("(voluntary)"));
        },
    );
}

#[test]
fn a_refused_preempt_write_is_said_once_and_skipped() {
    each_layout(
        "rt_cpus = \"3\"\npreempt = \"full\"",
        |b| b.preempt_dynamic(false),
        |_, r| {
            let k = knob(r, KnobId::Preempt);
            assert!(!k.available);
            assert_eq!(k.lines.len(), 1, "{k:?}");
            assert!(k.lines[0].contains("Operation not permitted"), "{k:?}");
            assert!(
                !r.notes.iter().any(|n| n.contains("preempt")),
                "said once: {r:?}"
            );
        },
    );
    // No debugfs file at all (not PREEMPT_DYNAMIC).
    each_layout(
        "rt_cpus = \"3\"\npreempt = \"lazy\"",
        |b| b,
        |_, r| {
            let k = knob(r, KnobId::Preempt);
            assert!(
                !k.available && k.lines[0].contains("without PREEMPT_DYNAMIC"),
                "{k:?}"
            );
        },
    );
}

#[test]
fn reset_puts_the_booted_model_back_after_a_crash_journal() {
    // A journal cut right after the preempt record and its write: reset still restores.
    let m = FakeMachine::new(2)
        .typical_tasks()
        .preempt_dynamic(true)
        .build();
    let host = m.host();
    let plan = plan_for(&host, "rt_cpus = \"1\"\npreempt = \"full\"");
    partition::apply(&host, &plan, &opts()).unwrap();
    cut_before_applied(&host);
    assert!(preempt_now(&host).contains("(full)"));
    partition::reset(&host, Path::new(JOURNAL)).unwrap();
    assert!(preempt_now(&host).contains("(voluntary)"));
}

#[test]
fn a_preempt_only_plan_switches_the_model_and_nothing_else() {
    // What evaluate's "preempt" configuration applies around its segment.
    let m = FakeMachine::new(2)
        .typical_tasks()
        .preempt_dynamic(true)
        .build();
    let host = m.host();
    let before = snapshot::capture(&host);
    let mut plan = plan_for(&host, "rt_cpus = \"1\"");
    plan.knobs = vec![KnobId::Preempt];
    plan.preempt = Some(rtmgr_core::partition::PreemptMode::Full);
    assert_eq!(
        partition::preempt_switchable(&host, rtmgr_core::partition::PreemptMode::Full),
        Ok(())
    );
    let (applied, r) = partition::apply(&host, &plan, &opts()).unwrap();
    assert!(r.knobs.iter().all(|k| k.available), "{r:?}");
    assert!(preempt_now(&host).contains("(full)"));
    assert!(
        !host.exists(&applied.rt_cgroup),
        "no cpuset for a preempt-only plan"
    );
    let mid = snapshot::capture(&host);
    let changed = before.diff(&mid);
    assert_eq!(changed.len(), 1, "only the model changed: {changed:?}");
    partition::reset(&host, Path::new(JOURNAL)).unwrap();
    assert!(before.diff(&snapshot::capture(&host)).is_empty());
}

fn cgroup2_options(host: &Host) -> Vec<String> {
    let info = host.read("/proc/self/mountinfo").unwrap();
    rtmgr_core::cgroupfs::cgroup2_mounts(&info)
        .into_iter()
        .map(|m| m.super_options)
        .collect()
}

#[test]
fn favordynmods_for_the_partition_lifetime_then_back() {
    each_layout(
        "rt_cpus = \"3\"\nfavordynmods = true",
        |b| b,
        |host, r| {
            assert_eq!(cgroup2_options(host), vec!["rw,favordynmods".to_string()]);
            let k = knob(r, KnobId::Favordynmods);
            assert!(k.available, "{k:?}");
            assert!(k.lines[0].contains("favordynmods set"), "{k:?}");
        },
    );
    // Not asked: the mount stays as it is.
    each_layout(
        "rt_cpus = \"3\"",
        |b| b,
        |host, r| {
            assert_eq!(cgroup2_options(host), vec!["rw".to_string()]);
            let k = knob(r, KnobId::Favordynmods);
            assert!(k.lines[0].contains("no --favordynmods"), "{k:?}");
        },
    );
}

#[test]
fn favordynmods_keeps_the_other_options_and_reset_after_a_crash_removes_it() {
    let m = FakeMachine::new(2).typical_tasks().build();
    let host = m.host();
    let info = host.read("/proc/self/mountinfo").unwrap();
    host.write(
        "/proc/self/mountinfo",
        &info.replace("cgroup2 cgroup2 rw", "cgroup2 cgroup2 rw,nsdelegate"),
    )
    .unwrap();
    let plan = plan_for(&host, "rt_cpus = \"1\"\nfavordynmods = true");
    partition::apply(&host, &plan, &opts()).unwrap();
    assert_eq!(
        cgroup2_options(&host),
        vec!["rw,nsdelegate,favordynmods".to_string()]
    );
    cut_before_applied(&host);
    let r = partition::reset(&host, Path::new(JOURNAL)).unwrap();
    assert_eq!(cgroup2_options(&host), vec!["rw,nsdelegate".to_string()]);
    assert!(
        r.notes.iter().any(|n| n.contains("favordynmods removed")),
        "{r:?}"
    );
}

#[test]
fn favordynmods_without_a_cgroup2_mount_is_said_and_skipped() {
    let m = FakeMachine::new(2)
        .cgroup(FakeCgroup::V1)
        .typical_tasks()
        .build();
    let host = m.host();
    let info = host.read("/proc/self/mountinfo").unwrap();
    let v1_only: Vec<&str> = info.lines().filter(|l| !l.contains("cgroup2")).collect();
    host.write("/proc/self/mountinfo", &(v1_only.join("\n") + "\n"))
        .unwrap();
    let plan = plan_for(&host, "rt_cpus = \"1\"\nfavordynmods = true");
    let (_, r) = partition::apply(&host, &plan, &opts()).unwrap();
    let k = knob(&r, KnobId::Favordynmods);
    assert!(
        !k.available && k.lines[0].contains("no cgroup2 hierarchy"),
        "{k:?}"
    );
    partition::reset(&host, Path::new(JOURNAL)).unwrap();
}

#[test]
fn favordynmods_asked_with_the_knob_left_out_is_refused() {
    let cfg = PartitionConfig::from_toml(
        "rt_cpus = \"1\"\nfavordynmods = true\nknobs = [\"cgroups\", \"tasks\"]",
    )
    .unwrap();
    let e = validate(&cfg, None, &rtmgr_core::CpuSet::parse_list("0-1").unwrap()).unwrap_err();
    assert!(e.to_string().contains("\"favordynmods\" knob"), "{e}");
}
