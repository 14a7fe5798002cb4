//! The rtkit front end as the daemon's loop sees it (DROPS §4.1: one more
//! front end of the resource manager): owns the bus name, and hands each call
//! that `bus.rs` queued to `rules.rs`, woken through a socket (`server::Front`).

use super::bus;
use super::config::RtkitSection;
use super::rules;
use crate::daemon::manager::Manager;
use crate::daemon::server::Front;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};

/// The front end as the daemon's loop sees it.
pub struct RtkitFront {
    conn: Option<zbus::blocking::Connection>,
    jobs: mpsc::Receiver<bus::Job>,
    wake: UnixStream,
    rules: rules::Rtkit,
}

/// Own the name on the bus and start answering. `stop` is set by Exit.
pub fn start(cfg: &RtkitSection, stop: Arc<AtomicBool>) -> Result<RtkitFront, String> {
    let (wake, wake_tx) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    wake.set_nonblocking(true)
        .and_then(|_| wake_tx.set_nonblocking(true))
        .map_err(|e| format!("socketpair: {e}"))?;
    let (tx, jobs) = mpsc::channel();
    let conn = bus::connect(cfg, bus::RealtimeKit::new(cfg.clone(), tx, wake_tx))?;
    Ok(RtkitFront {
        conn: Some(conn),
        jobs,
        wake,
        rules: rules::Rtkit::new(cfg.clone(), stop),
    })
}

impl RtkitFront {
    /// Leave the bus (no call is answered after this), then give back the
    /// raised nice levels. The RT grants go with every other grant.
    pub fn stop(mut self, m: &Manager) -> Vec<String> {
        if let Some(conn) = self.conn.take() {
            let _ = conn.release_name(bus::NAME);
            drop(conn);
        }
        // Calls that were waiting get "the daemon is stopping".
        while self.jobs.try_recv().is_ok() {}
        self.rules.lower_all(m)
    }
}

impl Front for RtkitFront {
    fn fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    fn serve(&mut self, m: &mut Manager) {
        let mut buf = [0u8; 256];
        while matches!((&self.wake).read(&mut buf), Ok(n) if n > 0) {}
        while let Ok(job) = self.jobs.try_recv() {
            let r = self.rules.answer(m, job.caller, job.call);
            if let Err(e) = &r {
                tracing::info!("rtkit: {:?} from {:?}: {e:?}", job.call, job.caller);
            }
            let _ = job.reply.send(r);
        }
    }
}
