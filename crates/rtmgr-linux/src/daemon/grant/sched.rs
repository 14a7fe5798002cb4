//! A grant's scheduling attributes (DROPS "Taming Linux" §4: the resource
//! manager grants CPU time; budget-based RTAI §3.3: hard reservations as
//! SCHED_DEADLINE, soft ones as SCHED_FIFO; rtkit: reset-on-fork).

use super::{live, note, Cx, Draft, GrantStep};
use crate::daemon::journal::Grant;
use crate::host::{Host, HostError};
use rtmgr_core::admission::{Demand, Kind};
use rtmgr_sys::sched::{SchedAttr, SCHED_DEADLINE, SCHED_FIFO, SCHED_FLAG_RESET_ON_FORK};

/// The scheduling attributes a grant gives each of its threads.
pub fn granted_attr(d: &Demand) -> SchedAttr {
    match d.kind {
        Kind::Hard => SchedAttr {
            policy: SCHED_DEADLINE,
            flags: SCHED_FLAG_RESET_ON_FORK,
            runtime: d.budget_ns,
            deadline: d.deadline_ns,
            period: d.period_ns,
            ..SchedAttr::default()
        },
        Kind::Soft { priority } => SchedAttr {
            policy: SCHED_FIFO,
            flags: SCHED_FLAG_RESET_ON_FORK,
            priority: u32::from(priority),
            ..SchedAttr::default()
        },
    }
}

/// Does a thread's policy still match the grant's (flags and nice aside)?
fn matches(now: &SchedAttr, want: &SchedAttr) -> bool {
    now.policy == want.policy
        && now.priority == want.priority
        && (want.policy != SCHED_DEADLINE
            || (now.runtime, now.deadline, now.period)
                == (want.runtime, want.deadline, want.period))
}

/// Each thread at the grant's policy: the last step of a grant, the first
/// to go back (`is_policy`).
pub struct SchedAttrs;

impl GrantStep for SchedAttrs {
    fn name(&self) -> &'static str {
        "scheduling attributes"
    }

    fn snapshot(&self, cx: &Cx, draft: &Draft, g: &mut Grant) -> Result<(), HostError> {
        for t in g.threads.iter_mut().filter(|t| draft.is_fresh(t)) {
            t.attr = cx.host.get_attr(t.tid)?;
        }
        Ok(())
    }

    fn apply(&self, cx: &Cx, g: &Grant) -> Result<(), HostError> {
        let attr = granted_attr(&g.demand);
        for t in &g.threads {
            set_attr_when_moved(cx.host, t.tid, &attr)?;
        }
        Ok(())
    }

    fn verify(&self, cx: &Cx, g: &Grant) -> Vec<String> {
        let want = granted_attr(&g.demand);
        live(cx.host, g)
            .filter(|t| cx.host.get_attr(t.tid).is_ok_and(|a| !matches(&a, &want)))
            .map(|t| format!("thread {} policy", t.tid))
            .collect()
    }

    fn undo(&self, cx: &Cx, g: &Grant) -> Vec<String> {
        let mut problems = Vec::new();
        for t in live(cx.host, g) {
            let r = cx.host.set_attr(t.tid, &t.attr);
            note(&mut problems, format!("thread {} policy", t.tid), r);
        }
        problems
    }

    fn is_policy(&self) -> bool {
        true
    }
}

/// The kernel checks a SCHED_DEADLINE request against the root domain of
/// the runqueue the thread is on now; a thread asleep since its affinity
/// changed is still on its old CPU (it moves when it next runs), and the
/// kernel answers EPERM. The client library keeps its thread runnable while
/// it waits for the answer, so it moves within a scheduler tick: retry for
/// up to 200 ms.
fn set_attr_when_moved(host: &Host, tid: u32, attr: &SchedAttr) -> Result<(), HostError> {
    let mut tries = 0;
    loop {
        match host.set_attr(tid, attr) {
            Err(e)
                if e.errno() == Some(libc::EPERM)
                    && attr.policy == SCHED_DEADLINE
                    && tries < 400 =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
            r => return r,
        }
    }
}
