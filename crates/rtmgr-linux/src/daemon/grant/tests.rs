//! Every grant step on the fake machine: apply, verify, undo, and its drift
//! (the state changed behind the daemon's back, seen by `drift`, fixed by `repair`).

use super::*;
use crate::daemon::grants_journal as journal;
use crate::fake::FakeMachine;
use crate::host::{Limit, LimitKind};
use crate::resources::grant::GrantResources;
use rtmgr_core::admission::{Demand, Kind};
use rtmgr_core::CpuSet;
use rtmgr_sys::sched::{SchedAttr, SCHED_FIFO};
use std::path::{Path, PathBuf};

const PID: u32 = 500;
const IRQ: u32 = 41;
const RT_SET: &str = "/sys/fs/cgroup/cpuset/rtmgr-rt/cpu1";
const RESCTRL_GROUP: &str = "/sys/fs/resctrl/rtmgr-rt";

/// A 2-CPU v1 machine with a client (500) on both CPUs at 64 KiB locked
/// memory, CPU 1's cpuset and a resctrl group; and the grant of CPU 1 to it:
/// SCHED_FIFO 10, IRQ 41, best-effort I/O level 2, the cache group.
fn machine() -> (FakeMachine, Layout, Grant) {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let host = m.host();
    let layout = crate::cgroup::mounts(&host).unwrap().layout().unwrap();
    host.mkdir("/sys/fs/cgroup/cpuset/rtmgr-rt").unwrap();
    host.mkdir(RT_SET).unwrap();
    host.write(format!("{RT_SET}/cpuset.cpus"), "1").unwrap();
    std::fs::create_dir_all(host.path(RESCTRL_GROUP)).unwrap();
    host.write("/sys/fs/resctrl/tasks", "").unwrap();
    host.write(format!("{RESCTRL_GROUP}/tasks"), "").unwrap();
    let kib64 = Limit {
        soft: Some(65536),
        hard: Some(65536),
    };
    host.set_limit(PID, LimitKind::MemLock, kib64).unwrap();
    let start = crate::tasks::info(&host, PID, PID).unwrap().start_time;
    let ioprio = crate::resources::grant::ioprio_changes(
        &host,
        &[(PID, start)],
        rtmgr_sys::ioprio::value(rtmgr_sys::ioprio::CLASS_BE, 2),
    )
    .unwrap();
    let g = Grant {
        id: 7,
        pid: PID,
        pid_start: start,
        uid: 1000,
        name: None,
        cpu: 1,
        class: "rt1:10".into(),
        demand: Demand::new(10_000_000, 2_000_000, None, Kind::Soft { priority: 10 }).unwrap(),
        threads: vec![new_thread(
            PID,
            crate::tasks::info(&host, PID, PID).unwrap().start_time,
        )],
        limits: Vec::new(),
        irq: Some((IRQ, String::new())),
        cgroup: Some(PathBuf::from(RT_SET)),
        response_ns: 0,
        resources: GrantResources {
            memlock_bytes: 1 << 20,
            ioprio,
            cache_group: Some(PathBuf::from(RESCTRL_GROUP)),
            cache_note: None,
        },
    };
    (m, layout, g)
}

fn draft() -> Draft {
    Draft {
        allowance: Allowance {
            rttime_us: 200_000,
            memlock_bytes: 1 << 20,
            enforce: true,
        },
        fresh_tids: vec![PID],
        fresh_limits: true,
    }
}

/// What a grant may change on the fake machine, cache group aside (the fake
/// resctrl `tasks` files keep the last write, not a membership).
fn state(host: &Host) -> Vec<String> {
    let limit = |k| format!("{:?}", host.get_limit(PID, k).unwrap());
    vec![
        host.get_affinity(PID).unwrap().to_list(),
        host.read(format!("/proc/{PID}/cgroup")).unwrap(),
        format!("{:?}", host.get_attr(PID).unwrap()),
        limit(LimitKind::RtTime),
        limit(LimitKind::RtPrio),
        limit(LimitKind::MemLock),
        host.get_ioprio(PID).unwrap().to_string(),
        crate::irq::raw_mask(host, IRQ).unwrap(),
    ]
}

fn step(name: &str) -> &'static dyn GrantStep {
    *STEPS.iter().find(|s| s.name() == name).unwrap()
}

/// Each step alone: its apply changes the machine, its verify sees nothing
/// amiss, its undo puts everything back and its verify then sees it.
#[test]
fn each_step_applies_verifies_and_undoes() {
    for s in STEPS {
        let (m, layout, mut g) = machine();
        let early = s.name() == "deadline before the move";
        if early {
            // It acts for hard grants alone (the thread waits on CPU 0).
            g.demand = hard();
        }
        let host = m.host();
        let cx = Cx::new(&host, &layout, true);
        snapshot(&cx, &draft(), &mut g).unwrap();
        let before = state(&host);
        let mut on = On { cx: &cx, g: &g };
        s.apply(&mut on).unwrap();
        assert!(s.verify(&on).is_empty(), "{}", s.name());
        if s.name() == "cache group" {
            let tasks = host.read(format!("{RESCTRL_GROUP}/tasks")).unwrap();
            assert_eq!(tasks.trim(), PID.to_string());
        } else {
            assert_ne!(state(&host), before, "{} changed nothing", s.name());
        }
        assert!(s.undo(&mut on).is_empty(), "{}", s.name());
        assert_eq!(state(&host), before, "{}", s.name());
        if s.name() == "cache group" {
            host.write(format!("{RESCTRL_GROUP}/tasks"), "").unwrap();
            let root = host.read("/sys/fs/resctrl/tasks").unwrap();
            assert_eq!(root.trim(), PID.to_string());
        }
        // The early deadline step leaves verifying to `SchedAttrs`.
        assert!(
            early || !s.verify(&on).is_empty(),
            "{} undone yet verified",
            s.name()
        );
    }
}

fn hard() -> Demand {
    Demand::new(10_000_000, 2_000_000, None, Kind::Hard).unwrap()
}

/// The fake task's stat with its run queue's CPU (field 39) set.
pub(crate) fn waiting_on(host: &Host, tid: u32, cpu: u32) {
    let path = format!("/proc/{tid}/stat");
    let stat = host.read(&path).unwrap();
    let (head, tail) = stat.split_at(stat.rfind(')').unwrap() + 1);
    let mut fields: Vec<String> = tail.split_whitespace().map(String::from).collect();
    fields[39 - 3] = cpu.to_string();
    host.write(&path, &format!("{head} {}\n", fields.join(" ")))
        .unwrap();
}

/// A hard grant's thread asleep on an NRT CPU gets SCHED_DEADLINE before
/// its cpuset move (where the kernel admits it); one waiting on its RT CPU
/// already gets it after the move, as a soft grant's thread does, and so
/// does one runnable on the NRT CPU (the move migrates it; deadline there
/// first, it would run ahead of everything on that CPU); all end placed and
/// at the policy, and give everything back.
#[test]
fn a_hard_grant_sets_the_deadline_where_the_thread_waits() {
    for (cpu, runnable, early) in [(0, false, true), (1, false, false), (0, true, false)] {
        let (m, layout, mut g) = machine();
        g.demand = hard();
        g.class = "rt0".into();
        let host = m.host();
        waiting_on(&host, PID, cpu);
        if runnable {
            let path = format!("/proc/{PID}/stat");
            let stat = host.read(&path).unwrap();
            assert!(stat.contains(") S "), "{stat}");
            host.write(&path, &stat.replacen(") S ", ") R ", 1))
                .unwrap();
        }
        let cx = Cx::new(&host, &layout, true);
        snapshot(&cx, &draft(), &mut g).unwrap();
        let before = state(&host);
        step("deadline before the move")
            .apply(&mut On { cx: &cx, g: &g })
            .unwrap();
        let policy = host.get_attr(PID).unwrap().policy;
        assert_eq!(
            policy == rtmgr_sys::sched::SCHED_DEADLINE,
            early,
            "CPU {cpu}, runnable {runnable}"
        );
        // Already at the policy: the move and the last step leave it as it is.
        apply(&cx, &g).unwrap();
        assert_eq!(host.get_attr(PID).unwrap(), granted_attr(&g.demand));
        assert_eq!(host.get_affinity(PID).unwrap(), CpuSet::single(1));
        assert_eq!(drift(&cx, &g), vec![]);
        let sets = attr_sets(&host);
        assert!(revoke_policy(&cx, &g).is_empty());
        assert_eq!(host.get_attr(PID).unwrap(), SchedAttr::default());
        // Once, not once per policy step (both give the same old policy).
        assert_eq!(
            attr_sets(&host),
            sets + 1,
            "CPU {cpu}: policy set back more than once"
        );
        assert!(revoke_placement(&cx, &g).is_empty());
        assert_eq!(state(&host), before, "CPU {cpu}");
    }
}

/// How many times the client's scheduling attributes were set.
fn attr_sets(host: &Host) -> u64 {
    host.read(format!("/proc/{PID}/{}", crate::host::ATTR_SETS))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// A hard grant whose apply fails after the early deadline step and before
/// `SchedAttrs` (here the IRQ step, the IRQ being kernel-managed): the early
/// step's undo sets the old policy back, since `SchedAttrs`' is not in the
/// undo.
#[test]
fn a_hard_grant_failing_after_the_early_deadline_step_gives_the_policy_back() {
    let (m, layout, mut g) = machine_whose_irq_refuses();
    let host = m.host();
    g.demand = hard();
    g.class = "rt0".into();
    waiting_on(&host, PID, 0);
    apply_fails_and_changes_nothing(&host, &layout, &mut g);
    assert_eq!(attr_sets(&host), 2, "set SCHED_DEADLINE early, then back");
}

/// `machine`'s grant on a machine whose IRQ is kernel-managed (it refuses
/// its new mask), without the I/O priority and cache group.
fn machine_whose_irq_refuses() -> (FakeMachine, Layout, Grant) {
    let m = FakeMachine::new(2)
        .task(PID, "client")
        .managed_irq(IRQ, 0, 5)
        .build();
    let (_other, layout, mut g) = machine();
    let host = m.host();
    host.mkdir("/sys/fs/cgroup/cpuset/rtmgr-rt").unwrap();
    host.mkdir(RT_SET).unwrap();
    host.write(format!("{RT_SET}/cpuset.cpus"), "1").unwrap();
    g.resources.cache_group = None;
    g.resources.ioprio.clear();
    (m, layout, g)
}

/// Snapshot, apply: it fails at the IRQ step (EIO), and the machine is as
/// it was.
fn apply_fails_and_changes_nothing(host: &Host, layout: &Layout, g: &mut Grant) {
    let cx = Cx::new(host, layout, true);
    snapshot(&cx, &draft(), g).unwrap();
    let before = state(host);
    let e = apply(&cx, g).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EIO), "{e}");
    assert_eq!(state(host), before);
}

/// A thread that is gone before the early step: the grant says so (gone),
/// not a bare errno.
#[test]
fn a_hard_grant_of_a_gone_thread_is_gone() {
    let (m, layout, mut g) = machine();
    g.demand = hard();
    let host = m.host();
    let cx = Cx::new(&host, &layout, true);
    snapshot(&cx, &draft(), &mut g).unwrap();
    std::fs::remove_file(host.path(format!("/proc/{PID}/stat"))).unwrap();
    let e = apply(&cx, &g).unwrap_err();
    assert!(e.is_gone(), "{e}");
}

/// The snapshot records the old values the journal needs.
#[test]
fn snapshot_records_what_each_step_changes() {
    let (m, layout, mut g) = machine();
    let host = m.host();
    snapshot(&Cx::new(&host, &layout, true), &draft(), &mut g).unwrap();
    let t = &g.threads[0];
    assert_eq!(t.affinity, CpuSet::parse_list("0-1").unwrap());
    assert_eq!(t.cgroup.as_deref(), Some("/"));
    assert_eq!(t.attr, Default::default());
    let kinds: Vec<LimitKind> = g.limits.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        vec![LimitKind::RtTime, LimitKind::RtPrio, LimitKind::MemLock]
    );
    assert_eq!(g.limits[2].new.soft, Some(1 << 20));
    assert_eq!(g.irq.as_ref().unwrap().1.trim(), "3");
}

/// Change one step's state behind the daemon's back: `drift` names that
/// step alone, `repair` re-applies it, and the grant verifies again.
#[test]
fn each_drift_is_seen_and_repaired() {
    type Change = fn(&Host);
    let cases: [(&str, Change); 8] = [
        ("cpuset", |h| {
            crate::cgroup::attach(
                h,
                &crate::cgroup::mounts(h).unwrap().layout().unwrap(),
                Path::new("/sys/fs/cgroup/cpuset"),
                PID,
            )
            .unwrap();
            h.set_affinity(PID, &CpuSet::single(1)).unwrap();
        }),
        ("affinity", |h| {
            h.set_affinity(PID, &CpuSet::parse_list("0-1").unwrap())
                .unwrap()
        }),
        ("rlimits", |h| {
            h.set_limit(PID, LimitKind::RtTime, Limit::default())
                .unwrap()
        }),
        ("locked memory", |h| {
            let low = Limit {
                soft: Some(4096),
                hard: Some(4096),
            };
            h.set_limit(PID, LimitKind::MemLock, low).unwrap()
        }),
        ("IRQ", |h| crate::irq::write_raw_mask(h, IRQ, "3").unwrap()),
        ("I/O priority", |h| h.set_ioprio(PID, 0).unwrap()),
        ("cache group", |h| {
            h.write(format!("{RESCTRL_GROUP}/tasks"), "").unwrap()
        }),
        ("scheduling attributes", |h| {
            h.set_attr(PID, &SchedAttr::default()).unwrap()
        }),
    ];
    // Every step but the early deadline one (`SchedAttrs` verifies the policy).
    assert_eq!(cases.len(), STEPS.len() - 1);
    for (name, change) in cases {
        let (m, layout, mut g) = machine();
        let host = m.host();
        let cx = Cx::new(&host, &layout, true);
        snapshot(&cx, &draft(), &mut g).unwrap();
        apply(&cx, &g).unwrap();
        assert_eq!(
            drift(&cx, &g),
            vec![],
            "{name}: drift right after the grant"
        );
        let granted = state(&host);
        change(&host);
        let drifted = drift(&cx, &g);
        let mut steps: Vec<&str> = drifted.iter().map(|d| d.knob).collect();
        steps.dedup();
        assert_eq!(steps, vec![name], "{drifted:?}");
        assert!(repair(&cx, &g, &drifted).is_empty(), "{name}");
        assert_eq!(drift(&cx, &g), vec![], "{name}: drift after repair");
        assert_eq!(state(&host), granted, "{name}");
        assert!(step(name).verify(&On { cx: &cx, g: &g }).is_empty());
    }
}

/// Without CAP_SYS_RESOURCE the kernel raises no hard limit, and a limit
/// set soft-only is as granted; with it, the same limit has drifted.
#[test]
fn a_limit_the_kernel_let_be_raised_soft_only_is_as_granted() {
    let (m, layout, mut g) = machine();
    let host = m.host();
    let cx = Cx::new(&host, &layout, true);
    snapshot(&cx, &draft(), &mut g).unwrap();
    apply(&cx, &g).unwrap();
    // RLIMIT_MEMLOCK was 64 KiB soft and hard: soft-only, nothing rises.
    let soft_only = Limit {
        soft: Some(65536),
        hard: Some(65536),
    };
    host.set_limit(PID, LimitKind::MemLock, soft_only).unwrap();
    let memory = step("locked memory");
    let whats = |d: Vec<crate::drift::Drift>| d.into_iter().map(|d| d.what).collect::<Vec<_>>();
    assert_eq!(
        whats(memory.verify(&On { cx: &cx, g: &g })),
        vec![format!("process {PID} MemLock")]
    );
    std::fs::create_dir_all(host.path("/proc/self")).unwrap();
    let no_sys_resource = "Name:\trtmgr\nCapEff:\t000001fffeffffff\n";
    host.write("/proc/self/status", no_sys_resource).unwrap();
    assert!(memory.verify(&On { cx: &cx, g: &g }).is_empty());
}

/// The whole pipeline: granted, then revoked in two halves (policy, then
/// placement a period later) — the machine is as before.
#[test]
fn grant_then_revoke_in_two_halves_leaves_the_machine_as_it_was() {
    let (m, layout, mut g) = machine();
    let host = m.host();
    let cx = Cx::new(&host, &layout, true);
    snapshot(&cx, &draft(), &mut g).unwrap();
    let before = state(&host);
    apply(&cx, &g).unwrap();
    let attr = host.get_attr(PID).unwrap();
    assert_eq!((attr.policy, attr.priority), (SCHED_FIFO, 10));
    assert_eq!(host.get_affinity(PID).unwrap(), CpuSet::single(1));
    assert!(revoke_policy(&cx, &g).is_empty());
    assert_eq!(host.get_attr(PID).unwrap(), SchedAttr::default());
    assert_eq!(host.get_affinity(PID).unwrap(), CpuSet::single(1));
    assert!(revoke_placement(&cx, &g).is_empty());
    assert_eq!(state(&host), before);
}

/// A later grant of the same process carries the limits: it neither sets
/// nor restores them.
#[test]
fn only_the_process_s_limit_holder_touches_its_limits() {
    let (m, layout, mut g) = machine();
    let host = m.host();
    snapshot(&Cx::new(&host, &layout, true), &draft(), &mut g).unwrap();
    let before = state(&host);
    let carrier = Cx::new(&host, &layout, false);
    apply(&carrier, &g).unwrap();
    assert_eq!(state(&host)[3..6], before[3..6]);
    apply(&Cx::new(&host, &layout, true), &g).unwrap();
    let limited = state(&host);
    assert!(revoke(&carrier, &g).is_empty());
    assert_eq!(state(&host)[3..6], limited[3..6]);
}

/// A step that fails undoes the steps done before it (and its own part):
/// here the IRQ is kernel-managed and refuses its new mask.
#[test]
fn a_failed_step_undoes_the_steps_done() {
    let (m, layout, mut g) = machine_whose_irq_refuses();
    apply_fails_and_changes_nothing(&m.host(), &layout, &mut g);
}

/// A grants journal written before the pipeline (the record's form is
/// unchanged) is read and revoked through it: an upgraded daemon re-adopts
/// or gives back its predecessor's grants.
#[test]
fn a_journalled_grant_of_the_previous_form_is_revoked() {
    let (m, layout, mut g) = machine();
    let host = m.host();
    let cx = Cx::new(&host, &layout, true);
    snapshot(&cx, &draft(), &mut g).unwrap();
    let before = state(&host);
    apply(&cx, &g).unwrap();
    let start = g.pid_start;
    let line = format!(
        r#"{{"op":"grant","id":7,"pid":500,"pid_start":{start},"uid":1000,"name":null,"cpu":1,"class":"rt1:10","demand":{demand},"threads":[{{"tid":500,"start_time":{start},"attr":{{"policy":0,"flags":0,"nice":0,"priority":0,"runtime":0,"deadline":0,"period":0}},"affinity":"0-1","cgroup":"/"}}],"limits":[{{"kind":"rt_time","old":{{"soft":null,"hard":null}},"new":{{"soft":200000,"hard":400000}}}},{{"kind":"rt_prio","old":{{"soft":null,"hard":null}},"new":{{"soft":10,"hard":10}}}},{{"kind":"mem_lock","old":{{"soft":65536,"hard":65536}},"new":{{"soft":1048576,"hard":1048576}}}}],"irq":[41,"3"],"cgroup":"{RT_SET}","response_ns":0,"resources":{{"memlock_bytes":1048576,"ioprio":[{{"tid":500,"start_time":{start},"old":0,"new":{io}}}],"cache_group":"{RESCTRL_GROUP}"}}}}"#,
        demand = serde_json::to_string(&g.demand).unwrap(),
        io = g.resources.ioprio[0].new,
    );
    let path = Path::new("/run/rtmgr/grants.jsonl");
    std::fs::create_dir_all(host.path("/run/rtmgr")).unwrap();
    std::fs::write(host.path(path), line + "\n").unwrap();
    let st = journal::read(&host, path).unwrap().unwrap();
    // That form has no cpuset CPUs: its affinity is written back as it was.
    let mut old_form = g.clone();
    old_form.threads[0].cpuset_cpus = None;
    assert_eq!(st.live, vec![old_form]);
    assert_eq!(drift(&cx, &st.live[0]), vec![]);
    assert!(revoke(&cx, &st.live[0]).is_empty());
    assert_eq!(state(&host), before);
}

/// A grant is quick (applied on the loop) only when no step moves a thread
/// between cgroups: a thread already in the grant's cpuset, no IRQ, no
/// cache group.
#[test]
fn only_a_grant_that_moves_no_thread_between_cgroups_is_quick() {
    let (m, layout, mut g) = machine();
    let host = m.host();
    let mut cx = Cx::new(&host, &layout, true);
    cx.fresh = vec![PID];
    snapshot(&cx, &draft(), &mut g).unwrap();
    let (irq, cache) = (g.irq.take(), g.resources.cache_group.take());
    assert!(!quick(&cx, &g), "the thread still to join the RT cpuset");
    apply(&cx, &g).unwrap();
    // Taken over by a new grant: not fresh, in the cpuset already.
    cx.fresh.clear();
    assert!(quick(&cx, &g));
    each_makes_it_slow(&mut g, irq, cache, |g| quick(&cx, g));
    // Fresh, and found elsewhere by the snapshot: the cpuset step moves it.
    cx.fresh = vec![PID];
    assert!(!quick(&cx, &g));
}

/// Its placement goes back on the loop only when no thread is left to move
/// back into its cpuset, and no IRQ or cache group goes back.
#[test]
fn only_a_placement_with_no_thread_to_move_back_is_quick_to_undo() {
    let (_m, layout, mut g) = machine();
    let (irq, cache) = (g.irq.take(), g.resources.cache_group.take());
    assert!(!quick_to_undo(&layout, &g), "its thread goes back");
    let thread = g.threads.pop().unwrap();
    assert!(quick_to_undo(&layout, &g), "taken over by a later grant");
    each_makes_it_slow(&mut g, irq, cache, |g| quick_to_undo(&layout, g));
    g.threads.push(thread);
    g.cgroup = None;
    assert!(quick_to_undo(&layout, &g), "no cpuset to leave");
}

/// With `irq` alone, then `cache` alone, the grant is not `quick` any more;
/// it is left with neither.
fn each_makes_it_slow(
    g: &mut Grant,
    irq: Option<(u32, String)>,
    cache: Option<PathBuf>,
    quick: impl Fn(&Grant) -> bool,
) {
    g.irq = irq;
    assert!(!quick(g), "an IRQ to steer");
    g.irq = None;
    g.resources.cache_group = cache;
    assert!(!quick(g), "a cache group");
    g.resources.cache_group = None;
}
