//! The admission tests computed the slow way, entry by entry and from
//! scratch, as `Admission::check` did before the per-CPU summaries (ARTiS §4
//! admission per RT CPU; issue 22): fresh utilisation sums, QPA over the
//! entries, the full recurrence from W for every soft reservation the new
//! one can delay. The property tests check the fast path against it.

use super::edf::{self, Entries};
use super::entry_demand::{hard_interference, soft_interference};
use super::place::utilisation_rank;
use super::{Admission, CpuLoad, CpuRefusal, Demand, Entry, Id, Kind, Placement};

/// Σ utilisation of a list, from +0.0.
fn total<'a>(entries: impl Iterator<Item = &'a Entry>) -> f64 {
    entries.map(Entry::utilisation).fold(0.0, |a, b| a + b)
}

/// The CPU chosen and the new reservation's response time, or why each CPU
/// tried refused.
pub(super) fn check(
    adm: &Admission,
    d: &Demand,
    count: u32,
    cpu: Option<u32>,
) -> Result<(u32, u64), Vec<CpuRefusal>> {
    let mut order: Vec<&CpuLoad> = match cpu {
        Some(c) => match adm.cpus().iter().find(|l| l.cpu == c) {
            Some(l) => vec![l],
            None => return Err(vec![CpuRefusal::NotRt { cpu: c }]),
        },
        None => adm.cpus().iter().collect(),
    };
    // Least utilised first, equal utilisations (to 1e-9) by CPU number.
    let fresh = |l: &CpuLoad| utilisation_rank(total(l.hard.iter().chain(&l.soft)));
    match adm.cfg.placement {
        Placement::FirstFit => order.sort_by_key(|l| l.cpu),
        Placement::WorstFit => order.sort_by_key(|l| (fresh(l), l.cpu)),
    }
    let mut why = Vec::new();
    for load in order {
        match fits(adm, load, d, count.max(1)) {
            Ok(r) => return Ok((load.cpu, r)),
            Err(e) => why.push(e),
        }
    }
    Err(why)
}

fn fits(adm: &Admission, load: &CpuLoad, d: &Demand, count: u32) -> Result<u64, CpuRefusal> {
    let cpu = load.cpu;
    if !load.online {
        return Err(CpuRefusal::Offline { cpu });
    }
    let add = d.utilisation() * f64::from(count);
    let would = total(load.hard.iter()) + total(load.soft.iter()) + add;
    if would > adm.cfg.cap + 1e-12 {
        let cap = adm.cfg.cap;
        return Err(CpuRefusal::Utilisation { cpu, would, cap });
    }
    let new = Entry::new(Id::MAX, *d, count, 0);
    if d.is_hard() {
        let would = total(load.hard.iter()) + add;
        if would > adm.cfg.dl_share + 1e-12 {
            let share = adm.cfg.dl_share;
            return Err(CpuRefusal::DeadlineShare { cpu, would, share });
        }
        let set = Entries(load.hard.iter().chain(std::iter::once(&new)));
        edf::check(&set).map_err(|(at_ns, demand_ns)| CpuRefusal::EdfDemand {
            cpu,
            at_ns,
            demand_ns,
        })?;
    }
    let refuse = |task, response_ns, deadline_ns| CpuRefusal::ResponseTime {
        cpu,
        task,
        response_ns,
        deadline_ns,
    };
    let mut new_resp = 0;
    if d.priority().is_some() {
        new_resp = response(load, &new, None, None).map_err(|r| refuse(None, r, d.deadline_ns))?;
    }
    for (i, e) in load.soft.iter().enumerate() {
        if e.disturbed_by(d) {
            response(load, e, Some(i), Some(&new))
                .map_err(|r| refuse(Some(e.id), r, e.demand.deadline_ns))?;
        }
    }
    Ok(new_resp)
}

/// The recurrence for one thread of `me` from W, every interferer summed
/// one by one: soft entry `skip` is `me` itself.
pub(super) fn response(
    load: &CpuLoad,
    me: &Entry,
    skip: Option<usize>,
    extra: Option<&Entry>,
) -> Result<u64, u64> {
    let d = me.demand.deadline_ns;
    let w = me.demand.budget_ns;
    let prio = me.demand.priority().unwrap_or(0);
    let mut r = w;
    loop {
        let peers = u128::from(me.count - 1) * u128::from(r.div_ceil(me.demand.period_ns) * w);
        let hard: u128 = load.hard.iter().map(|h| hard_interference(h, r)).sum();
        let soft: u128 = load
            .soft
            .iter()
            .enumerate()
            .filter(|&(j, x)| Some(j) != skip && x.demand.priority().unwrap_or(0) >= prio)
            .map(|(_, x)| soft_interference(x, r))
            .sum();
        let extra: u128 = extra.map_or(0, |x| match x.demand.kind {
            Kind::Hard => hard_interference(x, r),
            Kind::Soft { .. } => soft_interference(x, r),
        });
        let next = u64::try_from(u128::from(w) + peers + hard + soft + extra).unwrap_or(u64::MAX);
        if next > d {
            return Err(next);
        }
        if next == r {
            return Ok(r);
        }
        r = next;
    }
}
