//! Closed-loop lending per RT CPU: ARTiS §2.1's promise that guests never
//! delay RT0, kept by measurement rather than assumed. Each RT CPU's lent
//! windows are judged against its guest-free ones (late probe samples, and
//! late samples the host stalled); lending stops with an exponential retry
//! back-off when it harms, and a guest cap shrinks on in-guest harm (AIMD).
//! Pure and deterministic: it runs live and in the simulator (`rtmgr-sim`).

use super::CpuObs;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Tunables of the lending controller (`PolicyConfig::lending`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LendingConfig {
    /// Run the controller; off, RT CPUs are lent whatever the evidence.
    pub enabled: bool,
    /// How many of the last lent windows are judged together (1..=32).
    pub judge_windows: u32,
    /// Lending stops when this many of them had a late sample the host
    /// stalled (steal advancing, or a vCPU that did not run). One, by
    /// default: a stalled probe misses every release the stall covers (a
    /// 9 ms stall is 36 late samples at 250 µs), so a second stall would
    /// already put the p99.9 of a minute's run over the shield's.
    pub stalled_to_stop: u32,
    /// ... or when this many were late beyond the guest-free baseline
    /// (in-guest causes the latency guard did not stop).
    pub late_to_stop: u32,
    /// A lent window is late when its late samples exceed this factor times
    /// what the guest-free windows' late share predicts for its samples.
    pub late_tolerance: f64,
    /// First retry after lending stopped; doubles at each further stop, up to `retry_max_ns`.
    pub retry_initial_ns: u64,
    pub retry_max_ns: u64,
    /// After this much lent time without a stop, the back-off starts again at `retry_initial_ns`.
    pub forgive_after_ns: u64,
    /// At most this many guests per RT CPU (0: no limit); the cap halves on
    /// a late window and grows by one per clean one, up to this.
    pub max_guests: u32,
    /// A host-preemption prior older than this is not used.
    pub prior_max_age_s: u64,
    /// Lending starts off when the host test's capacity measurement found
    /// that the last busy vCPU adds less than this share of one CPU's work
    /// (`rtmgr status` item `cpu_capacity`): lending that buys no throughput
    /// only risks latency. 0 turns the rule off; at most 1.
    pub min_marginal_capacity: f64,
}

impl Default for LendingConfig {
    fn default() -> Self {
        LendingConfig {
            enabled: true,
            judge_windows: 20,
            stalled_to_stop: 1,
            late_to_stop: 4,
            late_tolerance: 1.2,
            retry_initial_ns: 2_000_000_000,
            retry_max_ns: 64_000_000_000,
            forgive_after_ns: 120_000_000_000,
            max_guests: 0,
            prior_max_age_s: 7 * 24 * 3600,
            min_marginal_capacity: 0.25,
        }
    }
}

/// A malformed lending configuration (one error, the first found).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("lending config: {0}")]
pub struct LendingConfigError(pub String);

impl LendingConfig {
    pub fn validate(&self) -> Result<(), LendingConfigError> {
        let bad = |m: String| Err(LendingConfigError(m));
        if !(1..=32).contains(&self.judge_windows) {
            return bad(format!(
                "judge_windows must be 1..=32 (got {})",
                self.judge_windows
            ));
        }
        for (name, v) in [
            ("stalled_to_stop", self.stalled_to_stop),
            ("late_to_stop", self.late_to_stop),
        ] {
            if v == 0 || v > self.judge_windows {
                return bad(format!(
                    "{name} must be 1..=judge_windows ({}) (got {v})",
                    self.judge_windows
                ));
            }
        }
        if !self.late_tolerance.is_finite() || self.late_tolerance < 1.0 {
            return bad(format!(
                "late_tolerance must be ≥ 1 (got {})",
                self.late_tolerance
            ));
        }
        if !(0.0..=1.0).contains(&self.min_marginal_capacity) {
            return bad(format!(
                "min_marginal_capacity must be 0..=1 (got {})",
                self.min_marginal_capacity
            ));
        }
        if self.retry_initial_ns == 0 || self.retry_max_ns < self.retry_initial_ns {
            return bad(format!(
                "need 0 < retry_initial_ns ({}) ≤ retry_max_ns ({})",
                self.retry_initial_ns, self.retry_max_ns
            ));
        }
        Ok(())
    }
}

/// What a host-preemption test found before the balancer started (`rtmgr
/// status`, items `host_preemption` and `cpu_capacity`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LendingPrior {
    pub host_preempts_busy_vcpus: bool,
    /// Typical stall of a busy vCPU (the host's time slice), ns.
    pub stall_ns: u64,
    pub measured_at_unix_s: u64,
    /// What the last busy vCPU (the RT CPU, lent) added, in CPUs' worth of
    /// work (`CpuCapacity::marginal`); None when not measured.
    #[serde(default)]
    pub marginal_capacity: Option<f64>,
    /// How many CPUs' worth of work all busy vCPUs did (`effective_cpus`).
    #[serde(default)]
    pub effective_cpus: Option<f64>,
}

impl LendingPrior {
    /// Lending adds less than `cfg.min_marginal_capacity` of a CPU.
    pub fn adds_no_capacity(&self, cfg: &LendingConfig) -> bool {
        self.marginal_capacity
            .is_some_and(|m| m < cfg.min_marginal_capacity)
    }

    /// Why lending starts off under this prior (None: it starts on).
    pub fn off_cause(&self, cfg: &LendingConfig) -> Option<String> {
        let mut why = Vec::new();
        if self.host_preempts_busy_vcpus {
            why.push(format!(
                "the host preempts busy vCPUs (stalls of {}, measured before the start)",
                ms(self.stall_ns)
            ));
        }
        if let (true, Some(m)) = (self.adds_no_capacity(cfg), self.marginal_capacity) {
            let all = self.effective_cpus.map_or(String::new(), |e| {
                format!("all busy vCPUs did {e:.1}× the work of one, ")
            });
            why.push(format!(
                "lending adds no capacity ({all}the last added {m:.2} of a CPU, below {:.2}; \
                 measured before the start): lending that buys no throughput only risks latency",
                cfg.min_marginal_capacity
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

/// A time lending was off on one CPU, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffPeriod {
    pub from_ns: u64,
    /// When lending was retried (None: still off).
    pub to_ns: Option<u64>,
    pub reason: String,
}

/// One RT CPU's lending as the live side prints it (and its JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LendingStatus {
    pub cpu: u32,
    pub lending: bool,
    /// Why lending is off, e.g. "lending off on CPU 0: 2 of 7 lent windows
    /// stalled by the host, 9.0 ms each; retry in 64 s".
    pub reason: Option<String>,
    pub retry_at_ns: Option<u64>,
    /// Lent windows judged (a window in which the CPU had a guest and the probe sampled).
    pub lends: u64,
    /// ... of which the host stalled a late sample.
    pub lends_stalled: u64,
    /// ... late beyond the guest-free baseline.
    pub lends_late: u64,
    /// Steal in the stalled lent windows.
    pub stalled_steal_ns: u64,
    /// Guests this CPU takes at most now (None: no limit).
    pub guest_cap: Option<u32>,
    pub off_periods: Vec<OffPeriod>,
}

/// One judged lent window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Judged {
    stalled: bool,
    late: bool,
    steal_ns: u64,
}

/// The controller's memory of one RT CPU.
#[derive(Debug, Clone, PartialEq)]
struct CpuLending {
    off_until_ns: Option<u64>,
    /// Why it is off (without the CPU and the retry, added when shown).
    cause: String,
    /// The back-off the next stop will use.
    next_backoff_ns: u64,
    /// Lent time since the last stop (forgiveness).
    clean_lent_ns: u64,
    recent: VecDeque<Judged>,
    /// Guest-free windows' late and total samples (decayed).
    free_late: u64,
    free_samples: u64,
    guest_cap: u32,
    lends: u64,
    lends_stalled: u64,
    lends_late: u64,
    stalled_steal_ns: u64,
    off_periods: Vec<OffPeriod>,
}

/// The lending controller of every RT CPU. Keep it (Clone, or
/// `Balancer::take_lending`/`restore_lending`) across runs whose task ids
/// differ: it knows CPUs only. Its times are the observations' clock, which
/// must then be the same (e.g. CLOCK_MONOTONIC) across those runs.
#[derive(Debug, Clone, PartialEq)]
pub struct LendingControl {
    cfg: LendingConfig,
    prior: Option<LendingPrior>,
    cpus: BTreeMap<u32, CpuLending>,
}

impl LendingControl {
    pub fn new(cfg: LendingConfig) -> Self {
        LendingControl {
            cfg,
            prior: None,
            cpus: BTreeMap::new(),
        }
    }

    /// What a host test found before the start; an RT CPU first seen after
    /// this starts with lending off (for the longest back-off) if the prior
    /// says the host preempts busy vCPUs, or that lending adds less than
    /// `min_marginal_capacity` of a CPU, and is younger than
    /// `prior_max_age_s` at `now_unix_s`. Returns whether it was used.
    pub fn set_prior(&mut self, prior: LendingPrior, now_unix_s: u64) -> bool {
        let fresh = now_unix_s.saturating_sub(prior.measured_at_unix_s) <= self.cfg.prior_max_age_s;
        let off = prior.off_cause(&self.cfg).is_some();
        self.prior = (fresh && off).then_some(prior);
        self.prior.is_some()
    }

    pub fn config(&self) -> &LendingConfig {
        &self.cfg
    }

    /// Replace the tunables (a controller kept across runs, a new config);
    /// the memory stays.
    pub fn set_config(&mut self, cfg: LendingConfig) {
        self.cfg = cfg;
    }

    /// May `cpu` be lent at `now`?
    pub fn allows(&self, cpu: u32, now: u64) -> bool {
        !self.cfg.enabled
            || self
                .cpus
                .get(&cpu)
                .is_none_or(|c| c.off_until_ns.is_none_or(|t| now >= t))
    }

    /// How many guests `cpu` may have.
    pub fn guest_cap(&self, cpu: u32) -> usize {
        match self.cpus.get(&cpu) {
            Some(c) if self.cfg.enabled && c.guest_cap != u32::MAX => c.guest_cap as usize,
            _ => usize::MAX,
        }
    }

    /// Learn from one window's RT CPUs (`guests`: how many guests each had
    /// at the end of it); returns the CPUs whose lending stopped in it
    /// (their guests must leave).
    pub fn observe(
        &mut self,
        now: u64,
        cpus: &[CpuObs],
        guests: impl Fn(u32) -> usize,
    ) -> Vec<u32> {
        let mut stopped = Vec::new();
        if !self.cfg.enabled {
            return stopped;
        }
        for c in cpus.iter().filter(|c| c.rt) {
            let cfg = &self.cfg;
            let prior = self.prior.as_ref();
            let st = self
                .cpus
                .entry(c.cpu)
                .or_insert_with(|| CpuLending::new(cfg, prior, now));
            if st.observe(cfg, now, c, guests(c.cpu)) {
                stopped.push(c.cpu);
            }
        }
        stopped
    }

    /// Every RT CPU's state at `now`, by CPU number.
    pub fn status(&self, now: u64) -> Vec<LendingStatus> {
        self.cpus
            .iter()
            .map(|(&cpu, c)| c.status(cpu, now, &self.cfg))
            .collect()
    }
}

impl CpuLending {
    fn new(cfg: &LendingConfig, prior: Option<&LendingPrior>, now: u64) -> Self {
        let ceiling = if cfg.max_guests == 0 {
            u32::MAX
        } else {
            cfg.max_guests
        };
        let mut c = CpuLending {
            off_until_ns: None,
            cause: String::new(),
            next_backoff_ns: cfg.retry_initial_ns,
            clean_lent_ns: 0,
            recent: VecDeque::with_capacity(cfg.judge_windows as usize),
            free_late: 0,
            free_samples: 0,
            guest_cap: ceiling,
            lends: 0,
            lends_stalled: 0,
            lends_late: 0,
            stalled_steal_ns: 0,
            off_periods: Vec::new(),
        };
        if let Some(cause) = prior.and_then(|p| p.off_cause(cfg)) {
            c.next_backoff_ns = cfg.retry_max_ns;
            c.stop(now, cause);
        }
        c
    }

    /// Judge one window; true if lending stopped in it.
    fn observe(&mut self, cfg: &LendingConfig, now: u64, c: &CpuObs, guests: usize) -> bool {
        if c.samples > 0 && c.lent_ns == 0 {
            // Guest-free, lending on or off: what the CPU's own tasks cost.
            self.free_late += c.late_samples;
            self.free_samples += c.samples;
            if self.free_samples > 1_000_000 {
                self.free_late /= 2;
                self.free_samples /= 2;
            }
            return false;
        }
        if let Some(until) = self.off_until_ns {
            if now < until {
                return false;
            }
            // Retry: lending is on again, on probation (the back-off stays).
            self.off_until_ns = None;
            self.recent.clear();
            if let Some(p) = self.off_periods.last_mut() {
                p.to_ns = Some(until);
            }
        }
        if c.samples == 0 {
            return false;
        }
        let expected = if self.free_samples == 0 {
            0.0
        } else {
            self.free_late as f64 * c.samples as f64 / self.free_samples as f64
        };
        let j = Judged {
            stalled: c.host_stalled_samples > 0,
            late: c.late_samples as f64 > expected * cfg.late_tolerance,
            steal_ns: c.steal_ns,
        };
        self.lends += 1;
        self.lends_stalled += u64::from(j.stalled);
        self.lends_late += u64::from(j.late);
        if j.stalled {
            self.stalled_steal_ns += j.steal_ns;
        }
        let ceiling = if cfg.max_guests == 0 {
            u32::MAX
        } else {
            cfg.max_guests
        };
        if j.late {
            // Multiplicative decrease, from the guests it had.
            let had = u32::try_from(guests).unwrap_or(u32::MAX);
            self.guest_cap = (self.guest_cap.min(had.max(1)) / 2).max(1);
            self.clean_lent_ns = 0;
        } else {
            self.guest_cap = self.guest_cap.saturating_add(1).min(ceiling);
            self.clean_lent_ns += c.lent_ns;
            if self.clean_lent_ns >= cfg.forgive_after_ns {
                self.next_backoff_ns = cfg.retry_initial_ns;
            }
        }
        if self.recent.len() == cfg.judge_windows as usize {
            self.recent.pop_front();
        }
        self.recent.push_back(j);
        let n = self.recent.len();
        let stalled = self.recent.iter().filter(|j| j.stalled);
        let (n_stalled, steal) = stalled.fold((0, 0), |(k, t), j| (k + 1, t + j.steal_ns));
        let late = self.recent.iter().filter(|j| j.late).count();
        let cause = if n_stalled >= cfg.stalled_to_stop as usize {
            let each = steal / n_stalled as u64;
            format!(
                "{n_stalled} of {n} lent windows stalled by the host, {} each",
                ms(each)
            )
        } else if late >= cfg.late_to_stop as usize {
            format!("{late} of {n} lent windows late beyond the guest-free tail")
        } else {
            return false;
        };
        self.stop(now, cause);
        self.next_backoff_ns = (self.next_backoff_ns.saturating_mul(2)).min(cfg.retry_max_ns);
        true
    }

    /// Lending stops at `now` for the current back-off.
    fn stop(&mut self, now: u64, cause: String) {
        self.off_until_ns = Some(now.saturating_add(self.next_backoff_ns));
        self.clean_lent_ns = 0;
        self.recent.clear();
        self.off_periods.push(OffPeriod {
            from_ns: now,
            to_ns: None,
            reason: cause.clone(),
        });
        self.cause = cause;
    }

    fn status(&self, cpu: u32, now: u64, cfg: &LendingConfig) -> LendingStatus {
        let off = self.off_until_ns.filter(|&t| cfg.enabled && now < t);
        let mut off_periods = self.off_periods.clone();
        // A retry that is due but not yet observed ends its period too.
        if let (Some(until), None, Some(p)) = (self.off_until_ns, off, off_periods.last_mut()) {
            p.to_ns.get_or_insert(until);
        }
        LendingStatus {
            cpu,
            lending: off.is_none(),
            reason: off.map(|t| {
                format!(
                    "lending off on CPU {cpu}: {}; retry in {} s",
                    self.cause,
                    (t - now).div_ceil(1_000_000_000)
                )
            }),
            retry_at_ns: off,
            lends: self.lends,
            lends_stalled: self.lends_stalled,
            lends_late: self.lends_late,
            stalled_steal_ns: self.stalled_steal_ns,
            guest_cap: (self.guest_cap != u32::MAX).then_some(self.guest_cap),
            off_periods,
        }
    }
}

/// A duration in ms with one decimal ("9.0 ms").
fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

#[cfg(test)]
#[path = "tests/lending.rs"]
mod tests;
