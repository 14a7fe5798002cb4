//! The resources against fake trees: v1 memory and blkio hierarchies with
//! NRT cgroups, /proc/meminfo, ioprio kept beside each fake task.

use super::*;
use crate::fake::FakeMachine;
use rtmgr_core::protocol::ReserveRequest;

const GIB: u64 = 1 << 30;

/// A 2-CPU fake with v1 memory and blkio hierarchies holding two NRT
/// cgroups, 8 GiB available of 16.
pub(crate) fn machine() -> FakeMachine {
    let m = FakeMachine::new(2).task(100, "client").build();
    let w = |p: &str, s: &str| put(&m, p, s);
    let mi = std::fs::read_to_string(m.root().join("proc/self/mountinfo")).unwrap();
    w(
        "/proc/self/mountinfo",
        &format!(
            "{mi}35 25 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
             38 25 0:35 / /sys/fs/cgroup/blkio rw - cgroup cgroup rw,blkio\n"
        ),
    );
    w(
        "/proc/meminfo",
        &format!(
            "MemTotal: {} kB\nMemAvailable: {} kB\n",
            16 * GIB / 1024,
            8 * GIB / 1024
        ),
    );
    for cg in ["system.slice", "user.slice"] {
        let mem = format!("/sys/fs/cgroup/memory/{cg}");
        w(&format!("{mem}/cgroup.procs"), "");
        w(
            &format!("{mem}/memory.soft_limit_in_bytes"),
            "9223372036854771712\n",
        );
        w(
            &format!("{mem}/memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        let io = format!("/sys/fs/cgroup/blkio/{cg}");
        w(&format!("{io}/cgroup.procs"), "");
        w(&format!("{io}/blkio.bfq.weight"), "100\n");
    }
    m
}

/// Write a file of the fake tree (machine path), creating its directory.
fn put(m: &FakeMachine, p: &str, s: &str) {
    let path = m.root().join(p.trim_start_matches('/'));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, s).unwrap();
}

/// The resources of `config` started on `m` (RT CPU 1).
fn started(m: &FakeMachine, config: &str) -> (crate::Host, Resources) {
    let host = m.host();
    let p = prepare(&host, &cfg(config)).unwrap();
    let jp = partition_journal(&host);
    let r = start(&host, &p, jp, &rtmgr_core::CpuSet::single(1)).unwrap();
    (host, r)
}

/// An empty partition journal for the resource knobs to be journalled in.
pub(crate) fn partition_journal(host: &crate::Host) -> &'static Path {
    let jp = Path::new("/run/rtmgr/journal.jsonl");
    if !host.exists(jp) {
        crate::journal::Journal::create(host, jp).unwrap();
    }
    jp
}

fn cfg(text: &str) -> ResourcesConfig {
    toml::from_str(text).unwrap()
}

fn read(m: &FakeMachine, p: &str) -> String {
    std::fs::read_to_string(m.root().join(p.trim_start_matches('/')))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn nrt_limits_are_journalled_applied_and_restored() {
    let m = machine();
    let host = m.host();
    let p = prepare(&host, &cfg("nrt_memory_limit = \"4G\"\nnrt_io_weight = 50")).unwrap();
    let jp = partition_journal(&host);
    let r = start(&host, &p, jp, &rtmgr_core::CpuSet::single(1)).unwrap();
    let soft = "/sys/fs/cgroup/memory/user.slice/memory.soft_limit_in_bytes";
    assert_eq!(read(&m, soft), (4 * GIB).to_string());
    assert_eq!(
        read(&m, "/sys/fs/cgroup/blkio/system.slice/blkio.bfq.weight"),
        "50"
    );
    assert!(
        r.status["nrt_memory"].contains("system.slice, user.slice"),
        "{:?}",
        r.status
    );
    assert!(r.status["memlock"].contains("4 GiB"), "{:?}", r.status);
    // kill -9 here: the next start undoes the leftovers before it applies.
    let again = start(&host, &p, jp, &rtmgr_core::CpuSet::single(1)).unwrap();
    assert_eq!(again.status, r.status);
    assert!(knobs::undo(&host, jp).unwrap().is_empty());
    assert_eq!(read(&m, soft), "9223372036854771712");
    assert_eq!(
        read(&m, "/sys/fs/cgroup/blkio/user.slice/blkio.bfq.weight"),
        "100"
    );
}

#[test]
fn bad_or_impossible_configs_are_refused_before_anything_changes() {
    let m = machine();
    let host = m.host();
    for bad in [
        "nrt_memory_limit = \"32G\"",
        "nrt_cgroups = [\"missing.slice\"]\nnrt_memory_limit = \"1G\"",
        "memlock_share = 0",
    ] {
        assert!(prepare(&host, &cfg(bad)).is_err(), "{bad}");
    }
    assert_eq!(
        read(
            &m,
            "/sys/fs/cgroup/memory/system.slice/memory.soft_limit_in_bytes"
        ),
        "9223372036854771712"
    );
    // No NRT cgroup to hold: said, not an error.
    let bare = FakeMachine::new(2).build();
    let p = prepare(
        &bare.host(),
        &cfg("nrt_memory_limit = \"1G\"\nnrt_io_weight = 10"),
    )
    .unwrap();
    let r = start(
        &bare.host(),
        &p,
        partition_journal(&bare.host()),
        &rtmgr_core::CpuSet::single(1),
    )
    .unwrap();
    assert!(
        r.status["nrt_memory"].contains("not available"),
        "{:?}",
        r.status
    );
    assert!(
        r.status["nrt_io_weight"].contains("not available"),
        "{:?}",
        r.status
    );
}

#[test]
fn a_grant_gets_its_memory_counted_and_rt_io() {
    let m = machine();
    let (host, r) = started(&m, "");
    let mut req = ReserveRequest::new(10_000_000, 1_000_000);
    req.memlock_bytes = Some(GIB);
    let v = req.validate().unwrap();
    let threads = [(100, 1100)];
    let g = r.for_request(&host, &v, &threads, 2 * GIB, 0).unwrap();
    assert_eq!(g.memlock_bytes, GIB);
    assert_eq!(g.io_label().as_deref(), Some("rt:4"));
    let rt4 = ioprio::value(ioprio::CLASS_RT, 4);
    assert_eq!(
        g.ioprio,
        vec![grant::IoprioChange {
            tid: 100,
            start_time: 1100,
            old: 0,
            new: rt4
        }]
    );
    // A thread already at that class is left out.
    host.set_ioprio(100, rt4).unwrap();
    let g = r.for_request(&host, &v, &threads, 2 * GIB, 0).unwrap();
    assert!(g.ioprio.is_empty(), "{:?}", g.ioprio);
    // 4 GiB may be locked in all (half of 8): 3.5 held leaves 0.5.
    let refused = r
        .for_request(&host, &v, &threads, 2 * GIB, 7 * GIB / 2)
        .unwrap_err();
    let text = refused.to_line();
    assert!(
        text.contains("\"resource\"") && text.contains("at most 512 MiB"),
        "{text}"
    );
    // More than the client's rule allows: a policy refusal.
    let refused = r.for_request(&host, &v, &threads, GIB / 2, 0).unwrap_err();
    assert!(
        refused.to_line().contains("\"policy\""),
        "{}",
        refused.to_line()
    );
    // A request for best effort.
    req.memlock_bytes = None;
    req.io_class = Some("be".into());
    let g = r
        .for_request(&host, &req.validate().unwrap(), &threads, 0, 0)
        .unwrap();
    assert_eq!(g.io_label().as_deref(), Some("be:4"));
}

/// A fake resctrl tree: one L3 domain of 20 ways, all in the default group.
fn with_resctrl(m: &FakeMachine) {
    let w = |p: &str, s: &str| put(m, p, s);
    w("/sys/fs/resctrl/schemata", "    MB:0=100\n    L3:0=fffff\n");
    w("/sys/fs/resctrl/tasks", "");
    w("/sys/fs/resctrl/cpus_list", "0-1\n");
    w("/sys/fs/resctrl/info/L3/cbm_mask", "fffff\n");
    w("/sys/fs/resctrl/info/L3/min_cbm_bits", "1\n");
}

#[test]
fn the_cache_split_gives_rt_cpus_and_clients_their_ways_and_goes_back() {
    let m = machine();
    with_resctrl(&m);
    let host = m.host();
    let p = prepare(&host, &cfg("rt_cache_share = 0.5")).unwrap();
    let jp = partition_journal(&host);
    let r = start(&host, &p, jp, &rtmgr_core::CpuSet::single(1)).unwrap();
    assert!(
        r.status["cache"].contains("10 of 20 ways"),
        "{:?}",
        r.status
    );
    assert_eq!(read(&m, "/sys/fs/resctrl/schemata"), "L3:0=3ff");
    assert_eq!(read(&m, "/sys/fs/resctrl/rtmgr-rt/schemata"), "L3:0=ffc00");
    assert_eq!(read(&m, "/sys/fs/resctrl/rtmgr-rt/cpus_list"), "1");
    let mut req = ReserveRequest::new(10_000_000, 1_000_000);
    req.cache_share = Some(0.75);
    let threads = [(100, 1100)];
    let no = r
        .for_request(&host, &req.validate().unwrap(), &threads, 0, 0)
        .unwrap_err();
    assert!(
        no.to_line().contains("the RT side has 50 %"),
        "{}",
        no.to_line()
    );
    req.cache_share = Some(0.25);
    let g = r
        .for_request(&host, &req.validate().unwrap(), &threads, 0, 0)
        .unwrap();
    assert_eq!(
        g.cache_group.as_deref(),
        Some(Path::new("/sys/fs/resctrl/rtmgr-rt"))
    );
    // Another group of that name at start: refused before anything changes.
    assert!(prepare(&host, &cfg("rt_cache_share = 0.5")).is_err());
    assert!(knobs::undo(&host, jp).unwrap().is_empty());
    assert!(!host.exists("/sys/fs/resctrl/rtmgr-rt"));
    assert_eq!(
        read(&m, "/sys/fs/resctrl/schemata"),
        "MB:0=100\n    L3:0=fffff"
    );
}

#[test]
fn without_resctrl_the_cache_is_said_not_available() {
    let m = machine();
    let (host, r) = started(&m, "rt_cache_share = 0.5");
    assert!(
        r.status["cache"].starts_with("not available: no /sys/fs/resctrl"),
        "{:?}",
        r.status
    );
    let mut req = ReserveRequest::new(10_000_000, 1_000_000);
    req.cache_share = Some(0.25);
    let g = r
        .for_request(&host, &req.validate().unwrap(), &[(100, 1100)], 0, 0)
        .unwrap();
    assert!(g.cache_group.is_none());
    assert!(g.cache_note.unwrap().starts_with("not available"));
}

#[test]
fn nrt_memory_and_io_weight_are_knobs_verified_repaired_and_reset_with_the_partition() {
    let m = machine();
    let host = m.host();
    let cfg_p = rtmgr_core::partition::PartitionConfig::from_toml("rt_cpus = \"1\"").unwrap();
    let plan = rtmgr_core::partition::validate(&cfg_p, None, &crate::cpus::online(&host).unwrap())
        .unwrap();
    let opts = crate::partition::ApplyOptions::default();
    let (applied, _) = crate::partition::apply(&host, &plan, &opts).unwrap();
    let p = prepare(&host, &cfg("nrt_memory_limit = \"4G\"\nnrt_io_weight = 50")).unwrap();
    let r = start(&host, &p, &applied.journal, &plan.rt).unwrap();
    let jp = &applied.journal;
    assert!(knobs::verify(&host, jp, &r.held).unwrap().is_empty());
    let soft = "/sys/fs/cgroup/memory/user.slice/memory.soft_limit_in_bytes";
    let weight = "/sys/fs/cgroup/blkio/system.slice/blkio.bfq.weight";
    put(&m, soft, "9223372036854771712\n");
    put(&m, weight, "100\n");
    let drift = knobs::verify(&host, jp, &r.held).unwrap();
    let mut kinds: Vec<&str> = drift.iter().map(|d| d.knob).collect();
    kinds.sort();
    assert_eq!(kinds, ["nrt_io_weight", "nrt_memory"], "{drift:?}");
    let mut done = knobs::repair(&host, jp, &drift).unwrap();
    done.sort();
    assert_eq!(done, vec![("nrt_io_weight", 1), ("nrt_memory", 1)]);
    assert_eq!(read(&m, soft), (4 * GIB).to_string());
    assert_eq!(read(&m, weight), "50");
    assert!(knobs::verify(&host, jp, &r.held).unwrap().is_empty());
    // One journal, one reader: the partition's reset gives the resources back.
    crate::partition::reset(&host, jp).unwrap();
    assert_eq!(read(&m, soft), "9223372036854771712");
    assert_eq!(read(&m, weight), "100");
    assert!(!host.exists(jp));
    assert!(!host.exists("/sys/fs/cgroup/cpuset/rtmgr-rt"));
}

#[test]
fn the_cache_split_is_a_knob_its_schemata_and_cpus_verified_and_repaired() {
    let m = machine();
    with_resctrl(&m);
    let host = m.host();
    let p = prepare(&host, &cfg("rt_cache_share = 0.5")).unwrap();
    let jp = partition_journal(&host);
    let r = start(&host, &p, jp, &rtmgr_core::CpuSet::single(1)).unwrap();
    assert!(knobs::verify(&host, jp, &r.held).unwrap().is_empty());
    // The kernel shows other resources and pads the masks: still held.
    put(
        &m,
        "/sys/fs/resctrl/schemata",
        "    MB:0=100\n    L3:0=003ff\n",
    );
    assert!(knobs::verify(&host, jp, &r.held).unwrap().is_empty());
    put(
        &m,
        "/sys/fs/resctrl/schemata",
        "    MB:0=100\n    L3:0=fffff\n",
    );
    put(&m, "/sys/fs/resctrl/rtmgr-rt/cpus_list", "0-1\n");
    let drift = knobs::verify(&host, jp, &r.held).unwrap();
    assert_eq!(drift.len(), 2, "{drift:?}");
    assert_eq!(
        knobs::repair(&host, jp, &drift).unwrap(),
        vec![("cache", 2)]
    );
    assert_eq!(read(&m, "/sys/fs/resctrl/schemata"), "L3:0=3ff");
    assert_eq!(read(&m, "/sys/fs/resctrl/rtmgr-rt/cpus_list"), "1");
    assert!(knobs::undo(&host, jp).unwrap().is_empty());
    assert!(!host.exists("/sys/fs/resctrl/rtmgr-rt"));
    assert_eq!(
        read(&m, "/sys/fs/resctrl/schemata"),
        "MB:0=100\n    L3:0=fffff"
    );
}

/// What an older rtmgr's daemon left in its resources.jsonl when it was
/// killed: a limit set, the resctrl group made, a kernel thread boosted.
fn legacy_leftovers(m: &FakeMachine) -> &'static str {
    let soft = "/sys/fs/cgroup/memory/user.slice/memory.soft_limit_in_bytes";
    put(m, soft, "4294967296\n");
    with_resctrl(m);
    put(m, "/sys/fs/resctrl/rtmgr-rt/schemata", "L3:0=ffc00\n");
    std::fs::remove_file(m.root().join("sys/fs/resctrl/rtmgr-rt/schemata")).unwrap();
    put(
        m,
        "/run/rtmgr/resources.jsonl",
        &format!(
            "{{\"op\":\"file\",\"path\":\"{soft}\",\"old\":\"9223372036854771712\"}}\n\
             {{\"op\":\"dir\",\"path\":\"/sys/fs/resctrl/rtmgr-rt\"}}\n\
             {{\"op\":\"boost\",\"tid\":100,\"start_time\":1100,\"old\":{{\"policy\":0,\"flags\":0,\"nice\":5,\"priority\":0,\"runtime\":0,\"deadline\":0,\"period\":0}}}}\n"
        ),
    );
    soft
}

#[test]
fn an_older_rtmgr_s_resources_jsonl_is_restored_at_start_and_at_reset() {
    for at_start in [true, false] {
        let m = machine();
        let host = m.host();
        let soft = legacy_leftovers(&m);
        let jp = partition_journal(&host);
        if at_start {
            let p = prepare(&host, &cfg("")).unwrap();
            start(&host, &p, jp, &rtmgr_core::CpuSet::single(1)).unwrap();
        } else {
            assert!(restore_beside(&host, jp).unwrap().is_empty());
        }
        assert_eq!(read(&m, soft), "9223372036854771712", "at start {at_start}");
        assert!(!host.exists("/sys/fs/resctrl/rtmgr-rt"));
        assert!(!host.exists("/run/rtmgr/resources.jsonl"));
    }
}

#[test]
fn a_boost_left_in_the_partition_journal_is_put_back_once() {
    let m = machine();
    let host = m.host();
    let jp = partition_journal(&host);
    let mut j = crate::journal::Journal::append_to(&host, jp).unwrap();
    let boost = crate::journal::Record::Boost {
        tid: 100,
        start_time: 1100,
        old: Default::default(),
    };
    j.record(&boost).unwrap();
    let records = || crate::journal::read(&host, jp).unwrap().unwrap();
    let src = crate::resource_records::Source::PartitionJournal;
    assert_eq!(
        crate::resource_records::undo(&host, &records(), src).unboosted,
        [100]
    );
    // A new daemon puts it back at start and says so in the journal ...
    assert!(knobs::undo(&host, jp).unwrap().is_empty());
    assert!(records().contains(&crate::journal::Record::Unboost { tid: 100 }));
    // ... so reset does not put it back a second time.
    assert!(crate::resource_records::undo(&host, &records(), src)
        .unboosted
        .is_empty());
}

/// A thread boosted, put back, and boosted again (starved again) before a
/// `kill -9`: its last boost is put back, to what it had before that one.
#[test]
fn a_boost_after_an_unboost_of_the_same_thread_is_put_back() {
    use crate::journal::Record;
    let m = machine();
    let host = m.host();
    let jp = partition_journal(&host);
    let mut j = crate::journal::Journal::append_to(&host, jp).unwrap();
    let old = |nice| rtmgr_sys::sched::SchedAttr {
        nice,
        ..Default::default()
    };
    for r in [
        Record::Boost {
            tid: 100,
            start_time: 1100,
            old: old(1),
        },
        Record::Unboost { tid: 100 },
        Record::Boost {
            tid: 100,
            start_time: 1100,
            old: old(2),
        },
    ] {
        j.record(&r).unwrap();
    }
    let records = crate::journal::read(&host, jp).unwrap().unwrap();
    let src = crate::resource_records::Source::PartitionJournal;
    let undone = crate::resource_records::undo(&host, &records, src);
    assert_eq!(undone.unboosted, [100]);
    assert_eq!(host.get_attr(100).unwrap(), old(2));
}

/// The partition journal's directories at reset: a knob's (the cache
/// group) goes with its step's undo, one naming no knob (an older rtmgr's)
/// with the records' pass, and each only once.
#[test]
fn a_knob_s_directory_and_an_older_one_are_both_removed_at_reset() {
    use crate::journal::Record;
    let m = machine();
    let host = m.host();
    let jp = partition_journal(&host);
    let mut j = crate::journal::Journal::append_to(&host, jp).unwrap();
    let (mine, older) = ("/sys/fs/resctrl/rtmgr-rt", "/sys/fs/resctrl/rtmgr-old");
    for (dir, knob) in [(mine, Some("cache".to_string())), (older, None)] {
        j.record(&Record::Dir {
            path: dir.into(),
            knob,
        })
        .unwrap();
        std::fs::create_dir_all(host.path(dir)).unwrap();
    }
    let records = crate::journal::read(&host, jp).unwrap().unwrap();
    let undone = knobs::undo_records(&host, &records);
    assert!(undone.problems.is_empty(), "{:?}", undone.problems);
    assert!(!host.exists(mine) && !host.exists(older));
    // Run again (a reset after a partial one): nothing left, nothing said.
    assert!(knobs::undo_records(&host, &records).problems.is_empty());
}
