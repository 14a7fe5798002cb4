//! Where `rtmgr top`'s figures come from (issue 23): a running `rtmgr serve`
//! over its socket (status and list), else the partition in place; /proc/stat,
//! /proc/interrupts and the reservations' schedstat for what changed since the
//! last refresh. Read-only: only `--probe` (rtmgr_linux::probe::live) sets
//! a thread's policy.

use super::snapshot::{DaemonLine, NrtCpu, Reservation, RtCpu, Snapshot, SCHEMA};
use rtmgr_core::proctext::{cpu_times, parse_schedstat, CpuTimes};
use rtmgr_core::protocol::{LiveCpu, ReservationInfo, StatusInfo};
use rtmgr_core::CpuSet;
use rtmgr_lab::procstat::{deltas, parse_counters, CounterTable};
use rtmgr_linux::probe::live::LiveProbe;
use rtmgr_linux::Host;
use rtmgr_rt::client::Client;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// IRQ sources named per RT CPU.
const IRQ_SOURCES: usize = 5;

/// Readings kept between refreshes for the deltas.
struct Previous {
    at: std::time::Instant,
    times: BTreeMap<u32, CpuTimes>,
    irqs: CounterTable,
    /// Reservation id → CPU time of its threads (ns).
    runtime: BTreeMap<u64, u64>,
}

pub struct Collector {
    host: Host,
    socket: PathBuf,
    journal: PathBuf,
    client: Option<Client>,
    previous: Option<Previous>,
    pub probe: Option<LiveProbe>,
}

/// What the daemon said this time.
struct FromDaemon {
    status: StatusInfo,
    reservations: Vec<ReservationInfo>,
}

impl Collector {
    pub fn new(host: Host, socket: PathBuf, journal: PathBuf) -> Collector {
        Collector {
            host,
            socket,
            journal,
            client: None,
            previous: None,
            probe: None,
        }
    }

    /// The RT and NRT CPUs: the daemon's, else the partition in place, else
    /// every online CPU as NRT.
    pub fn partition(&mut self) -> (CpuSet, CpuSet, Vec<String>) {
        if let Ok(d) = self.ask_daemon() {
            let parse = |s: &str| CpuSet::parse_list(s).unwrap_or_default();
            return (
                parse(&d.status.rt_cpus),
                parse(&d.status.nrt_cpus),
                Vec::new(),
            );
        }
        self.partition_in_place()
    }

    fn partition_in_place(&self) -> (CpuSet, CpuSet, Vec<String>) {
        match rtmgr_linux::partition::current(&self.host, &self.journal) {
            Ok(Some(a)) => (a.plan.rt, a.plan.nrt, Vec::new()),
            Ok(None) => {
                let online = rtmgr_linux::cpus::online(&self.host).unwrap_or_default();
                let note = "no partition applied: every CPU is NRT".to_string();
                (CpuSet::default(), online, vec![note])
            }
            Err(e) => (
                CpuSet::default(),
                rtmgr_linux::cpus::online(&self.host).unwrap_or_default(),
                vec![format!("partition journal unreadable: {e}")],
            ),
        }
    }

    fn ask_daemon(&mut self) -> Result<FromDaemon, String> {
        if std::env::var_os(rtmgr_rt::client::NO_DAEMON_ENV).is_some() {
            return Err(format!("{} is set", rtmgr_rt::client::NO_DAEMON_ENV));
        }
        if self.client.is_none() {
            self.client = Some(Client::connect_to(&self.socket).map_err(|e| e.to_string())?);
        }
        let c = self.client.as_mut().expect("connected above");
        let answer = c.status().and_then(|status| {
            Ok(FromDaemon {
                status,
                reservations: c.list()?,
            })
        });
        // A broken connection is made again at the next refresh.
        answer.map_err(|e| {
            self.client = None;
            e.to_string()
        })
    }

    /// The picture now; deltas cover the time since the previous call (None the first time).
    pub fn collect(&mut self) -> Snapshot {
        let daemon = self.ask_daemon();
        let now = Previous {
            at: std::time::Instant::now(),
            times: self
                .host
                .read_opt("/proc/stat")
                .map(|t| cpu_times(&t))
                .unwrap_or_default(),
            irqs: parse_counters(&self.host.read_opt("/proc/interrupts").unwrap_or_default()),
            runtime: BTreeMap::new(),
        };
        let mut snap = Snapshot {
            schema: SCHEMA.into(),
            interval_ms: self
                .previous
                .as_ref()
                .map_or(0, |p| now.at.duration_since(p.at).as_millis() as u64),
            probe: self.probe.as_ref().map(|p| p.describe()),
            ..Snapshot::default()
        };
        let (rt, nrt, live) = match daemon {
            Ok(d) => {
                snap.source = "daemon".into();
                let parse = |s: &str| CpuSet::parse_list(s).unwrap_or_default();
                let (rt, nrt) = (parse(&d.status.rt_cpus), parse(&d.status.nrt_cpus));
                let live = d.status.live.clone().map(|l| l.cpus).unwrap_or_default();
                if d.status.live.is_none() {
                    snap.notes
                        .push("this daemon sends no live figures (older than rtmgr top)".into());
                }
                snap.daemon = Some(daemon_line(&d.status, &live));
                snap.reservations = d.reservations.iter().map(reservation).collect();
                (rt, nrt, live)
            }
            Err(why) => {
                snap.source = "partition in place".into();
                snap.notes.push(format!("no daemon ({why})"));
                let (rt, nrt, notes) = self.partition_in_place();
                snap.notes.extend(notes);
                let live = match &self.probe {
                    Some(p) => p.live(&self.host),
                    None => Vec::new(),
                };
                (rt, nrt, live)
            }
        };
        let prev = self.previous.take();
        let kthreads = rtmgr_linux::unmovable::pinned_kthreads(&self.host);
        let irq_deltas = prev.as_ref().map(|p| {
            deltas(
                &p.irqs,
                &now.irqs,
                &rt.iter().collect::<Vec<_>>(),
                IRQ_SOURCES,
            )
        });
        snap.rt = rt
            .iter()
            .map(|cpu| {
                let mut c = RtCpu {
                    cpu,
                    load: load(prev.as_ref(), &now, cpu),
                    steal_ticks: steal(prev.as_ref(), &now, cpu),
                    kthreads: kthreads
                        .get(&cpu)
                        .map(|v| v.iter().map(|t| t.comm.clone()).collect())
                        .unwrap_or_default(),
                    ..RtCpu::default()
                };
                if let Some(e) = irq_deltas.iter().flatten().find(|e| e.cpu == cpu) {
                    c.irqs = Some(e.total);
                    c.irq_sources = e.top.iter().map(|s| (s.source.clone(), s.count)).collect();
                }
                if let Some(l) = live.iter().find(|l| l.cpu == cpu) {
                    merge_live(&mut c, l, snap.daemon.is_some());
                }
                c
            })
            .collect();
        snap.nrt = nrt
            .iter()
            .map(|cpu| NrtCpu {
                cpu,
                load: load(prev.as_ref(), &now, cpu),
                steal_ticks: steal(prev.as_ref(), &now, cpu),
            })
            .collect();
        let mut now = now;
        for r in &mut snap.reservations {
            let ran: u64 = r
                .threads
                .iter()
                .filter_map(|t| self.host.read_opt(format!("/proc/{t}/schedstat")))
                .filter_map(|s| parse_schedstat(s.as_bytes()).map(|x| x.0))
                .sum();
            now.runtime.insert(r.id, ran);
            r.budget_used = prev.as_ref().and_then(|p| {
                let before = *p.runtime.get(&r.id)?;
                let elapsed = now.at.duration_since(p.at).as_nanos() as u64;
                let elapsed = Some(elapsed).filter(|&e| e > 0)? as f64;
                let share = r.budget_ns as f64 / r.period_ns.max(1) as f64;
                Some(ran.saturating_sub(before) as f64 / elapsed / share)
            });
        }
        self.previous = Some(now);
        snap
    }
}

fn daemon_line(s: &StatusInfo, live: &[LiveCpu]) -> DaemonLine {
    DaemonLine {
        pid: s.daemon_pid,
        uptime_s: s.uptime_s,
        requests: s.requests,
        granted: s.granted,
        refused: s.refused,
        errors: s.errors,
        drift: s.drift.clone(),
        evictions: live.iter().flat_map(|c| c.evictions.values()).sum(),
        starvation_boosts: live.iter().map(|c| c.starvation_boosts).sum(),
        balancer: s.balancer.clone(),
    }
}

fn reservation(r: &ReservationInfo) -> Reservation {
    Reservation {
        id: r.id,
        name: r.name.clone(),
        pid: r.pid,
        cpu: r.cpu,
        class: r.class.clone(),
        policy: r.policy.clone(),
        budget_ns: r.budget_ns,
        period_ns: r.period_ns,
        threads: r.threads.clone(),
        budget_used: None,
    }
}

/// The daemon's (or the probe's) figures of one RT CPU; counters only from a daemon.
fn merge_live(c: &mut RtCpu, l: &LiveCpu, daemon: bool) {
    c.latency = l.latency;
    c.history_ns = l.latency_history_ns.clone();
    c.host_stalls = l.host_stalls;
    c.guests = l.guests.clone();
    c.lending = l.lending.clone();
    if daemon {
        c.evictions = Some(l.evictions.clone());
        c.starvation_boosts = Some(l.starvation_boosts);
    }
}

fn load(prev: Option<&Previous>, now: &Previous, cpu: u32) -> Option<f64> {
    let (a, b) = (prev?.times.get(&cpu)?, now.times.get(&cpu)?);
    let total = b.total.checked_sub(a.total).filter(|&t| t > 0)?;
    Some(b.busy.saturating_sub(a.busy) as f64 / total as f64)
}

fn steal(prev: Option<&Previous>, now: &Previous, cpu: u32) -> Option<u64> {
    let (a, b) = (prev?.times.get(&cpu)?, now.times.get(&cpu)?);
    Some(b.steal.saturating_sub(a.steal))
}
