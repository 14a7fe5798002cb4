//! The live balancer's changes in the partition journal (ARTiS §2.1–2.3
//! from user space, under docs/architecture.md's rule that every change is
//! journalled first and undone exactly, also after a `kill -9`): the `Lend`
//! record written before a task is lent or held, giving a task back (shared
//! by the mover and by the undo of a dead run's lends), and that undo, run by
//! `partition reset`, the daemon's start and the balancer's start.

use crate::cgroup::{self, Layout};
use crate::host::{Host, HostError};
use crate::journal::{self, Durability, Journal, Lent, Record};
use crate::tasks;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The mover's appender to the partition journal. A task's `Lend` stays
/// outstanding from its first lend in a run until the run ends (or the task
/// is found gone), and a lend with the same before-state is not journalled
/// again: the journal grows by one record per task and run, not per lend
/// (the daemon reads the partition journal at every reconcile, and a busy
/// machine sees lends every second). The cost: after a `kill -9`, a task lent
/// earlier in the run and given back before the kill is given back again —
/// to what it was given back to, so only a change it made itself since is
/// overwritten.
pub(crate) struct LendJournal {
    j: Journal,
    outstanding: BTreeMap<u32, Lent>,
}

impl LendJournal {
    pub fn open(host: &Host, partition_journal: &Path) -> Result<Self, HostError> {
        Ok(LendJournal {
            j: Journal::append_to(host, partition_journal)?,
            outstanding: BTreeMap::new(),
        })
    }

    /// Before the task is changed. Only written (page cache), not synced: a
    /// `kill -9` of the balancer leaves the record for any later reader of
    /// the same cache, and after the machine itself went down no task of the
    /// lend is left to give back. A sync (1–10 ms on a virtio disk) on every
    /// lend would stretch the balancer's step for nothing.
    pub fn lend(&mut self, lent: &Lent) -> Result<(), HostError> {
        if self.outstanding.get(&lent.tid) == Some(lent) {
            return Ok(());
        }
        self.j
            .record_with(&Record::Lend(lent.clone()), Durability::Written)?;
        self.outstanding.insert(lent.tid, lent.clone());
        Ok(())
    }

    /// The task was given back for good (the run ends) or is gone. A record
    /// that cannot be written only makes reset give the task back once more.
    pub fn given_back(&mut self, tid: u32) {
        if self.outstanding.remove(&tid).is_none() {
            return;
        }
        if let Err(e) = self
            .j
            .record_with(&Record::GivenBack { tid }, Durability::Written)
        {
            tracing::warn!("balance: task {tid} given back, not journalled: {e}");
        }
    }

    /// The run ends: every task but `kept` (not given back) is settled.
    pub fn given_back_all_but(&mut self, kept: &[u32]) {
        let tids: Vec<u32> = self.outstanding.keys().copied().collect();
        for tid in tids.into_iter().filter(|t| !kept.contains(t)) {
            self.given_back(tid);
        }
    }
}

/// Give `lent.tid` back what it had before the balancer changed it: its
/// policy, its affinity (`cgroup::mask_to_give_back`) and its cpuset. Nothing
/// when the task is gone (its tid reused: another start time): false then.
pub(crate) fn give_back(host: &Host, layout: &Layout, lent: &Lent) -> Result<bool, HostError> {
    let tid = lent.tid;
    if !tasks::same_task(host, tid, lent.start_time) {
        return Ok(false);
    }
    let policy = match lent.policy {
        Some(p) => host.set_policy(tid, p),
        None => Ok(()),
    };
    // The cpuset first: on v1 an attach sets the task's affinity to the
    // cpuset's CPUs, which would undo an affinity narrower than them.
    let cg = match &lent.cgroup {
        Some(dir) => cgroup::attach(host, layout, dir, tid),
        None => Ok(()),
    };
    let mask = cgroup::mask_to_give_back(host, &lent.affinity, lent.cpuset_cpus.as_ref());
    let aff = host.set_affinity(tid, &mask);
    ignore_gone(policy.and(cg).and(aff)).map(|()| true)
}

pub(super) fn ignore_gone(r: Result<(), HostError>) -> Result<(), HostError> {
    match r {
        Err(e) if !e.is_gone() => Err(e),
        _ => Ok(()),
    }
}

/// What undoing a journal's lends left.
#[derive(Debug, Default)]
pub struct Returned {
    pub problems: Vec<String>,
    /// Tasks given back (or gone): journal `GivenBack` for them when the
    /// journal is kept.
    pub given_back: Vec<u32>,
}

/// Give back every task a balancer lent and did not settle, newest record
/// first: a task's newest `Lend` holds what it had before the balancer last
/// changed it, and a `GivenBack` settles the records of its tid before it.
pub fn undo(host: &Host, records: &[Record]) -> Returned {
    let mut out = Returned::default();
    let Some(layout) = records.iter().find_map(|r| match r {
        Record::Begin { layout, .. } => Some(layout),
        _ => None,
    }) else {
        return out;
    };
    let mut settled = BTreeSet::new();
    for r in records.iter().rev() {
        match r {
            Record::GivenBack { tid } => {
                settled.insert(*tid);
            }
            Record::Lend(lent) if settled.insert(lent.tid) => match give_back(host, layout, lent) {
                Ok(_) => out.given_back.push(lent.tid),
                Err(e) => out
                    .problems
                    .push(format!("task {} lent by the balancer: {e}", lent.tid)),
            },
            _ => {}
        }
    }
    out
}

/// At a balancer's start: give back what a dead run lent (`kill -9`) and
/// journal it given back. Returns what could not be given back.
pub fn recover(host: &Host, partition_journal: &Path) -> Result<Vec<String>, HostError> {
    let Some(records) = journal::read(host, partition_journal)? else {
        return Ok(Vec::new());
    };
    let out = undo(host, &records);
    if !out.given_back.is_empty() {
        let mut j = Journal::append_to(host, partition_journal)?;
        for tid in out.given_back {
            j.record_with(&Record::GivenBack { tid }, Durability::Written)?;
        }
    }
    Ok(out.problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::Mover;
    use crate::fake::FakeMachine;
    use crate::partition::{Applied, ApplyOptions};
    use crate::resource_records::{self, Source};
    use crate::sched::Policy;
    use rtmgr_core::class::TaskClass;
    use rtmgr_core::partition::{validate, PartitionConfig};
    use rtmgr_core::CpuSet;

    const GUEST: u32 = 500;
    /// The fake tree's start time of task `GUEST`.
    const START: u64 = 1500;

    /// A fake v1 machine of 4 CPUs with CPU 3 the RT CPU, and a guest task.
    fn lab() -> (FakeMachine, Host, Applied) {
        let m = FakeMachine::new(4).task(GUEST, "guest").build();
        let host = m.host();
        let online = crate::cpus::online(&host).unwrap();
        let cfg = PartitionConfig::default();
        let plan = validate(&cfg, Some(&CpuSet::single(3)), &online).unwrap();
        let opts = ApplyOptions {
            journal: "/run/rtmgr/journal.jsonl".into(),
            replace: false,
        };
        let (applied, _) = crate::partition::apply(&host, &plan, &opts).unwrap();
        (m, host, applied)
    }

    fn records(host: &Host, a: &Applied) -> Vec<Record> {
        journal::read(host, &a.journal).unwrap().unwrap()
    }

    /// (affinity, cpuset cgroup, policy) of a task.
    fn state(host: &Host, a: &Applied, tid: u32) -> (String, Option<String>, Policy) {
        (
            host.get_affinity(tid).unwrap().to_list(),
            cgroup::task_cgroup(host, &a.layout, tid),
            host.get_policy(tid).unwrap(),
        )
    }

    /// What a task of `before` has when given back: its cpuset and policy,
    /// and (it had all its cpuset allows) every possible CPU written back as
    /// its affinity (`cgroup::mask_to_give_back`; the kernel keeps it to the
    /// cpuset's CPUs, the fake tree shows what was written).
    fn given_back(before: &(String, Option<String>, Policy)) -> (String, Option<String>, Policy) {
        assert_eq!(before.0, "0-2", "the NRT cpuset's CPUs");
        ("0-3".into(), before.1.clone(), before.2)
    }

    /// A lend the mover makes, and the mover dropped without giving it back
    /// (as a `kill -9` of the balancer leaves it).
    fn lend_and_die(host: &Host, a: &Applied) {
        let mut mover = Mover::new(host, a).unwrap();
        mover.to_rt(GUEST, 3, START, TaskClass::Linux).unwrap();
        std::mem::forget(mover);
    }

    #[test]
    fn a_lend_is_journalled_with_what_the_task_had_and_given_back_at_the_runs_end() {
        let (_m, host, a) = lab();
        let before = state(&host, &a, GUEST);
        assert_eq!(before.0, "0-2");
        let mut mover = Mover::new(&host, &a).unwrap();
        mover.to_rt(GUEST, 3, START, TaskClass::Linux).unwrap();
        assert_eq!(state(&host, &a, GUEST).0, "3");
        assert_eq!(state(&host, &a, GUEST).2, Policy::Idle);
        let Some(Record::Lend(lent)) = records(&host, &a).last().cloned() else {
            panic!("no lend journalled: {:?}", records(&host, &a));
        };
        assert_eq!((lent.tid, lent.start_time), (GUEST, START));
        assert_eq!(lent.affinity.to_list(), before.0);
        assert_eq!(lent.policy, Some(before.2));
        assert_eq!(
            lent.cgroup,
            before.1.as_deref().map(|rel| a.layout.dir(rel))
        );
        mover.restore(GUEST).unwrap();
        assert_eq!(state(&host, &a, GUEST), given_back(&before));
        // The kernel keeps the affinity written back to the cpuset's CPUs.
        let nrt = CpuSet::parse_list("0-2").unwrap();
        host.set_affinity(GUEST, &nrt).unwrap();
        // Lent again as it was: its `Lend` stands, nothing more is written.
        let n = records(&host, &a).len();
        mover.to_rt(GUEST, 3, START, TaskClass::Linux).unwrap();
        mover.restore(GUEST).unwrap();
        assert_eq!(records(&host, &a).len(), n);
        // The run ends: it is settled.
        drop(mover);
        assert_eq!(
            records(&host, &a).last(),
            Some(&Record::GivenBack { tid: GUEST })
        );
        let lends = records(&host, &a);
        let lends = lends.iter().filter(|r| matches!(r, Record::Lend(_)));
        assert_eq!(lends.count(), 1);
    }

    #[test]
    fn the_lend_is_journalled_before_a_change_that_then_fails() {
        let (m, host, a) = lab();
        // The kernel refuses the task's affinity change (a per-CPU thread).
        let status = m.root().join(format!("proc/{GUEST}/status"));
        let text = std::fs::read_to_string(&status).unwrap();
        std::fs::write(&status, format!("rtmgr_fake_no_setaffinity:\t1\n{text}")).unwrap();
        let mut mover = Mover::new(&host, &a).unwrap();
        assert!(mover.to_rt(GUEST, 3, START, TaskClass::Linux).is_err());
        // Journalled all the same (its affinity cannot be given back either:
        // no `GivenBack`, reset tries again).
        let recs = records(&host, &a);
        assert!(
            matches!(recs.last(), Some(Record::Lend(l)) if l.tid == GUEST),
            "{recs:?}"
        );
    }

    #[test]
    fn reset_gives_back_a_lend_the_killed_balancer_left() {
        let (_m, host, a) = lab();
        let before = state(&host, &a, GUEST);
        lend_and_die(&host, &a);
        let undone = undo(&host, &records(&host, &a));
        assert!(undone.problems.is_empty(), "{:?}", undone.problems);
        assert_eq!(undone.given_back, [GUEST]);
        assert_eq!(state(&host, &a, GUEST), given_back(&before));
        // And `partition reset` as a whole: the policy too, the journal gone.
        lend_and_die(&host, &a);
        crate::partition::reset(&host, &a.journal).unwrap();
        assert_eq!(host.get_policy(GUEST).unwrap(), Policy::Other { nice: 0 });
        assert_eq!(host.get_affinity(GUEST).unwrap().to_list(), "0-3");
        assert!(journal::read(&host, &a.journal).unwrap().is_none());
    }

    #[test]
    fn a_task_whose_tid_was_reused_is_not_touched() {
        let (_m, host, a) = lab();
        lend_and_die(&host, &a);
        let mut recs = records(&host, &a);
        for r in recs.iter_mut() {
            if let Record::Lend(l) = r {
                l.start_time += 1; // the lent task exited; another got its tid
            }
        }
        let pinned = state(&host, &a, GUEST);
        let undone = undo(&host, &recs);
        assert!(undone.problems.is_empty(), "{:?}", undone.problems);
        assert_eq!(state(&host, &a, GUEST), pinned);
    }

    #[test]
    fn a_task_given_back_is_not_given_back_again_but_a_later_lend_is() {
        let (_m, host, a) = lab();
        let before = state(&host, &a, GUEST);
        let mut mover = Mover::new(&host, &a).unwrap();
        mover.to_rt(GUEST, 3, START, TaskClass::Linux).unwrap();
        drop(mover); // the run ends
                     // The task moves itself afterwards: not rtmgr's to undo.
        host.set_affinity(GUEST, &CpuSet::single(1)).unwrap();
        assert!(undo(&host, &records(&host, &a)).given_back.is_empty());
        assert_eq!(host.get_affinity(GUEST).unwrap().to_list(), "1");
        // Lent again in the next run, then killed: that lend goes back, to
        // what it had then.
        let mut mover = Mover::new(&host, &a).unwrap();
        mover.to_rt(GUEST, 3, START, TaskClass::Linux).unwrap();
        std::mem::forget(mover);
        // The next daemon's start gives it back and journals that ...
        assert!(crate::resources::knobs::undo(&host, &a.journal)
            .unwrap()
            .is_empty());
        assert_eq!(host.get_affinity(GUEST).unwrap().to_list(), "1");
        assert_eq!(host.get_policy(GUEST).unwrap(), before.2);
        // ... so neither reset nor the next balancer gives it back twice.
        let src = Source::PartitionJournal;
        let again = resource_records::undo(&host, &records(&host, &a), src);
        assert!(again.given_back.is_empty());
        assert!(recover(&host, &a.journal).unwrap().is_empty());
    }

    #[test]
    fn a_child_of_a_guest_is_journalled_with_what_its_creator_had() {
        let (m, host, a) = lab();
        let before = state(&host, &a, GUEST);
        let mut mover = Mover::new(&host, &a).unwrap();
        mover.to_rt(GUEST, 3, START, TaskClass::Linux).unwrap();
        // A thread the guest created: it inherited the pinning and SCHED_IDLE.
        let child = GUEST + 1;
        let proc = m.root().join("proc");
        std::fs::create_dir_all(proc.join(format!("{child}/task/{child}"))).unwrap();
        for f in ["stat", "status", "cgroup"] {
            let text = std::fs::read_to_string(proc.join(format!("{GUEST}/{f}"))).unwrap();
            // "500" becomes "501" everywhere: its tid, and start time 1501.
            let text = text.replace(&GUEST.to_string(), &child.to_string());
            std::fs::write(proc.join(format!("{child}/{f}")), text).unwrap();
        }
        host.set_policy(child, Policy::Idle).unwrap();
        let rt = CpuSet::single(3);
        let child_start = 1000 + u64::from(child);
        assert_eq!(
            mover.adopt_child(child, child_start, GUEST, &rt).unwrap(),
            Some(3)
        );
        assert!(records(&host, &a).iter().any(|r| matches!(r,
            Record::Lend(l) if l.tid == child && l.start_time == child_start)));
        std::mem::forget(mover);
        let undone = undo(&host, &records(&host, &a));
        assert!(undone.problems.is_empty(), "{:?}", undone.problems);
        assert_eq!(state(&host, &a, child), given_back(&before));
        assert_eq!(state(&host, &a, GUEST), given_back(&before));
    }

    #[test]
    fn a_journal_of_an_earlier_rtmgr_parses_and_has_no_lend() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        let path = Path::new("/j.jsonl");
        let old = [
            r#"{"op":"file","path":"/proc/irq/default_smp_affinity","old":"f"}"#,
            r#"{"op":"entered","pid":7,"start_time":8,"from":null}"#,
            r#"{"op":"boost","tid":100,"start_time":1100,"old":{"policy":1,"flags":0,"nice":0,"priority":10,"runtime":0,"deadline":0,"period":0}}"#,
            r#"{"op":"unboost","tid":100}"#,
        ];
        std::fs::write(host.path(path), old.join("\n") + "\n").unwrap();
        let recs = journal::read(&host, path).unwrap().unwrap();
        assert_eq!(recs.len(), old.len());
        let undone = undo(&host, &recs);
        assert!(undone.problems.is_empty() && undone.given_back.is_empty());
    }

    /// The form the records are kept in (a journal outlives the rtmgr that wrote it).
    #[test]
    fn lend_records_keep_their_form() {
        let lend = r#"{"op":"lend","tid":5,"start_time":6,"affinity":"0-2","cpuset_cpus":"0-2","cgroup":"/sys/fs/cgroup/cpuset/rtmgr-nrt","policy":{"policy":"other","nice":0}}"#;
        let rec: Record = serde_json::from_str(lend).unwrap();
        assert!(matches!(&rec, Record::Lend(l) if l.policy == Some(Policy::Other { nice: 0 })));
        assert_eq!(serde_json::to_string(&rec).unwrap(), lend);
        let back = r#"{"op":"given_back","tid":5}"#;
        let rec: Record = serde_json::from_str(back).unwrap();
        assert_eq!(rec, Record::GivenBack { tid: 5 });
    }
}
