//! The EDF test for the SCHED_DEADLINE reservations of one RT CPU (ARTiS §4:
//! EDF per RT CPU). With every deadline equal to its period, U ≤ 1 is exact
//! (Liu & Layland); with constrained deadlines (D < P) the processor-demand
//! criterion dbf(t) ≤ t is checked at the deadlines up to the synchronous
//! busy period with Quick convergence Processor-demand Analysis (QPA, Zhang &
//! Burns 2009), which visits few points. The kernel's own admission only
//! sums W/P, which is not enough when D < P.

use super::Entry;

/// Ok, or the first interval [0, t) found whose demand exceeds t: (t, demand).
pub fn check<'a>(tasks: impl Iterator<Item = &'a Entry> + Clone) -> Result<(), (u64, u64)> {
    let u: f64 = tasks
        .clone()
        .map(|e| e.demand.utilisation() * f64::from(e.count))
        .sum();
    if u > 1.0 + 1e-12 {
        // Over any hyperperiod the demand exceeds the time.
        let at = tasks.clone().map(|e| e.demand.period_ns).max().unwrap_or(0);
        return Err((at, dbf(tasks, at)));
    }
    if tasks
        .clone()
        .all(|e| e.demand.deadline_ns == e.demand.period_ns)
    {
        return Ok(());
    }
    let d_min = tasks
        .clone()
        .map(|e| e.demand.deadline_ns)
        .min()
        .unwrap_or(0);
    let limit = horizon(tasks.clone(), u);
    // QPA: walk down from the last deadline before the horizon.
    let mut t = last_deadline_before(tasks.clone(), limit.saturating_add(1));
    while t > 0 {
        let h = dbf(tasks.clone(), t);
        if h > t {
            return Err((t, h));
        }
        if h <= d_min {
            return Ok(());
        }
        t = if h < t {
            h
        } else {
            last_deadline_before(tasks.clone(), t)
        };
    }
    Ok(())
}

/// Processor demand of the jobs released and due within [0, t).
pub fn dbf<'a>(tasks: impl Iterator<Item = &'a Entry>, t: u64) -> u64 {
    let mut sum: u128 = 0;
    for e in tasks {
        let d = &e.demand;
        if t >= d.deadline_ns {
            let jobs = u128::from((t - d.deadline_ns) / d.period_ns + 1);
            sum += jobs * u128::from(d.budget_ns) * u128::from(e.count);
        }
    }
    u64::try_from(sum).unwrap_or(u64::MAX)
}

/// The largest absolute deadline strictly before `t` (0 if none).
fn last_deadline_before<'a>(tasks: impl Iterator<Item = &'a Entry>, t: u64) -> u64 {
    tasks
        .filter(|e| t > e.demand.deadline_ns)
        .map(|e| {
            let d = &e.demand;
            let k = (t - 1 - d.deadline_ns) / d.period_ns;
            k * d.period_ns + d.deadline_ns
        })
        .max()
        .unwrap_or(0)
}

/// Where a violation must show up if there is one: the smaller of the
/// synchronous busy period and the bound of Baruah et al. (U < 1).
fn horizon<'a>(tasks: impl Iterator<Item = &'a Entry> + Clone, u: f64) -> u64 {
    let busy = busy_period(tasks.clone());
    if u < 1.0 - 1e-9 {
        let dmax = tasks
            .clone()
            .map(|e| e.demand.deadline_ns)
            .max()
            .unwrap_or(0);
        let slack: f64 = tasks
            .map(|e| {
                let d = &e.demand;
                (d.period_ns - d.deadline_ns) as f64 * d.utilisation() * f64::from(e.count)
            })
            .sum();
        let la = dmax.max((slack / (1.0 - u)).ceil() as u64);
        busy.min(la)
    } else {
        busy
    }
}

/// Length of the synchronous busy period: w = Σ ⌈w/P⌉·W to a fixed point.
fn busy_period<'a>(tasks: impl Iterator<Item = &'a Entry> + Clone) -> u64 {
    let mut w: u64 = tasks
        .clone()
        .map(|e| e.demand.budget_ns * u64::from(e.count))
        .sum();
    for _ in 0..100_000 {
        let next: u64 = tasks
            .clone()
            .map(|e| w.div_ceil(e.demand.period_ns) * e.demand.budget_ns * u64::from(e.count))
            .sum();
        if next == w {
            return w;
        }
        w = next;
    }
    w
}
