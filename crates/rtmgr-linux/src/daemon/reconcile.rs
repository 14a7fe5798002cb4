//! Drift (DROPS §4.1: Linux stays confined to what it was granted; ARTiS
//! §2.1): what changed behind the daemon's back since the last look, and its
//! repair — at every reconcile, grants that drifted in any step
//! (`grant::drift`: cpuset, affinity, limits, steered IRQ, ioprio, cache
//! group, policy; irqbalance rewriting a steered IRQ, say), RT CPUs going
//! offline (their grants are revoked) and coming back (their per-CPU cpuset
//! is rebuilt); and a slice of the knobs of the partition and of
//! `[resources]` (`rtmgr_core::partition::sweep`: each one within `[serve]
//! knob_verify_ms`), what drifted re-applied through the knob (journalled
//! first, so `reset` still gives back what was there before the partition).

use super::domains;
use super::grant;
use super::manager::Manager;
use crate::{cpus, partition, resources, tasks};
use rtmgr_core::partition::drift_events::{
    GRANTS_OF_EXITED_THREADS, GRANTS_REAPPLIED, RT_CPU_OFFLINE, RT_CPU_ONLINE,
};
use rtmgr_core::CpuSet;

/// Look for drift once and repair it; counts go to `status`. Then the
/// handles taken on granted threads (`Manager::check_threads`) that no grant
/// names any more are closed (a descriptor each, `host/task_handles.rs`),
/// and so are the pidfds of client processes that hold no grant.
pub fn reconcile(m: &mut Manager) {
    look(m);
    let granted = m.granted_tasks();
    m.host
        .keep_task_handles(|tid, start| granted.contains(&(tid, start)));
    m.forget_idle_watches();
}

fn look(m: &mut Manager) {
    for pid in m.exited_clients() {
        m.client_exited(pid);
    }
    let online = cpus::online(&m.host).unwrap_or_default();
    cpus_online(m, &online);
    let ids: Vec<u64> = m.grants.keys().copied().collect();
    for id in ids {
        let Some(g) = m.grants.get(&id).cloned() else {
            continue;
        };
        let alive: Vec<_> = g
            .threads
            .iter()
            .filter(|t| tasks::same_task(&m.host, t.tid, t.start_time))
            .collect();
        if alive.is_empty() {
            m.revoke_id(id);
            bump(m, GRANTS_OF_EXITED_THREADS);
            continue;
        }
        // Limits included: the process's limits are the grant's while it lives.
        let cx = grant::Cx::new(&m.host, &m.applied.layout, true);
        let drifted = grant::drift(&cx, &g);
        if !drifted.is_empty() {
            tracing::debug!("reservation {id} drifted: {drifted:?}");
            for p in grant::repair(&cx, &g, &drifted) {
                tracing::debug!("reservation {id}: repair: {p}");
            }
            bump(m, GRANTS_REAPPLIED);
        }
    }
    let steered: Vec<u32> = m
        .grants
        .values()
        .filter_map(|g| g.irq.as_ref().map(|i| i.0))
        .collect();
    knobs(m, &steered);
}

/// Verify this tick's slice of the knobs the partition applied and of the
/// `[resources]` knobs, re-apply what drifted, and count the repairs by kind.
fn knobs(m: &mut Manager, steered: &[u32]) {
    let (host, applied, sweep) = (&m.host, &m.applied, m.knob_sweep);
    let units = partition::enabled_knobs(applied) + 1;
    let partition = partition::verify_some(host, applied, steered, |i| sweep.due(i, units))
        .and_then(|d| partition::repair(host, applied, &d));
    let held = &m.resources.held;
    let resources = if sweep.due(units - 1, units) {
        resources::knobs::verify(host, &applied.journal, held)
            .and_then(|d| resources::knobs::repair(host, &applied.journal, &d))
    } else {
        Ok(Vec::new())
    };
    m.knob_sweep.advance();
    for done in [
        partition.map_err(|e| e.to_string()),
        resources.map_err(|e| e.to_string()),
    ] {
        match done {
            Ok(repaired) => {
                for (knob, n) in repaired {
                    if n > 0 {
                        tracing::info!("drift: {n} item(s) of knob {knob} re-applied");
                    }
                    add(m, &rtmgr_core::partition::drift_kind(knob), n as u64);
                }
            }
            Err(e) => tracing::warn!("drift repair of the knobs: {e}"),
        }
    }
}

fn bump(m: &mut Manager, what: &str) {
    add(m, what, 1);
}

fn add(m: &mut Manager, what: &str, n: u64) {
    #[cfg(feature = "metrics")]
    if let Some(mx) = &m.metrics {
        mx.drift(what, n);
    }
    if n > 0 {
        *m.stats.drift.entry(what.into()).or_default() += n;
    }
}

/// RT CPUs offline: revoke their grants and take no more; back online:
/// rebuild the per-CPU cpuset and take grants again.
fn cpus_online(m: &mut Manager, online: &CpuSet) {
    let rt: Vec<u32> = m.applied.plan.rt.iter().collect();
    for cpu in rt {
        let was = m.admission.cpus().iter().any(|c| c.cpu == cpu && c.online);
        let is = online.contains(cpu);
        if was && !is {
            m.admission.set_online(cpu, false);
            let ids: Vec<u64> = m
                .grants
                .values()
                .filter(|g| g.cpu == cpu)
                .map(|g| g.id)
                .collect();
            for id in ids {
                m.revoke_id(id);
            }
            bump(m, RT_CPU_OFFLINE);
        } else if !was && is {
            if let Ok(d) = domains::ensure(&m.host, &m.applied) {
                m.domains = d;
            }
            m.admission.set_online(cpu, true);
            bump(m, RT_CPU_ONLINE);
        }
    }
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
