//! What a grant does to the machine, as one pipeline of steps (DROPS "Taming
//! Linux" §4: the resource manager grants CPU, memory, I/O and cache and
//! takes them back; budget-based RTAI §3.3: hard reservations as
//! SCHED_DEADLINE, soft ones as SCHED_FIFO; ARTiS §2.4: an RT task is bound
//! to one RT CPU; rtkit: RLIMIT_RTTIME and reset-on-fork on every grant).
//!
//! Each step is a `step::Step` of the grant family (`GrantSteps`), the
//! shape the partition's and the resources' knobs have too: it records what
//! it will change in the grant record (`snapshot`, journalled before
//! anything changes), changes it (`apply`), says what drifted (`verify`, as
//! `Drift`) and gives it back from the record alone (`undo`, so it also
//! works for a daemon that was `kill -9`ed). The steps,
//! in order: on cgroup v1, SCHED_DEADLINE for the threads of a hard grant
//! that wait on another CPU than their RT CPU (`sched.rs`: the kernel admits
//! it only where the thread waits, and the cpuset move carries the
//! bandwidth over); cpuset membership, affinity (`placement.rs`), rlimits,
//! locked memory (`limits.rs`), IRQ steering (`irq.rs`), I/O priority, cache
//! group (`io.rs`), scheduling attributes of the other threads (`sched.rs`,
//! last: such a thread is on its RT CPU already; a hard grant's thread the
//! kernel still refuses SCHED_DEADLINE where it waits gets SCHED_FIFO 1
//! until it runs there, `pending.rs`). Both policy steps go
//! back first, from the same record, whichever set it (`revoke_policy`).
//! Grant, revoke, drift check and repair all run through `STEPS`.

mod io;
mod irq;
mod limits;
mod placement;
mod sched;
#[cfg(test)]
pub(crate) mod tests;

pub use sched::{granted_attr, is_held, is_placeholder, placeholder_attr, PLACEHOLDER_PRIORITY};

use super::grants_journal::{Grant, ThreadBefore};
use crate::cgroup::Layout;
use crate::drift::{Drift, Fix};
use crate::host::{Host, HostError};
use crate::step::{Family, Step};
use crate::tasks;

/// Where a step works: the machine, its cpuset hierarchy, and whether this
/// grant sets (apply) or gives back (undo) its process's limits — the first
/// grant of a process sets them, the last one to go restores them.
pub struct Cx<'a> {
    pub host: &'a Host,
    pub layout: &'a Layout,
    pub process_limits: bool,
    /// The kernel's deadline bandwidth on the grant's RT CPU is not what
    /// rtmgr admitted (EBUSY, or threads that left SCHED_DEADLINE there
    /// before their 0-lag time or its root domain's rebuild, `dl_leak.rs`):
    /// no SCHED_DEADLINE before the move (its cpuset move could be refused
    /// too), and a SCHED_DEADLINE refused with EBUSY waits at SCHED_FIFO 1
    /// (`pending.rs`) instead of failing.
    pub busy_pending: bool,
    /// Threads that spent their budget in an earlier hard grant and may not
    /// be SCHED_DEADLINE before its 0-lag time: they wait at SCHED_FIFO 1
    /// (`pending.rs`, `zero_lag.rs`).
    pub held: Vec<u32>,
    /// Threads new to rtmgr whose cgroup the snapshot just read (`Draft::
    /// fresh_tids`): one found outside the grant's cpuset there is moved
    /// without a second look (`placement::Cpuset`).
    pub fresh: Vec<u32>,
}

impl<'a> Cx<'a> {
    pub fn new(host: &'a Host, layout: &'a Layout, process_limits: bool) -> Self {
        Cx {
            host,
            layout,
            process_limits,
            busy_pending: false,
            held: Vec::new(),
            fresh: Vec::new(),
        }
    }
}

/// The grant's threads that are still the same threads.
fn live<'g>(host: &'g Host, g: &'g Grant) -> impl Iterator<Item = &'g ThreadBefore> + 'g {
    g.threads
        .iter()
        .filter(move |t| tasks::same_task(host, t.tid, t.start_time))
}

/// What the client's policy allowed, for the limits a new grant sets.
#[derive(Debug, Clone, Copy)]
pub struct Allowance {
    /// RLIMIT_RTTIME of a SCHED_FIFO grant, µs.
    pub rttime_us: u64,
    /// RLIMIT_MEMLOCK at least this, bytes.
    pub memlock_bytes: u64,
    /// Hard limits too (unprivileged clients).
    pub enforce: bool,
}

/// What a snapshot has to read: the threads new to rtmgr (a thread taken
/// over from a grant still being revoked keeps that grant's before-state)
/// and whether the process's limits are new (a later grant of a process
/// carries its first grant's limit record).
#[derive(Debug, Clone)]
pub struct Draft {
    pub allowance: Allowance,
    pub fresh_tids: Vec<u32>,
    pub fresh_limits: bool,
}

impl Draft {
    fn is_fresh(&self, t: &ThreadBefore) -> bool {
        self.fresh_tids.contains(&t.tid)
    }
}

/// The grant family of `step::Step`: a new grant's record is drafted
/// (`snapshot` fills in what its threads and process had, before it is
/// journalled), then its steps apply, verify and undo the journalled record.
pub struct GrantSteps;

/// A new grant's record being filled with what its threads had.
pub struct Drafting<'a> {
    pub cx: &'a Cx<'a>,
    pub draft: &'a Draft,
    pub g: &'a mut Grant,
}

/// A journalled grant on the machine.
#[derive(Clone, Copy)]
pub struct On<'a> {
    pub cx: &'a Cx<'a>,
    pub g: &'a Grant,
}

impl Family for GrantSteps {
    type Snapshot<'a> = Drafting<'a>;
    type Apply<'a> = On<'a>;
    type Verify<'a> = On<'a>;
    type Undo<'a> = On<'a>;
    type Error = HostError;
}

/// One thing a grant changes: a `Step` of the grant family.
pub trait GrantStep: Step<GrantSteps> {
    /// Given back with the policies, a period before the rest (`release.rs`).
    fn is_policy(&self) -> bool {
        false
    }

    /// The step whose undo also undoes this one's (by name): undone in the
    /// same pass, this one's undo is skipped (it would do it twice).
    fn undone_with(&self) -> Option<&'static str> {
        None
    }
}

/// What a grant step found changed: repaired by applying the step again
/// from the grant's record (`Fix::Step`), the same drift type as the
/// partition's knobs.
fn drifted(step: &(impl Step<GrantSteps> + ?Sized), what: String) -> Drift {
    Drift {
        knob: step.name(),
        what,
        fix: Fix::Step,
    }
}

/// The steps of a grant, in the order they are applied.
pub const STEPS: [&dyn GrantStep; 9] = [
    &sched::DeadlineWhereItWaits,
    &placement::Cpuset,
    &placement::Affinity,
    &limits::RLIMITS,
    &limits::LOCKED_MEMORY,
    &irq::IrqSteering,
    &io::Ioprio,
    &io::CacheGroup,
    &sched::SchedAttrs,
];

/// Fill the old values into a new grant's record (before it is journalled).
pub fn snapshot(cx: &Cx, draft: &Draft, g: &mut Grant) -> Result<(), HostError> {
    STEPS.iter().try_for_each(|s| {
        s.snapshot(&mut Drafting {
            cx,
            draft,
            g: &mut *g,
        })
    })
}

/// Does applying this grant leave the kernel's cgroup locks alone? Every
/// thread is in the grant's cpuset already (one taken over from a grant
/// still being revoked) or there is no cpuset to join (cgroup v2), and
/// there is no IRQ to steer and no cache group to join. Its other steps are
/// system calls of microseconds: the loop may apply it itself, without the
/// worker's round trip (`Manager::start_grant`).
pub fn quick(cx: &Cx, g: &Grant) -> bool {
    steers_no_irq_nor_cache(g)
        && (placement::target(cx.layout, g).is_none()
            || g.threads.iter().all(|t| {
                !placement::found_elsewhere(cx, g, t) && placement::in_target(cx, g, t.tid)
            }))
}

/// Does giving this grant's placement back leave the kernel's cgroup locks
/// alone? No thread to move back into its cpuset (all taken over by later
/// grants, or none on cgroup v2), no IRQ and no cache group: the loop may
/// do it itself (`Manager::undo_placement`).
pub fn quick_to_undo(layout: &Layout, g: &Grant) -> bool {
    steers_no_irq_nor_cache(g) && (placement::target(layout, g).is_none() || g.threads.is_empty())
}

/// No IRQ to steer and no cache group: what `quick` and `quick_to_undo`
/// both ask beside the cpuset.
fn steers_no_irq_nor_cache(g: &Grant) -> bool {
    g.irq.is_none() && g.resources.cache_group.is_none()
}

/// Put a journalled grant into effect, step by step. On error the steps
/// done, and the failing one (it may have changed some threads), are undone
/// in reverse and the error says what failed.
pub fn apply(cx: &Cx, g: &Grant) -> Result<(), HostError> {
    let mut took = Vec::with_capacity(STEPS.len());
    for (i, step) in STEPS.iter().enumerate() {
        let t0 = rtmgr_sys::time::mono_ns();
        let r = step.apply(&mut On { cx, g });
        took.push((step.name(), rtmgr_sys::time::mono_ns() - t0));
        if let Err(e) = r {
            for p in undo(cx, g, &STEPS[..=i]) {
                tracing::warn!("reservation {}: could not undo {p}", g.id);
            }
            return Err(e);
        }
    }
    // Where a grant's time goes (RTMGR_LOG=rtmgr_linux=debug; bench/grant-latency.sh).
    tracing::debug!(
        "reservation {}: steps {}",
        g.id,
        took.iter()
            .map(|(n, ns)| format!("{n} {} µs", ns / 1000))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

fn undo(cx: &Cx, g: &Grant, steps: &[&dyn GrantStep]) -> Vec<String> {
    let in_pass = |name| steps.iter().any(|s| s.name() == name);
    steps
        .iter()
        .rev()
        .filter(|s| !s.undone_with().is_some_and(in_pass))
        .flat_map(|s| s.undo(&mut On { cx, g }))
        .collect()
}

/// Undo a grant from its record: every step, in reverse. Returns what could
/// not be undone.
pub fn revoke(cx: &Cx, g: &Grant) -> Vec<String> {
    undo(cx, g, &STEPS)
}

/// First half of a revocation: the threads' old policies. A thread leaving
/// SCHED_DEADLINE keeps its bandwidth in its CPU's root domain until its
/// 0-lag time (at most a period later), and the kernel then returns it to
/// the root domain of the CPU the thread is on: so a live deadline thread
/// must stay on its RT CPU for a period before `revoke_placement` moves it.
pub fn revoke_policy(cx: &Cx, g: &Grant) -> Vec<String> {
    let policy: Vec<&dyn GrantStep> = STEPS.into_iter().filter(|s| s.is_policy()).collect();
    undo(cx, g, &policy)
}

/// Second half: every other step, in reverse.
pub fn revoke_placement(cx: &Cx, g: &Grant) -> Vec<String> {
    let rest: Vec<&dyn GrantStep> = STEPS.into_iter().filter(|s| !s.is_policy()).collect();
    undo(cx, g, &rest)
}

/// Does this grant have to wait a period between its two halves?
pub fn must_wait(host: &Host, g: &Grant) -> bool {
    g.demand.is_hard()
        && g.threads
            .iter()
            .any(|t| tasks::same_task(host, t.tid, t.start_time))
}

/// Is the grant still as applied? Every step verifies; one `Drift` per item
/// found changed, under the step's name (`drifted`).
pub fn drift(cx: &Cx, g: &Grant) -> Vec<Drift> {
    STEPS.iter().flat_map(|s| s.verify(&On { cx, g })).collect()
}

/// Re-apply the steps that drifted (gone threads are skipped); what failed.
pub fn repair(cx: &Cx, g: &Grant, drifted: &[Drift]) -> Vec<String> {
    STEPS
        .iter()
        .filter(|s| drifted.iter().any(|d| d.knob == s.name()))
        .filter_map(|s| {
            let r = s.apply(&mut On { cx, g });
            r.err().map(|e| format!("{}: {e}", s.name()))
        })
        .collect()
}

/// Note an undo's error unless the task is gone.
fn note(problems: &mut Vec<String>, what: String, r: Result<(), HostError>) {
    if let Err(e) = r {
        if !e.is_gone() {
            problems.push(format!("{what}: {e}"));
        }
    }
}

fn gone(tid: u32) -> HostError {
    HostError::Io {
        op: "find",
        path: format!("task {tid}"),
        source: std::io::Error::from_raw_os_error(libc::ESRCH),
    }
}

/// A thread new to rtmgr, known by its start time, before its steps'
/// snapshots fill it.
pub fn new_thread(tid: u32, start_time: u64) -> ThreadBefore {
    ThreadBefore {
        tid,
        start_time,
        attr: Default::default(),
        affinity: Default::default(),
        cgroup: None,
        cpuset_cpus: None,
        hold_until_ns: None,
    }
}
