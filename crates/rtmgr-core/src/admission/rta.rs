//! Response-time analysis for the SCHED_FIFO reservations of one RT CPU
//! (ARTiS §4: RM per RT CPU; Joseph & Pandya / Audsley's recurrence): the
//! worst-case response time of τi is the fixed point of
//! R = Wi + Σ_hard ⌈(R + Pj − Wj)/Pj⌉·Wj + Σ_{soft, prio ≥ prio i} ⌈R/Pk⌉·Wk.
//! SCHED_DEADLINE reservations run above every FIFO task; each is counted as
//! a sporadic task with release jitter P − W (its budget may come anywhere in
//! its period). Tasks of equal priority interfere both ways (SCHED_FIFO
//! serves them in arrival order).
//!
//! Fast and still exact: the right-hand side is read from the CPU's
//! per-period summary (`summary`), and a reservation the new one disturbs is
//! first tested at its deadline — its cached demand there plus what the new
//! one brings; at most D means a fixed point at most D, so it still meets its
//! deadline — and only otherwise by the exact recurrence, started from its
//! cached response time (a lower bound of the new one).

use super::load::{interference, CpuLoad};
use super::{Entry, Id, Kind};

/// A soft reservation whose response time exceeds its deadline.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// None = the reservation being added.
    pub task: Option<Id>,
    /// u64::MAX when the recurrence did not converge below the deadline.
    pub response_ns: u64,
    pub deadline_ns: u64,
}

/// Check the soft reservations of `load` with `new` added: Ok with the new
/// one's response time (0 if it is hard) and the changed response times of
/// the others that had to be recomputed.
pub fn check(load: &CpuLoad, new: &Entry) -> Result<(u64, Vec<(Id, u64)>), Failure> {
    let (new_resp, first) = match new.demand.kind {
        Kind::Hard => (0, 0),
        Kind::Soft { priority } => {
            let r =
                response(load, new, false, None, new.demand.budget_ns).map_err(|r| Failure {
                    task: None,
                    response_ns: r,
                    deadline_ns: new.demand.deadline_ns,
                })?;
            // The ones it can delay: the same priority or lower.
            let first = load
                .soft
                .partition_point(|e| e.demand.priority().unwrap_or(0) > priority);
            (r, first)
        }
    };
    let mut updated = Vec::new();
    for e in &load.soft[first..] {
        let d = e.demand.deadline_ns;
        if e.deadline_demand + interference(new, d) <= u128::from(d) {
            continue;
        }
        let start = e.response_ns.max(e.demand.budget_ns);
        let r = response(load, e, true, Some(new), start).map_err(|r| Failure {
            task: Some(e.id),
            response_ns: r,
            deadline_ns: d,
        })?;
        if r != e.response_ns {
            updated.push((e.id, r));
        }
    }
    Ok((new_resp, updated))
}

/// Least fixed point of the recurrence for one thread of `me` (in the lists
/// or not: `listed`) with `extra` added, from `start` (at most that fixed
/// point). Err(last value) when it passes D.
fn response(
    load: &CpuLoad,
    me: &Entry,
    listed: bool,
    extra: Option<&Entry>,
    start: u64,
) -> Result<u64, u64> {
    let d = me.demand.deadline_ns;
    let mut r = start;
    loop {
        let next = load.demand_at(me, listed, extra, r);
        let Ok(next) = u64::try_from(next) else {
            return Err(u64::MAX);
        };
        if next > d {
            return Err(next);
        }
        if next == r {
            return Ok(r);
        }
        r = next;
    }
}
