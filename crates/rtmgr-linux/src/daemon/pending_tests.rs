//! Hard grants whose thread the kernel refuses SCHED_DEADLINE where it
//! waits, on a fake machine whose kernel refuses it on CPU 0's run queue:
//! granted at SCHED_FIFO 1 and pending, SCHED_DEADLINE once the thread is
//! seen on its RT CPU; revoked while pending, the thread gets its own
//! policy back; re-adopted after a restart, it is pending again.

use super::*;
use crate::daemon::grant;
use crate::daemon::grant::tests::waiting_on;
use crate::daemon::manager::Manager;
use crate::daemon::release::regrant_tests::{client, manager, release, PID};
use crate::daemon::startup;
use crate::fake::FakeMachine;
use crate::host::{Host, FAKE_DL_REFUSED};
use rtmgr_core::protocol::{Op, Reply, Request, ReservationInfo, ReserveRequest};
use rtmgr_core::CpuSet;
use rtmgr_sys::sched::{SchedAttr, SCHED_DEADLINE, SCHED_FIFO};

/// The kernel refuses SCHED_DEADLINE with `errno` on these CPUs' run queues.
fn refuse_deadline(host: &Host, errno: i32, cpus: &str) {
    std::fs::create_dir_all(host.path("/proc/self")).unwrap();
    host.write(FAKE_DL_REFUSED, &format!("{errno} {cpus}"))
        .unwrap();
}

/// A hard (rt0) reservation of 1 ms every 10 ms for the client, granted.
pub(crate) fn reserve_hard(d: &mut Manager, m: &FakeMachine) -> ReservationInfo {
    let mut r = ReserveRequest::new(10_000_000, 1_000_000);
    r.class = "rt0".into();
    let resp = d.handle(
        &client(m),
        Request {
            v: 1,
            op: Op::Reserve(r),
        },
    );
    match resp.reply {
        Reply::Granted { reservation } => *reservation,
        other => panic!("not granted: {other:?}"),
    }
}

fn policy(host: &Host) -> (u32, u32) {
    let a = host.get_attr(PID).unwrap();
    (a.policy, a.priority)
}

/// EPERM where the thread waits (CPU 0), before and after its move: the
/// grant succeeds, placed, at SCHED_FIFO 1, listed pending in the reply,
/// `list` and `status`; nothing happens while the thread still waits on
/// CPU 0; once it is on CPU 1's run queue the loop's check sets
/// SCHED_DEADLINE and it is pending no more.
#[test]
fn a_refused_deadline_is_granted_pending_then_set_on_the_rt_cpu() {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let host = m.host();
    waiting_on(&host, PID, 0);
    refuse_deadline(&host, libc::EPERM, "0");
    let mut d = manager(&m);
    assert_eq!(
        d.wake_within_ms(),
        None,
        "an idle daemon waits for its tick"
    );
    let info = reserve_hard(&mut d, &m);
    assert_eq!(info.pending, vec![PID]);
    assert_eq!(policy(&host), (SCHED_FIFO, 1));
    assert_eq!(host.get_affinity(PID).unwrap(), CpuSet::single(1));
    let st = d.status();
    assert_eq!((st.pending_fallbacks, st.pending.len()), (1, 1));
    assert_eq!(
        (st.pending[0].tid, st.pending[0].reason.as_ref()),
        (PID, None)
    );
    assert!(d.grants().all(|g| d.info(g).pending == vec![PID]));
    assert_eq!(d.wake_within_ms(), Some(2));
    // The placeholder is not drift.
    let g = d.grants().next().unwrap().clone();
    let layout = d.applied.layout.clone();
    assert!(grant::drift(&grant::Cx::new(&host, &layout, true), &g).is_empty());
    // Still on CPU 0's run queue: nothing to do.
    assert!(d.finish_pending(10 * EVERY_NS).is_empty());
    assert_eq!(policy(&host), (SCHED_FIFO, 1));
    // It ran on CPU 1.
    waiting_on(&host, PID, 1);
    assert!(
        d.finish_pending(10 * EVERY_NS + 1).is_empty(),
        "looked too soon"
    );
    assert_eq!(d.finish_pending(20 * EVERY_NS), vec![PID]);
    assert_eq!(host.get_attr(PID).unwrap(), grant::granted_attr(&g.demand));
    assert!(d.status().pending.is_empty());
    // Its hard grant is watched for a stranded thread, every 20 ms.
    assert_eq!(d.wake_within_ms(), Some(20));
    assert_eq!(d.status().pending_fallbacks, 1);
}

/// Released while pending: the thread gets its own policy back at once
/// and its placement with the second half, exactly as before the grant.
#[test]
fn a_grant_revoked_while_pending_gives_the_thread_back_exactly() {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let host = m.host();
    waiting_on(&host, PID, 0);
    refuse_deadline(&host, libc::EBUSY, "0");
    let own = SchedAttr {
        nice: 5,
        ..SchedAttr::default()
    };
    host.set_attr(PID, &own).unwrap();
    let affinity = host.get_affinity(PID).unwrap();
    let mut d = manager(&m);
    let info = reserve_hard(&mut d, &m);
    assert_eq!(
        info.pending,
        vec![PID],
        "EBUSY where it waits is pending too"
    );
    release(&mut d, &client(&m), info.id);
    assert_eq!(host.get_attr(PID).unwrap(), own);
    assert!(d.status().pending.is_empty());
    std::thread::sleep(std::time::Duration::from_millis(15));
    d.finish_deferred();
    assert!(d.deferred.is_empty());
    assert_eq!(host.get_affinity(PID).unwrap(), affinity);
    assert_eq!(host.get_attr(PID).unwrap(), own);
}

/// On its RT CPU the kernel still refuses (EBUSY: no bandwidth there): the
/// thread stays at SCHED_FIFO 1, pending with the reason, counted once;
/// when the kernel admits it, it gets SCHED_DEADLINE.
#[test]
fn a_deadline_refused_on_the_rt_cpu_stays_pending_with_a_reason() {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let host = m.host();
    waiting_on(&host, PID, 0);
    refuse_deadline(&host, libc::EPERM, "0");
    let mut d = manager(&m);
    reserve_hard(&mut d, &m);
    waiting_on(&host, PID, 1);
    refuse_deadline(&host, libc::EBUSY, "0-1");
    assert!(d.finish_pending(10 * EVERY_NS).is_empty());
    assert!(d.finish_pending(20 * EVERY_NS).is_empty());
    let st = d.status();
    assert_eq!(st.pending_refused, 1, "counted once, not at every look");
    let reason = st.pending[0].reason.clone().unwrap();
    assert!(reason.contains("EBUSY"), "{reason}");
    assert_eq!(policy(&host), (SCHED_FIFO, 1));
    std::fs::remove_file(host.path(FAKE_DL_REFUSED)).unwrap();
    assert_eq!(d.finish_pending(30 * EVERY_NS), vec![PID]);
    assert_eq!(policy(&host).0, SCHED_DEADLINE);
}

/// A daemon killed with a pending grant: the next one keeps the thread
/// placed at SCHED_FIFO 1 (no drift), pending again, and finishes it.
#[test]
fn a_pending_grant_re_adopted_after_a_restart_is_finished() {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let host = m.host();
    waiting_on(&host, PID, 0);
    refuse_deadline(&host, libc::EPERM, "0");
    let mut d = manager(&m);
    let info = reserve_hard(&mut d, &m);
    // What the next daemon reads from the journal, and its start.
    let g = d.grants.remove(&info.id).unwrap();
    d.pending = Default::default();
    let layout = d.applied.layout.clone();
    let (keep, dropped) = startup::split_live(&host, &layout, vec![g]);
    assert!(dropped.is_empty());
    assert_eq!(policy(&host), (SCHED_FIFO, 1));
    assert_eq!(host.get_affinity(PID).unwrap(), CpuSet::single(1));
    d.adopt(keep.into_iter().next().unwrap());
    assert_eq!(d.status().pending.len(), 1);
    assert_eq!(d.status().pending_fallbacks, 0, "not a new fallback");
    waiting_on(&host, PID, 1);
    assert_eq!(d.finish_pending(10 * EVERY_NS), vec![PID]);
    assert_eq!(policy(&host).0, SCHED_DEADLINE);
}

/// EBUSY on the RT CPU itself at the grant (the kernel's books differ from
/// admission's): granted pending, not refused, and the reason shows at the
/// first look; the thread holds its own policy back after a release.
#[test]
fn a_deadline_refused_on_the_rt_cpu_at_the_grant_is_pending_not_refused() {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let host = m.host();
    waiting_on(&host, PID, 1);
    refuse_deadline(&host, libc::EBUSY, "1");
    let mut d = manager(&m);
    let info = reserve_hard(&mut d, &m);
    assert_eq!(info.pending, vec![PID]);
    assert_eq!(policy(&host), (SCHED_FIFO, 1));
    assert!(d.finish_pending(10 * EVERY_NS).is_empty());
    let st = d.status();
    assert_eq!((st.pending_fallbacks, st.pending_refused), (1, 1));
    assert!(st.pending[0].reason.as_ref().unwrap().contains("EBUSY"));
    release(&mut d, &client(&m), info.id);
    assert_eq!(host.get_attr(PID).unwrap(), SchedAttr::default());
}
