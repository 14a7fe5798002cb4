//! rtmgr: the core policy (`rtmgr_core::balance`, ARTiS §2.2–2.3 from user
//! space) fed every `sample_ns` with what `rtmgr balance` would read from
//! /proc; inside the NRT set the kernel's symmetric balancer runs.

use super::{confine_to_nrt, steer_irqs_to_nrt, Balancer};
use crate::engine::machine::{Machine, State};
use crate::SimConfig;
use rtmgr_core::balance::{Balancer as Policy, CpuObs, Observation, Place, TaskObs};

pub(crate) struct Rtmgr {
    policy: Policy,
    sample_ns: u64,
    last_sample: u64,
    /// Where the policy put each task (Fixed: not the policy's business).
    places: Vec<Place>,
    /// The observation handed to the policy, refilled at each sample (its
    /// vectors keep their capacity: no allocation per sample).
    obs: Observation,
    /// Per CPU: is it an RT CPU (the mask of a task sent back to the NRT set).
    rt: Vec<bool>,
    /// Per CPU: did the policy place a guest there for the window now ending.
    lent: Vec<bool>,
}

impl Rtmgr {
    pub(crate) fn new(cfg: &SimConfig) -> Self {
        let mut policy = Policy::new(cfg.policy.clone());
        if let Some(p) = &cfg.lending_prior {
            policy.set_lending_prior(p.clone(), p.measured_at_unix_s);
        }
        Rtmgr {
            policy,
            sample_ns: cfg.sample_ns,
            last_sample: 0,
            places: Vec::new(),
            obs: Observation {
                now_ns: 0,
                window_ns: 0,
                cpus: Vec::new(),
                tasks: Vec::new(),
                time_resolution_ns: 0,
            },
            rt: Vec::new(),
            lent: Vec::new(),
        }
    }

    /// What the observer sees of the CPUs over the window (the latency probe,
    /// unmovable load, and the lending controller's evidence: samples over
    /// `bound`, those a host stall delayed, steal, lent time) into `seen`,
    /// resetting their window counters.
    fn observe_cpus(
        m: &mut Machine,
        window: u64,
        bound: Option<u64>,
        lent: &[bool],
        seen: &mut Vec<CpuObs>,
    ) {
        let w = window.max(1) as f64;
        let late = |lat: &[u64]| bound.map_or(0, |b| lat.iter().filter(|&&l| l > b).count() as u64);
        let cpus = m.cpus.iter_mut().enumerate().map(|(i, c)| {
            let samples = c.w_lat.len() as u64;
            let late_samples = late(&c.w_lat);
            let host_stalled_samples = late(&c.w_stalled_lat);
            let p99 = if c.w_lat.is_empty() {
                None
            } else {
                let k = (c.w_lat.len() * 99).div_ceil(100).max(1) - 1;
                Some(*c.w_lat.select_nth_unstable(k).1)
            };
            c.w_lat.clear();
            c.w_stalled_lat.clear();
            let o = CpuObs {
                cpu: i as u32,
                rt: c.rt,
                rt_load: (c.w_fixed as f64 / w).min(1.0),
                latency_p99_ns: p99,
                samples,
                late_samples,
                host_stalled_samples,
                steal_ns: std::mem::take(&mut c.w_steal),
                lent_ns: if lent.get(i).copied().unwrap_or(false) {
                    window
                } else {
                    0
                },
                guard_trips: 0,
            };
            c.w_fixed = 0;
            o
        });
        seen.clear();
        seen.extend(cpus);
    }

    /// What /proc shows of the live tasks over the window into `seen`,
    /// resetting their window counters.
    fn observe_tasks(places: &[Place], m: &mut Machine, seen: &mut Vec<TaskObs>) {
        seen.clear();
        seen.reserve(m.tasks.len());
        let live = m
            .tasks
            .iter_mut()
            .enumerate()
            .filter(|(_, t)| t.state != State::Done)
            .map(|(i, t)| {
                let o = TaskObs {
                    id: i as u64,
                    class: t.class,
                    place: if t.movable { places[i] } else { Place::Fixed },
                    runnable: matches!(t.state, State::Ready | State::Running),
                    user_ns: t.w_user,
                    kernel_ns: t.w_kernel,
                    voluntary: t.w_vol,
                    involuntary: t.w_invol,
                    total_ns: t.total_ns(),
                    // User space cannot see preempt_disable(): only kernel time.
                    np_entered: false,
                    kernel_entries: None,
                };
                t.w_user = 0;
                t.w_kernel = 0;
                t.w_vol = 0;
                t.w_invol = 0;
                o
            });
        seen.extend(live);
    }
}

impl Balancer for Rtmgr {
    fn attach(&mut self, m: &mut Machine) {
        confine_to_nrt(m);
        steer_irqs_to_nrt(m);
        self.places = m
            .tasks
            .iter()
            .map(|t| if t.movable { Place::Nrt } else { Place::Fixed })
            .collect();
        self.rt = m.cpus.iter().map(|c| c.rt).collect();
        self.lent = vec![false; m.cpus.len()];
    }

    fn sample_period(&self) -> Option<u64> {
        Some(self.sample_ns)
    }

    /// One step of the core policy; its moves become the tasks' new masks.
    fn sample(&mut self, m: &mut Machine) {
        let now = m.now;
        let window = now - self.last_sample;
        self.last_sample = now;
        self.obs.now_ns = now;
        self.obs.window_ns = window;
        self.lent.fill(false);
        for (p, t) in self.places.iter().zip(&m.tasks) {
            if let (Place::Rt(c), false) = (*p, t.state == State::Done) {
                self.lent[c as usize] = true;
            }
        }
        let bound = self.policy.cfg.latency_bound_ns;
        Self::observe_cpus(m, window, bound, &self.lent, &mut self.obs.cpus);
        Self::observe_tasks(&self.places, m, &mut self.obs.tasks);
        let moves = self.policy.step(&self.obs);
        for mv in moves {
            let ti = mv.task as u32;
            let target = match mv.to {
                Place::Rt(c) => {
                    m.set_allowed(ti, |x| x == c);
                    Some(c)
                }
                Place::Nrt => {
                    let rt = &self.rt;
                    m.set_allowed(ti, |x| !rt[x as usize]);
                    None
                }
                Place::Fixed => continue,
            };
            self.places[ti as usize] = mv.to;
            m.enforce_mask(ti, target, self);
        }
    }

    fn lending_status(&self, now: u64) -> Vec<rtmgr_core::balance::LendingStatus> {
        self.policy.lending_status(now)
    }
}
