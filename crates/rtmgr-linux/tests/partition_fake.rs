//! Partition apply/reset against fake v1 and v2 machines: what moves, what is
//! refused, and that reset gives back exactly the state before apply.

use rtmgr_core::partition::{validate, PartitionConfig};
use rtmgr_core::CpuSet;
use rtmgr_linux::cgroup::{self, Layout};
use rtmgr_linux::fake::{FakeCgroup, FakeMachine};
use rtmgr_linux::partition::{self, ApplyOptions, PartitionError, Role};
use rtmgr_linux::snapshot::{self, MachineState};
use rtmgr_linux::{irq, Host};
use std::path::Path;

/// Everything a partition may change, read back from the fake tree.
fn state(host: &Host) -> MachineState {
    snapshot::capture(host)
}

/// Identical: same values and the same tasks (nothing appears or vanishes in a fake tree).
fn assert_same(before: &MachineState, after: &MachineState, what: &str) {
    let d = before.diff(after);
    assert!(d.is_empty(), "{what}: {d:?}");
    assert_eq!(
        before.tasks.len(),
        after.tasks.len(),
        "{what}: task set changed"
    );
}

fn plan(host: &Host, rt: &str) -> rtmgr_core::partition::PartitionPlan {
    let online = rtmgr_linux::cpus::online(host).unwrap();
    validate(
        &PartitionConfig::default(),
        Some(&CpuSet::parse_list(rt).unwrap()),
        &online,
    )
    .unwrap()
}

fn opts() -> ApplyOptions {
    ApplyOptions {
        journal: "/run/rtmgr/journal.jsonl".into(),
        replace: false,
    }
}

fn apply_and_check(cg: FakeCgroup) {
    let m = FakeMachine::new(4).cgroup(cg).typical_tasks().build();
    let host = m.host();
    let before = state(&host);
    let p = plan(&host, "2-3");
    let (applied, report) = partition::apply(&host, &p, &opts()).unwrap();
    assert!(applied.complete);

    // No movable task keeps an RT CPU; per-CPU kthreads are reported.
    for t in rtmgr_linux::tasks::all(&host).unwrap() {
        let aff = host.get_affinity(t.tid).unwrap();
        if t.no_setaffinity {
            continue;
        }
        assert!(
            aff.is_disjoint(&p.rt),
            "task {} ({}) still on RT CPUs: {aff}",
            t.tid,
            t.comm
        );
    }
    let per_cpu: Vec<_> = report
        .not_moved
        .iter()
        .filter(|(k, _)| k.contains("per-CPU"))
        .collect();
    assert_eq!(per_cpu.len(), 1);
    assert_eq!(per_cpu[0].1.len(), 4);
    assert!(
        report.notes.iter().any(|n| n.contains("pinned-app")),
        "{:?}",
        report.notes
    );
    // Every IRQ and the default affinity on the NRT CPUs.
    for n in irq::numbers(&host).unwrap() {
        assert_eq!(irq::affinity(&host, n).unwrap(), p.nrt);
    }
    assert_eq!(
        CpuSet::parse_mask(&irq::default_affinity_raw(&host).unwrap()).unwrap(),
        p.nrt
    );
    assert!(host.exists(&applied.rt_cgroup));
    match cg {
        FakeCgroup::V1 => {
            // Tasks of the root cpuset went to the NRT set; init (in another cpuset) did not.
            let l = Layout::V1("/sys/fs/cgroup/cpuset".into());
            assert_eq!(
                cgroup::task_cgroup(&host, &l, 300).as_deref(),
                Some("/rtmgr-nrt")
            );
            assert_eq!(
                cgroup::task_cgroup(&host, &l, 1).as_deref(),
                Some("/init.scope")
            );
        }
        FakeCgroup::V2 => {
            assert_eq!(report.partition_state.as_deref(), Some("isolated"));
            assert!(host
                .read("/sys/fs/cgroup/cgroup.subtree_control")
                .unwrap()
                .contains("cpuset"));
        }
        FakeCgroup::V2NoCpuset => unreachable!(),
    }

    // A second apply is refused, and changes nothing.
    let mid = state(&host);
    assert!(matches!(
        partition::apply(&host, &p, &opts()),
        Err(PartitionError::AlreadyApplied(_))
    ));
    assert_same(&mid, &state(&host), "refused apply changed something");

    // An RT task enters the RT set; reset moves it back.
    partition::enter(&host, &applied, Role::Rt, 400).unwrap();
    let r = partition::reset(&host, Path::new("/run/rtmgr/journal.jsonl")).unwrap();
    assert!(r.had_partition);
    assert_same(
        &before,
        &state(&host),
        "reset did not restore the exact state",
    );
    assert!(!host.exists("/run/rtmgr"));
    // Idempotent.
    let again = partition::reset(&host, Path::new("/run/rtmgr/journal.jsonl")).unwrap();
    assert!(!again.had_partition);
    assert_same(&before, &state(&host), "state changed");
}

#[test]
fn v1_apply_and_exact_reset() {
    apply_and_check(FakeCgroup::V1);
}

#[test]
fn v2_apply_and_exact_reset() {
    apply_and_check(FakeCgroup::V2);
}

#[test]
fn no_cpuset_anywhere_is_refused_without_change() {
    let m = FakeMachine::new(2)
        .cgroup(FakeCgroup::V2NoCpuset)
        .typical_tasks()
        .build();
    let host = m.host();
    let before = state(&host);
    let err = partition::apply(&host, &plan(&host, "1"), &opts()).unwrap_err();
    assert!(matches!(err, PartitionError::NoCpuset), "{err}");
    assert_same(&before, &state(&host), "state changed");
    assert!(!host.exists("/run/rtmgr"));
}

#[test]
fn config_exceptions_are_honoured() {
    let m = FakeMachine::new(4).typical_tasks().build();
    let host = m.host();
    let cfg = PartitionConfig::from_toml(
        "rt_cpus = \"3\"\nkernel_threads = \"leave\"\n[irq]\nleave = [24]\nrt = [41]\n",
    )
    .unwrap();
    let p = validate(&cfg, None, &rtmgr_linux::cpus::online(&host).unwrap()).unwrap();
    let before = state(&host);
    let (_, report) = partition::apply(&host, &p, &opts()).unwrap();
    assert_eq!(irq::affinity(&host, 24).unwrap().to_list(), "0-3");
    assert_eq!(irq::affinity(&host, 41).unwrap().to_list(), "3");
    assert_eq!(irq::affinity(&host, 36).unwrap().to_list(), "0-2");
    assert_eq!(
        host.get_affinity(2).unwrap().to_list(),
        "0-3",
        "kthreadd must be left alone"
    );
    assert!(report
        .not_moved
        .keys()
        .any(|k| k.contains("kernel_threads")));
    partition::reset(&host, Path::new("/run/rtmgr/journal.jsonl")).unwrap();
    assert_same(&before, &state(&host), "state changed");
}

#[test]
fn leftover_cgroup_is_refused() {
    let m = FakeMachine::new(2).typical_tasks().build();
    let host = m.host();
    host.mkdir("/sys/fs/cgroup/cpuset/rtmgr-rt").unwrap();
    let err = partition::apply(&host, &plan(&host, "1"), &opts()).unwrap_err();
    assert!(matches!(err, PartitionError::CgroupExists(_)), "{err}");
    assert!(!host.exists("/run/rtmgr/journal.jsonl"));
}

#[test]
fn torn_journal_after_begin_resets_cleanly() {
    // Simulates a kill -9 right after cgroup creation: only the first records exist.
    let m = FakeMachine::new(2).typical_tasks().build();
    let host = m.host();
    let before = state(&host);
    partition::apply(&host, &plan(&host, "1"), &opts()).unwrap();
    let j = host.path("/run/rtmgr/journal.jsonl");
    let text = std::fs::read_to_string(&j).unwrap();
    // Keep Begin + the two CgroupCreated records, then a torn line.
    let kept: Vec<&str> = text.lines().take(3).collect();
    std::fs::write(&j, format!("{}\n{{\"op\":\"fi", kept.join("\n"))).unwrap();
    let cur = partition::current(&host, Path::new("/run/rtmgr/journal.jsonl"))
        .unwrap()
        .unwrap();
    assert!(!cur.complete);
    // The machine is still partitioned (apply really ran); reset restores what the
    // journal knows: cgroups removed. Tasks/IRQs were journalled after the cut, so
    // this checks only that reset copes with a partial journal.
    partition::reset(&host, Path::new("/run/rtmgr/journal.jsonl")).unwrap();
    let after = state(&host);
    assert_eq!(
        after.system["rtmgr cgroups"],
        before.system["rtmgr cgroups"]
    );
}

#[test]
fn cgroups_left_without_a_journal_are_emptied_and_removed_by_reset() {
    for cg in [FakeCgroup::V1, FakeCgroup::V2] {
        let m = FakeMachine::new(4).cgroup(cg).typical_tasks().build();
        let host = m.host();
        let (applied, _) = partition::apply(&host, &plan(&host, "2-3"), &opts()).unwrap();
        // The journal is lost (a test's private directory, a user's rm).
        std::fs::remove_file(host.path("/run/rtmgr/journal.jsonl")).unwrap();
        let r = partition::reset(&host, Path::new("/run/rtmgr/journal.jsonl")).unwrap();
        assert!(r.had_partition, "{cg:?}: {r:?}");
        assert!(!r.cgroups_removed.is_empty(), "{cg:?}: {r:?}");
        assert!(r.notes.iter().any(|n| n.contains("no journal")), "{r:?}");
        for role in [Role::Rt, Role::Nrt] {
            let dir = applied.layout.dir(&format!("rtmgr-{}", role_name(role)));
            assert!(!host.exists(&dir), "{cg:?}: {} still there", dir.display());
        }
        // Nothing left to do the second time.
        let again = partition::reset(&host, Path::new("/run/rtmgr/journal.jsonl")).unwrap();
        assert!(!again.had_partition, "{cg:?}: {again:?}");
    }
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::Rt => "rt",
        Role::Nrt => "nrt",
    }
}
