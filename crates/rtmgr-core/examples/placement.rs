//! Which placement should be the default: first-fit or worst-fit (decreasing
//! for whole sets)? ARTiS §4 asks for EDF or RM per RT CPU; the issue asks to
//! pick the placement over the RT CPUs by measurement. For random task sets
//! (UUniFast utilisations, harmonic periods, 60 % SCHED_DEADLINE — a third of
//! those with D < P — and 40 % SCHED_FIFO at random priorities), on 4 RT
//! CPUs with the default cap 0.90 and deadline share 0.95, both rules place
//! (1) whole sets, decreasing utilisation (`rtmgr admit`) and (2) the same
//! tasks arriving one by one in random order (the daemon). Reported per
//! total load: sets wholly admitted, tasks admitted, simulated deadline
//! misses (exact schedule, admission/sim.rs), the fullest CPU's headroom to
//! the cap, the soft reservations' worst response time over their deadline,
//! and the largest hard reservation (P = 10 ms) that still fits afterwards.
//!
//!   cargo run --release -p rtmgr-core --example placement [SETS_PER_LOAD]

#[path = "../benches/support/taskgen.rs"]
mod taskgen;

use rtmgr_core::admission::sim::first_miss;
use rtmgr_core::admission::{
    admit_set, Admission, AdmissionConfig, Demand, Kind, Placement, SetTask,
};
use rtmgr_core::cpuset::CpuSet;
use taskgen::{Rng, MS};

const CPUS: u32 = 4;
const TASKS: usize = 16;
const PERIODS_MS: [u64; 6] = [1, 2, 4, 5, 10, 20];
/// Simulation step and budget granularity.
const UNIT_NS: u64 = 50_000;

#[derive(Default)]
struct Tally {
    sets: usize,
    whole: usize,
    tasks: usize,
    admitted: usize,
    misses: usize,
    headroom: f64,
    worst_r_over_d: f64,
    soft_sets: usize,
    room: f64,
}

impl Tally {
    fn add(&mut self, adm: &Admission, tasks: usize, admitted: usize) {
        self.sets += 1;
        self.whole += usize::from(admitted == tasks);
        self.tasks += tasks;
        self.admitted += admitted;
        self.misses += adm.cpus().iter().filter(|c| misses(c)).count();
        let fullest = adm
            .cpus()
            .iter()
            .map(|c| c.utilisation())
            .fold(0.0, f64::max);
        self.headroom += adm.cfg.cap - fullest;
        let worst = adm
            .cpus()
            .iter()
            .flat_map(|c| c.soft.iter())
            .map(|e| e.response_ns as f64 / e.demand.deadline_ns as f64)
            .fold(f64::NAN, f64::max);
        if !worst.is_nan() {
            self.soft_sets += 1;
            self.worst_r_over_d += worst;
        }
        self.room += room(adm);
    }

    fn print(&self, load: f64, how: &str) {
        let n = self.sets as f64;
        println!(
            "{load:>5.2} {how:<16} {:>7.1} {:>7.1} {:>6} {:>9.3} {:>9.3} {:>9.3}",
            100.0 * self.whole as f64 / n,
            100.0 * self.admitted as f64 / self.tasks as f64,
            self.misses,
            self.headroom / n,
            self.worst_r_over_d / self.soft_sets.max(1) as f64,
            self.room / n,
        );
    }
}

/// Does an exact schedule of this CPU miss a deadline?
fn misses(c: &rtmgr_core::admission::CpuLoad) -> bool {
    let demands: Vec<Demand> = c
        .hard
        .iter()
        .chain(c.soft.iter())
        .flat_map(|e| (0..e.count).map(move |_| e.demand))
        .collect();
    first_miss(&demands, UNIT_NS).is_some()
}

/// The largest utilisation of one more hard reservation (P = 10 ms, D = P)
/// that some CPU still takes, to 0.01.
fn room(adm: &Admission) -> f64 {
    (1..=95)
        .rev()
        .map(|pct| pct as f64 / 100.0)
        .find(|u| {
            let w = (u * 10.0 * MS as f64) as u64;
            let d = Demand::new(10 * MS, w, None, Kind::Hard).expect("demand");
            adm.check(&d, 1, None).is_ok()
        })
        .unwrap_or(0.0)
}

fn task_set(rng: &mut Rng, load: f64) -> Vec<SetTask> {
    let total = load * f64::from(CPUS);
    taskgen::uunifast(rng, TASKS, total)
        .into_iter()
        .enumerate()
        .map(|(i, u)| {
            let u = u.min(0.85);
            let demand = match rng.below(10) {
                0..=3 => taskgen::demand(rng, u, &PERIODS_MS, UNIT_NS, false, None),
                4 | 5 => taskgen::demand(rng, u, &PERIODS_MS, UNIT_NS, true, None),
                _ => {
                    let prio = 1 + rng.below(97) as u8;
                    taskgen::demand(rng, u, &PERIODS_MS, UNIT_NS, true, Some(prio))
                }
            };
            SetTask {
                name: format!("t{i}"),
                demand,
                count: 1,
                cpu: None,
            }
        })
        .collect()
}

fn config(placement: Placement) -> AdmissionConfig {
    AdmissionConfig {
        placement,
        ..AdmissionConfig::default()
    }
}

fn main() {
    let sets: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(500);
    let cpus = CpuSet::parse_list(&format!("0-{}", CPUS - 1)).expect("cpu list");
    println!(
        "{CPUS} RT CPUs, {TASKS} tasks per set, {sets} sets per load; load = total U / CPUs (before the cap)"
    );
    println!(
        "{:>5} {:<16} {:>7} {:>7} {:>6} {:>9} {:>9} {:>9}",
        "load", "placement", "whole%", "tasks%", "misses", "headroom", "soft R/D", "room"
    );
    for load in [0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9] {
        let mut rng = Rng::new((load * 1000.0) as u64);
        let mut tallies: Vec<(&str, Tally)> = [
            "first-fit decr.",
            "worst-fit decr.",
            "first-fit online",
            "worst-fit online",
        ]
        .into_iter()
        .map(|n| (n, Tally::default()))
        .collect();
        for _ in 0..sets {
            let tasks = task_set(&mut rng, load);
            for (k, placement) in [Placement::FirstFit, Placement::WorstFit]
                .into_iter()
                .enumerate()
            {
                let (verdict, adm) = admit_set(config(placement), &cpus, &tasks);
                tallies[k].1.add(&adm, tasks.len(), verdict.placed.len());
                let mut adm = Admission::new(config(placement), &cpus);
                let admitted = tasks
                    .iter()
                    .enumerate()
                    .filter(|(i, t)| adm.admit(*i as u64, t.demand, 1, None).is_ok())
                    .count();
                tallies[k + 2].1.add(&adm, tasks.len(), admitted);
            }
        }
        for (how, t) in &tallies {
            t.print(load, how);
        }
    }
    println!("whole%: sets wholly admitted; tasks%: tasks admitted; misses: CPUs whose exact");
    println!("schedule missed a deadline; headroom: cap - U of the fullest CPU (mean); soft R/D:");
    println!("worst soft response time / deadline (mean over sets with soft tasks); room: largest");
    println!("U of one more hard 10 ms reservation that still fits (mean).");
}
