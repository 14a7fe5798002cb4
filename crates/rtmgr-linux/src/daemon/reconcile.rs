//! Drift (DROPS §4.1: Linux stays confined to what it was granted; ARTiS
//! §2.1): what changed behind the daemon's back since the last look, and its
//! repair — granted threads whose policy, cpuset or affinity was changed,
//! steered IRQs rewritten (irqbalance), partition IRQ masks that point at RT
//! CPUs again, new tasks or unbound kernel threads allowed on RT and NRT CPUs
//! at once (their old affinity is journalled in the partition journal so
//! `reset` gives it back), RT CPUs going offline (their grants are revoked)
//! and coming back (their per-CPU cpuset is rebuilt).

use super::domains;
use super::grant;
use super::journal::Grant;
use super::manager::Manager;
use crate::journal::{Journal, Record, TaskBefore};
use crate::{cgroup, cpus, irq, tasks, Host};
use rtmgr_core::CpuSet;

/// Look for drift once and repair it; counts go to `status`.
pub fn reconcile(m: &mut Manager) {
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
            bump(m, "grants_of_exited_threads");
            continue;
        }
        if !grant::drift(&m.host, &g).is_empty() {
            repair(&m.host, &m.applied.layout, &g);
            bump(m, "grants_reapplied");
        }
    }
    let steered: Vec<u32> = m
        .grants
        .values()
        .filter_map(|g| g.irq.as_ref().map(|i| i.0))
        .collect();
    let n = partition_irqs(&m.host, &m.applied.plan, &steered);
    add(m, "irq_masks_restored", n);
    let n = spanning_tasks(m);
    add(m, "tasks_narrowed", n);
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

/// Re-apply a grant to its live threads and its IRQ (gone threads are skipped).
pub fn repair(host: &Host, layout: &cgroup::Layout, g: &Grant) {
    let attr = grant::granted_attr(&g.demand);
    let one = CpuSet::single(g.cpu);
    for t in &g.threads {
        if !tasks::same_task(host, t.tid, t.start_time) {
            continue;
        }
        if let (cgroup::Layout::V1(_), Some(dir)) = (layout, &g.cgroup) {
            let _ = cgroup::attach(host, layout, dir, t.tid);
        }
        let _ = host.set_affinity(t.tid, &one);
        let _ = host.set_attr(t.tid, &attr);
    }
    if let Some((n, _)) = g.irq {
        let _ = irq::set_affinity(host, n, &one);
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
            bump(m, "rt_cpu_offline");
        } else if !was && is {
            if let Ok(d) = domains::ensure(&m.host, &m.applied) {
                m.domains = d;
            }
            m.admission.set_online(cpu, true);
            bump(m, "rt_cpu_online");
        }
    }
}

/// IRQs the partition steered to the NRT CPUs that point at RT CPUs again.
fn partition_irqs(
    host: &Host,
    plan: &rtmgr_core::partition::PartitionPlan,
    steered: &[u32],
) -> u64 {
    let mut n = 0;
    for i in irq::numbers(host).unwrap_or_default() {
        if steered.contains(&i) || plan.irq_leave.contains(&i) || plan.irq_rt.contains(&i) {
            continue;
        }
        let Ok(aff) = irq::affinity(host, i) else {
            continue;
        };
        if aff.is_disjoint(&plan.rt) {
            continue;
        }
        // Managed IRQs refuse; the partition listed them already.
        if irq::set_affinity(host, i, &plan.nrt).is_ok() {
            n += 1;
        }
    }
    n
}

/// Tasks allowed on RT and NRT CPUs at once (a new task in another cpuset,
/// an affinity reset by hand): narrowed to their NRT part after journalling
/// their affinity. Tasks pinned to RT CPUs only (RT0 tasks, guests of the
/// balancer, the daemon's grants) are left alone.
fn spanning_tasks(m: &mut Manager) -> u64 {
    let (rt, nrt) = (m.applied.plan.rt.clone(), m.applied.plan.nrt.clone());
    let me = std::process::id();
    let mut found = Vec::new();
    for t in tasks::all(&m.host).unwrap_or_default() {
        if t.pid == me || t.no_setaffinity {
            continue;
        }
        if t.kthread && m.applied.plan.kernel_threads == rtmgr_core::partition::KthreadPolicy::Leave
        {
            continue;
        }
        let Ok(aff) = m.host.get_affinity(t.tid) else {
            continue;
        };
        if aff.is_disjoint(&rt) || aff.is_disjoint(&nrt) {
            continue;
        }
        found.push((t, aff));
    }
    if found.is_empty() {
        return 0;
    }
    let before: Vec<TaskBefore> = found
        .iter()
        .map(|(t, aff)| TaskBefore {
            tid: t.tid,
            start_time: t.start_time,
            cgroup: cgroup::task_cgroup(&m.host, &m.applied.layout, t.tid),
            affinity: aff.clone(),
        })
        .collect();
    let journalled = Journal::append_to(&m.host, &m.applied.journal)
        .and_then(|mut j| j.record(&Record::Tasks { tasks: before }));
    if journalled.is_err() {
        return 0;
    }
    let mut n = 0;
    for (t, aff) in found {
        if m.host.set_affinity(t.tid, &aff.difference(&rt)).is_ok() {
            n += 1;
        }
    }
    n
}
