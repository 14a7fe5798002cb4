//! Response-time analysis for the SCHED_FIFO reservations of one RT CPU
//! (ARTiS §4: RM per RT CPU; Joseph & Pandya / Audsley's recurrence): the
//! worst-case response time of τi is the fixed point of
//! R = Wi + Σ_hard ⌈(R + Pj − Wj)/Pj⌉·Wj + Σ_{soft, prio ≥ prio i} ⌈R/Pk⌉·Wk.
//! SCHED_DEADLINE reservations run above every FIFO task; each is counted as
//! a sporadic task with release jitter P − W (its budget may come anywhere in
//! its period). Tasks of equal priority interfere both ways (SCHED_FIFO
//! serves them in arrival order).

use super::{CpuLoad, Entry, Id, Kind};

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
/// the others.
pub fn check(load: &CpuLoad, new: &Entry) -> Result<(u64, Vec<(Id, u64)>), Failure> {
    let new_prio = new.demand.priority();
    let mut updated = Vec::new();
    let mut new_resp = 0;
    if let Some(p) = new_prio {
        let hp = load
            .soft
            .iter()
            .filter(|e| e.demand.priority().unwrap_or(0) >= p);
        let r = response(load, new, hp, None).map_err(|r| Failure {
            task: None,
            response_ns: r,
            deadline_ns: new.demand.deadline_ns,
        })?;
        new_resp = r;
    }
    // Existing soft reservations the new one can delay: those a linear
    // bound already proves keep their cached response time as the start of
    // the next exact recurrence (it is still below the least fixed point).
    let bounds = Bounds::new(load, new);
    for (i, e) in load.soft.iter().enumerate() {
        let prio = e.demand.priority().unwrap_or(0);
        if let Some(p) = new_prio {
            if p < prio {
                continue;
            }
        }
        if bounds.proves(load, e, prio) {
            continue;
        }
        let hp = load
            .soft
            .iter()
            .enumerate()
            .filter(|&(j, x)| j != i && x.demand.priority().unwrap_or(0) >= prio)
            .map(|(_, x)| x);
        let r = response(load, e, hp, Some(new)).map_err(|r| Failure {
            task: Some(e.id),
            response_ns: r,
            deadline_ns: e.demand.deadline_ns,
        })?;
        if r != e.response_ns {
            updated.push((e.id, r));
        }
    }
    Ok((new_resp, updated))
}

/// Fixed point of the recurrence for `me` under `hp` (soft tasks of the
/// same or higher priority), every hard task of `load`, and `extra` (the new
/// reservation, counted by its kind). Err(last value) when it passes D.
fn response<'a>(
    load: &CpuLoad,
    me: &Entry,
    hp: impl Iterator<Item = &'a Entry> + Clone,
    extra: Option<&'a Entry>,
) -> Result<u64, u64> {
    let d = me.demand.deadline_ns;
    let w = me.demand.budget_ns;
    // The other threads of the same reservation are equal-priority peers.
    let peers = u64::from(me.count.saturating_sub(1));
    let mut r = me.response_ns.max(w);
    loop {
        let mut next = w + peers * r.div_ceil(me.demand.period_ns) * w;
        for h in load
            .hard
            .iter()
            .chain(extra.filter(|e| e.demand.kind == Kind::Hard))
        {
            next += interference_hard(h, r);
        }
        for s in hp
            .clone()
            .chain(extra.filter(|e| e.demand.kind != Kind::Hard))
        {
            next += r.div_ceil(s.demand.period_ns) * s.demand.budget_ns * u64::from(s.count);
        }
        if next > d {
            return Err(next);
        }
        if next == r {
            return Ok(r);
        }
        r = next;
    }
}

fn interference_hard(h: &Entry, r: u64) -> u64 {
    let d = &h.demand;
    let jitter = d.period_ns - d.budget_ns;
    (r + jitter).div_ceil(d.period_ns) * d.budget_ns * u64::from(h.count)
}

/// Σ over interferers of the line above their demand in any window r:
/// ⌈(r + J)/P⌉·W ≤ U·r + (U·J + W). Its fixed point
/// (W_i + Σ c) / (1 − Σ U) bounds the response time from above in O(1) per
/// task (a sufficient test in the spirit of Bini et al. 2009), so a
/// decision does not run the exact recurrence for every soft reservation
/// of a crowded CPU.
#[derive(Debug, Clone, Copy, Default)]
struct Linear {
    u: f64,
    c: f64,
}

impl Linear {
    fn add(mut self, e: &Entry, sign: f64, threads: u32) -> Self {
        let d = &e.demand;
        let u = d.utilisation();
        let jitter = match d.kind {
            Kind::Hard => (d.period_ns - d.budget_ns) as f64,
            Kind::Soft { .. } => 0.0,
        };
        let n = sign * f64::from(threads);
        self.u += n * u;
        self.c += n * (u * jitter + d.budget_ns as f64);
        self
    }
}

/// The hard reservations and the new one, plus running sums over the soft
/// reservations in priority order.
struct Bounds {
    hard: Linear,
    new: Entry,
    soft_prefix: Vec<Linear>,
}

impl Bounds {
    fn new(load: &CpuLoad, new: &Entry) -> Self {
        let hard = load
            .hard
            .iter()
            .fold(Linear::default(), |l, e| l.add(e, 1.0, e.count));
        let mut soft_prefix = Vec::with_capacity(load.soft.len() + 1);
        soft_prefix.push(Linear::default());
        for e in &load.soft {
            let last = *soft_prefix.last().expect("not empty");
            soft_prefix.push(last.add(e, 1.0, e.count));
        }
        Bounds {
            hard,
            new: new.clone(),
            soft_prefix,
        }
    }

    /// Does the bound prove one thread of `e` (priority `prio`) meets its
    /// deadline with the new reservation added? (`load.soft` is sorted by
    /// priority, highest first.)
    fn proves(&self, load: &CpuLoad, e: &Entry, prio: u8) -> bool {
        let end = load
            .soft
            .partition_point(|x| x.demand.priority().unwrap_or(0) >= prio);
        let s = self.soft_prefix[end];
        let all = Linear {
            u: self.hard.u + s.u,
            c: self.hard.c + s.c,
        }
        .add(&self.new, 1.0, self.new.count)
        .add(e, -1.0, 1);
        if all.u >= 1.0 - 1e-9 {
            return false;
        }
        let bound = (e.demand.budget_ns as f64 + all.c) / (1.0 - all.u);
        bound * (1.0 + 1e-9) + 1.0 <= e.demand.deadline_ns as f64
    }
}
