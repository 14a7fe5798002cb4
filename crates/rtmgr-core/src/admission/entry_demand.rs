//! What one reservation alone brings to an RT CPU (ARTiS §4: EDF or RM per RT
//! CPU): its work per release, its processor demand (EDF) and its interference
//! on a window (SCHED_DEADLINE and SCHED_FIFO). The per-CPU summary and the EDF
//! test both build on these.

use super::Entry;

/// W·count, the work one release of a reservation brings.
pub(super) fn work(e: &Entry) -> u128 {
    u128::from(e.demand.budget_ns) * u128::from(e.count)
}

/// ⌈(r + P − W)/P⌉·W·count: the most a SCHED_DEADLINE reservation runs in
/// any window of length r (its budget may come anywhere in its period).
pub(super) fn hard_interference(e: &Entry, r: u64) -> u128 {
    let d = &e.demand;
    let jitter = d.period_ns - d.budget_ns;
    u128::from((r + jitter).div_ceil(d.period_ns)) * work(e)
}

/// ⌈r/P⌉·W·count: what a SCHED_FIFO reservation released with the window brings.
pub(super) fn soft_interference(e: &Entry, r: u64) -> u128 {
    u128::from(r.div_ceil(e.demand.period_ns)) * work(e)
}

/// Processor demand of one reservation's jobs released and due within [0, t).
pub(super) fn entry_dbf(e: &Entry, t: u64) -> u128 {
    let d = &e.demand;
    if t < d.deadline_ns {
        return 0;
    }
    u128::from((t - d.deadline_ns) / d.period_ns + 1) * work(e)
}
