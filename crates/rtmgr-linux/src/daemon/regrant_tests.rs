//! A thread that reserves again within a period of releasing a hard grant,
//! on a fake machine: the new grant takes over the thread's before-state
//! from the grant still being revoked, I/O priority included, and the old
//! grant's second half (`finish_deferred`) does not undo the new grant.
//! And a zombie thread is refused before anything changes.

use super::*;
use crate::daemon::peer::Client;
use crate::daemon::{domains, grants_journal as journal, startup, ServeConfig};
use crate::fake::FakeMachine;
use rtmgr_core::admission::policy::Peer;
use rtmgr_core::admission::AdmissionConfig;
use rtmgr_core::partition::validate;
use rtmgr_core::protocol::{Op, Reply, Request, ReserveRequest};
use rtmgr_sys::ioprio;
use rtmgr_sys::pidfd::PeerCred;

pub(crate) const PID: u32 = 500;
/// What the client's thread had before rtmgr: best effort, level 6.
const OWN_IO: u16 = (2 << 13) | 6;

pub(crate) fn manager(m: &FakeMachine) -> Manager {
    manager_with(m, "rt_cpus = \"1\"")
}

/// A Manager of the fake machine with this daemon config.
pub(crate) fn manager_with(m: &FakeMachine, toml: &str) -> Manager {
    let host = m.host();
    let cfg = ServeConfig::from_toml(toml).unwrap();
    let online = crate::cpus::online(&host).unwrap();
    let plan = validate(&cfg.partition, None, &online).unwrap();
    let (applied, header) = startup::apply_fresh(&host, &cfg, &plan).unwrap();
    let domains = domains::ensure(&host, &applied).unwrap();
    let journal = journal::GrantJournal::open(&host, &cfg.grants_journal()).unwrap();
    let admission = AdmissionConfig {
        cap: cfg.admission.cap,
        dl_share: 0.95,
        placement: cfg.admission.placement,
    };
    Manager::new(
        host,
        applied,
        domains,
        cfg.policy.clone(),
        admission,
        journal,
        header,
        1,
    )
}

pub(crate) fn client(m: &FakeMachine) -> Client {
    let host = m.host();
    Client {
        cred: PeerCred {
            pid: PID,
            uid: 0,
            gid: 0,
        },
        start_time: crate::tasks::info(&host, PID, PID).unwrap().start_time,
        peer: Peer {
            uid: 0,
            user: Some("root".into()),
            groups: vec![(0, Some("root".into()))],
        },
        pidfd: None,
    }
}

fn reserve(d: &mut Manager, c: &Client, class: &str) -> u64 {
    let mut r = ReserveRequest::new(10_000_000, 1_000_000);
    r.class = class.into();
    let resp = d.handle(
        c,
        Request {
            v: 1,
            op: Op::Reserve(r),
        },
    );
    match resp.reply {
        Reply::Granted { reservation } => reservation.id,
        other => panic!("not granted: {other:?}"),
    }
}

pub(crate) fn release(d: &mut Manager, c: &Client, id: u64) {
    let resp = d.handle(
        c,
        Request {
            v: 1,
            op: Op::Release { id },
        },
    );
    assert!(
        matches!(resp.reply, Reply::Released { .. }),
        "{:?}",
        resp.reply
    );
}

/// Reserve, release (the hard grant's placement waits a period), reserve
/// again at once; then the first grant's second half runs; then the second
/// grant goes too. The thread has the grant's I/O class while it holds the
/// second grant, and its own one after.
#[test]
fn a_thread_granted_again_within_a_period_keeps_the_right_io_priority() {
    for second in ["rt0", "rt1:10"] {
        let m = FakeMachine::new(2).task(PID, "client").build();
        let host = m.host();
        host.set_ioprio(PID, OWN_IO).unwrap();
        let mut d = manager(&m);
        // `[resources] io_class = "rt"`: each grant's threads get RT I/O.
        d.resources.cfg.io_class = "rt".into();
        let c = client(&m);
        let rt4 = ioprio::value(ioprio::CLASS_RT, 4);
        let first = reserve(&mut d, &c, "rt0");
        assert_eq!(host.get_ioprio(PID).unwrap(), rt4);
        release(&mut d, &c, first);
        assert_eq!(d.deferred.len(), 1, "a hard grant's placement waits");
        let again = reserve(&mut d, &c, second);
        assert_eq!(host.get_ioprio(PID).unwrap(), rt4, "{second}");
        // The first grant's second half, a period later.
        std::thread::sleep(std::time::Duration::from_millis(15));
        d.finish_deferred();
        assert!(d.deferred.is_empty());
        assert_eq!(
            host.get_ioprio(PID).unwrap(),
            rt4,
            "{second}: the first grant's second half restored its old priority over the new grant"
        );
        release(&mut d, &c, again);
        std::thread::sleep(std::time::Duration::from_millis(15));
        d.finish_deferred();
        assert_eq!(
            host.get_ioprio(PID).unwrap(),
            OWN_IO,
            "{second}: the thread did not get its own priority back"
        );
    }
}

/// A thread in state Z (exited, its process alive) will never run: refused
/// as gone, with why, and nothing reserved.
#[test]
fn a_zombie_thread_is_refused_as_gone() {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let host = m.host();
    let stat = host.read(format!("/proc/{PID}/stat")).unwrap();
    host.write(
        format!("/proc/{PID}/stat"),
        &stat.replacen(") S ", ") Z ", 1),
    )
    .unwrap();
    let mut d = manager(&m);
    let c = client(&m);
    let resp = d.handle(
        &c,
        Request {
            v: 1,
            op: Op::Reserve(ReserveRequest::new(10_000_000, 1_000_000)),
        },
    );
    let line = resp.to_line();
    assert!(
        line.contains("\"gone\"") && line.contains("will never run again"),
        "{line}"
    );
    assert!(d.grants.is_empty());
}

/// A client that gives its last grant back stays watched (its pidfd kept,
/// and the loop's registration of it) until the next reconcile, so a
/// client that reserves again at once opens and registers nothing; the
/// reconcile forgets it, and a process that holds a grant stays watched.
#[test]
fn a_client_stays_watched_after_its_last_release_until_the_reconcile() {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let mut d = manager(&m);
    let c = client(&m);
    let id = reserve(&mut d, &c, "rt1:10");
    let serial = d.watched[&PID].serial;
    release(&mut d, &c, id);
    assert!(d.grants().next().is_none());
    assert!(d.watched.contains_key(&PID), "forgotten at its release");
    let id = reserve(&mut d, &c, "rt1:10");
    assert_eq!(d.watched[&PID].serial, serial, "watched anew");
    crate::daemon::reconcile::reconcile(&mut d);
    assert!(
        d.watched.contains_key(&PID),
        "forgotten while it holds a grant"
    );
    release(&mut d, &c, id);
    crate::daemon::reconcile::reconcile(&mut d);
    assert!(!d.watched.contains_key(&PID), "still watched with no grant");
}
