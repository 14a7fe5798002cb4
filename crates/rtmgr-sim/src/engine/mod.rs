//! The simulator's engine: a seeded, deterministic discrete-event loop over
//! the model machine (per-CPU run queues, ticks, device interrupts,
//! non-preemptible sections, wake-ups, migrations) and the accounting behind
//! the lbµ figures (ARTiS §3.3). The balancer comes in through one interface.
//!
//! An event is one entry taken off the queue and processed: the end of a
//! CPU's running segment (the task completes, goes to sleep, or enters or
//! leaves a non-preemptible section), a task's wake-up, a scheduler tick of
//! a busy CPU (round-robin slices end there), a device interrupt, a periodic
//! balancing pass, a sample of a sampling balancer, or a host preemption
//! attempt (`host`, only with a host model). Each is counted in `Sim::events` and
//! hashed, with its time, into the report's trace_hash; events/s (the
//! `sim_speed` bench, `rtmgr lb --sim`) are these per second of `Sim::run`.

mod events;
mod handlers;
mod host;
pub(crate) mod machine;
mod migrate;
mod sched;

use crate::balancers::{self, Balancer, Runner};
use crate::{HostReport, LbResult, SimConfig, SimError, SimReport, TaskDef, TaskReport};
use events::Ev;

use machine::{Log, Machine};

/// One simulation: the model machine, the balancer that runs it, and the
/// count and hash of the events processed so far.
pub struct Sim {
    m: Machine,
    balancer: Box<dyn Runner>,
    log: Log,
    pub trace: Vec<(u64, u64)>,
}

/// Every balancer runs the event loop compiled for its own type.
impl<B: Balancer> Runner for B {
    fn run_loop(&mut self, m: &mut Machine, log: &mut Log, trace: &mut Vec<(u64, u64)>) {
        run_loop(m, self, log, trace);
    }
}

/// Run to completion (or `max_ns`).
fn run_loop(m: &mut Machine, b: &mut impl Balancer, log: &mut Log, trace: &mut Vec<(u64, u64)>) {
    let Log {
        mut events,
        mut hash,
    } = *log;
    while m.left > 0 {
        let Some((t, ev)) = m.queue.next() else { break };
        if t > m.cfg.max_ns {
            m.now = m.cfg.max_ns;
            break;
        }
        m.now = t;
        events += 1;
        // Count and hash the event in its own arm, where its code is known
        // (one branch on the kind of event, not two).
        let keep = m.cfg.keep_trace;
        let mut log = |code: u64| {
            hash = (hash ^ t ^ code.rotate_left(29)).wrapping_mul(0x0100_0000_01b3);
            if keep {
                trace.push((t, code));
            }
        };
        match ev {
            Ev::Run { cpu } => {
                log(ev.code());
                m.on_run(cpu, b);
            }
            Ev::Wake { task } => {
                log(ev.code());
                m.on_wake(task, b);
            }
            Ev::Tick { cpu } => {
                log(ev.code());
                m.on_tick(cpu, b);
            }
            Ev::Irq => {
                log(ev.code());
                m.on_irq();
            }
            Ev::Balance => {
                log(ev.code());
                balancers::periodic_balance(m, b);
                m.queue.push(m.now + m.cfg.balance_ns, Ev::Balance);
            }
            Ev::Sample => {
                log(ev.code());
                b.sample(m);
                let period = b.sample_period().expect("sampling balancer");
                m.queue.push(m.now + period, Ev::Sample);
            }
            Ev::Host => {
                log(ev.code());
                m.on_host(m.cfg.host.expect("host model"));
            }
        }
    }
    *log = Log { events, hash };
    m.close_books();
}

impl Sim {
    pub fn new(cfg: SimConfig, defs: Vec<TaskDef>) -> Result<Sim, SimError> {
        if let Some(h) = &cfg.host {
            h.check()?;
        }
        let mut m = Machine::new(cfg, defs)?;
        let mut balancer = balancers::new(&m.cfg);
        balancer.attach(&mut m);
        m.start(balancer.sample_period());
        Ok(Sim {
            m,
            balancer,
            log: Log {
                events: 0,
                hash: 0xcbf2_9ce4_8422_2325,
            },
            trace: Vec::new(),
        })
    }

    /// Run to completion (or `max_ns`).
    pub fn run(&mut self) {
        self.balancer
            .run_loop(&mut self.m, &mut self.log, &mut self.trace);
    }

    /// Events processed so far: each segment end, wake-up, tick, device
    /// interrupt, balancing pass and policy sample taken off the queue.
    pub fn events(&self) -> u64 {
        self.log.events
    }

    pub fn report(&self) -> SimReport {
        let m = &self.m;
        let sim_ns = m.now.max(1);
        let tasks: Vec<TaskReport> = m
            .tasks
            .iter()
            .map(|t| {
                let total = t.total_ns();
                TaskReport {
                    name: t.def.name.clone(),
                    class: t.def.class,
                    completion_ns: t.done_at,
                    cpu_ns: total,
                    kernel_ns: t.kernel_ns,
                    cpu_percent: t
                        .per_cpu
                        .iter()
                        .map(|&x| 100.0 * x as f64 / total.max(1) as f64)
                        .collect(),
                    switches: t.switches,
                    migrations: t.migrations,
                    pingpongs: t.pingpongs,
                }
            })
            .collect();
        SimReport {
            balancer: m.cfg.balancer,
            seed: m.cfg.seed,
            sim_ns,
            events: self.log.events,
            trace_hash: self.log.hash,
            result: LbResult::new(m.cfg.cpus, m.cfg.rt.clone(), tasks, m.lat.hist().summary(0)),
            cpu_busy_percent: m
                .cpus
                .iter()
                .map(|c| 100.0 * c.busy_ns as f64 / sim_ns as f64)
                .collect(),
            host: m.cfg.host.map(|model| HostReport {
                model,
                stalls: m.host_stalls,
                steal_ns: m.cpus.iter().map(|c| c.steal_ns).collect(),
                lending: self.balancer.lending_status(m.now),
            }),
        }
    }
}
