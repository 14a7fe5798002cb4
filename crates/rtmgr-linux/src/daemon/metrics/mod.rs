//! `rtmgr serve --metrics ADDR`: what a fleet watches of each RT node, as
//! OpenMetrics text over HTTP (DROPS §4.1: the resource manager accounts for
//! what it granted; ARTiS §2.2–2.3: the guard's latency and its evictions).
//! Per RT CPU: the latency guard's histogram, grants, admission refusals,
//! evictions, starvation boosts; and drift repairs by kind. Fed by small
//! hooks: the Manager's responses, reconcile's repairs, and the balancer's
//! `LiveEvents`. `http.rs` answers scrapes. Every series whose labels are
//! known at start is there at 0 from the first scrape (Prometheus's advice),
//! so dashboards and alerts see it before its first event.

mod http;

pub use http::Exporter;

use crate::balance::LiveEvents;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use rtmgr_core::admission::CpuRefusal;
use rtmgr_core::partition::drift_events::ALL as DRIFT_EVENTS;
use rtmgr_core::partition::{drift_kind, KnobId, ResourceKnobId};
use rtmgr_core::protocol::{AnswerOp, RefusalKind, Reply, Response};
use rtmgr_core::CpuSet;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CpuLabel {
    cpu: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EvictionLabels {
    cpu: u32,
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

/// Every drift kind a daemon may count, known at start.
fn drift_kinds() -> impl Iterator<Item = String> {
    let partition = KnobId::ALL.into_iter().map(|k| drift_kind(k.name()));
    let resources = ResourceKnobId::ALL
        .into_iter()
        .map(|k| drift_kind(k.name()));
    DRIFT_EVENTS
        .into_iter()
        .map(String::from)
        .chain(partition)
        .chain(resources)
}

/// The `reason` label of a refusal: its protocol name (`admission`, `policy`…).
fn refusal_label(kind: &RefusalKind) -> ReasonLabel {
    let reason = serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{kind:?}"));
    ReasonLabel { reason }
}

type HistogramFamily = Family<CpuLabel, Histogram, fn() -> Histogram>;

/// The guard's latency buckets: 1 µs to about 1 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-6, 2.0, 21))
}

/// Answer-time buckets: 10 µs to about 1.3 s, ×1.5 (a p99 read off them
/// is within 50 % of the true one), each bound a whole number of ns so
/// that its label reads as written (`0.000050625`, not `…0007`).
fn answer_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-5, 1.5, 30).map(|s| (s * 1e9).round() / 1e9))
}

/// Every metric of a daemon run, shared by the threads that feed it.
pub struct Metrics {
    registry: Registry,
    guard_latency: HistogramFamily,
    /// Each RT CPU's histogram, so the guard's probe thread takes no family lock.
    guard_by_cpu: BTreeMap<u32, Histogram>,
    grants: Family<CpuLabel, Counter>,
    cpu_refusals: Family<CpuLabel, Counter>,
    refusals: Family<ReasonLabel, Counter>,
    requests: Counter,
    answer_time: Family<OpLabel, Histogram, fn() -> Histogram>,
    /// Each request kind's histogram, in `AnswerOp::ALL`'s order: no family lock.
    answer_by_op: Vec<Histogram>,
    evictions: Family<EvictionLabels, Counter>,
    starvation_boosts: Family<CpuLabel, Counter>,
    drift_repairs: Family<KindLabel, Counter>,
    stranded_repairs: Family<CpuLabel, Counter>,
    pending_fallbacks: Family<CpuLabel, Counter>,
    loop_yields: Counter,
}

impl Metrics {
    /// The metrics of a daemon whose RT CPUs are `rt`: every series whose
    /// labels are known exists from the start (at 0): each RT CPU's, each
    /// refusal reason's and each drift kind's.
    pub fn new(rt: &CpuSet) -> Metrics {
        let mut m = Metrics {
            registry: Registry::with_prefix("rtmgr"),
            guard_latency: Family::new_with_constructor(latency_histogram),
            guard_by_cpu: BTreeMap::new(),
            grants: Family::default(),
            cpu_refusals: Family::default(),
            refusals: Family::default(),
            requests: Counter::default(),
            answer_time: Family::new_with_constructor(answer_histogram),
            answer_by_op: Vec::new(),
            evictions: Family::default(),
            starvation_boosts: Family::default(),
            drift_repairs: Family::default(),
            stranded_repairs: Family::default(),
            pending_fallbacks: Family::default(),
            loop_yields: Counter::default(),
        };
        let r = &mut m.registry;
        r.register_with_unit(
            "guard_latency",
            "How late the latency guard's probe woke on each RT CPU (ARTiS §2.2)",
            Unit::Seconds,
            m.guard_latency.clone(),
        );
        r.register(
            "grants",
            "Reservations granted, by RT CPU",
            m.grants.clone(),
        );
        r.register(
            "cpu_refusals",
            "Admission refusals, by the RT CPU that said no",
            m.cpu_refusals.clone(),
        );
        r.register(
            "refusals",
            "Requests refused, by reason",
            m.refusals.clone(),
        );
        r.register("requests", "Requests answered", m.requests.clone());
        r.register_with_unit(
            "answer",
            "How long after its request was read each answer was written (a reserve's wait for the grant in flight included), by request",
            Unit::Seconds,
            m.answer_time.clone(),
        );
        r.register(
            "evictions",
            "Guests sent away from an RT CPU, by cause (guard: a late guard sample; kernel_entry: the guest entered the kernel)",
            m.evictions.clone(),
        );
        r.register(
            "starvation_boosts",
            "Starved tasks given CPU time by the starvation guard, by RT CPU",
            m.starvation_boosts.clone(),
        );
        r.register(
            "drift_repairs",
            "Changes made behind the daemon's back and repaired, by kind",
            m.drift_repairs.clone(),
        );
        r.register(
            "stranded_repairs",
            "Hard grants' threads found runnable without running for several periods and put back, by RT CPU",
            m.stranded_repairs.clone(),
        );
        r.register(
            "pending_fallbacks",
            "Hard grants' threads granted at SCHED_FIFO 1 until they ran on their RT CPU (the kernel refused SCHED_DEADLINE where they waited), by RT CPU",
            m.pending_fallbacks.clone(),
        );
        r.register(
            "loop_yields",
            "Windows of 10 ms in which the daemon used up its 8 ms of CPU at SCHED_FIFO and its request loop ran the rest at SCHED_OTHER",
            m.loop_yields.clone(),
        );
        for cpu in rt.iter() {
            let l = CpuLabel { cpu };
            let h = m.guard_latency.get_or_create(&l).clone();
            m.guard_by_cpu.insert(cpu, h);
            let _ = m.grants.get_or_create(&l);
            let _ = m.cpu_refusals.get_or_create(&l);
            let _ = m.starvation_boosts.get_or_create(&l);
            let _ = m.stranded_repairs.get_or_create(&l);
            let _ = m.pending_fallbacks.get_or_create(&l);
            for cause in ["guard", "kernel_entry"] {
                let _ = m.evictions.get_or_create(&EvictionLabels { cpu, cause });
            }
        }
        for op in AnswerOp::ALL {
            let h = m
                .answer_time
                .get_or_create(&OpLabel { op: op.name() })
                .clone();
            m.answer_by_op.push(h);
        }
        for kind in &RefusalKind::ALL {
            let _ = m.refusals.get_or_create(&refusal_label(kind));
        }
        for kind in drift_kinds() {
            let _ = m.drift_repairs.get_or_create(&KindLabel { kind });
        }
        m
    }

    /// One answer written `took_ns` after its request was read.
    pub fn answer_time(&self, op: AnswerOp, took_ns: u64) {
        if let Some(h) = self.answer_by_op.get(op as usize) {
            h.observe(took_ns as f64 * 1e-9);
        }
    }

    /// Count one answer of the Manager (granted, refused).
    pub fn response(&self, resp: &Response) {
        self.requests.inc();
        match &resp.reply {
            Reply::Granted { reservation } => {
                self.grants
                    .get_or_create(&CpuLabel {
                        cpu: reservation.cpu,
                    })
                    .inc();
            }
            Reply::Refused { reason, cpus, .. } => {
                self.refusals.get_or_create(&refusal_label(reason)).inc();
                for c in cpus {
                    self.cpu_refusals
                        .get_or_create(&CpuLabel {
                            cpu: refusal_cpu(c),
                        })
                        .inc();
                }
            }
            _ => {}
        }
    }

    /// One stranded thread put back on RT CPU `cpu` (`stranded.rs`).
    pub fn stranded(&self, cpu: u32) {
        self.stranded_repairs.get_or_create(&CpuLabel { cpu }).inc();
    }

    /// `n` threads of a hard grant on RT CPU `cpu` granted at SCHED_FIFO 1
    /// pending SCHED_DEADLINE (`pending.rs`).
    pub fn pending_fallback(&self, cpu: u32, n: u64) {
        self.pending_fallbacks
            .get_or_create(&CpuLabel { cpu })
            .inc_by(n);
    }

    /// The request loop yielded its SCHED_FIFO for the rest of a window
    /// (`loop_share.rs`).
    pub fn loop_yield(&self) {
        self.loop_yields.inc();
    }

    /// `n` repairs of drift of one kind (reconcile's names).
    pub fn drift(&self, kind: &str, n: u64) {
        if n > 0 {
            self.drift_repairs
                .get_or_create(&KindLabel { kind: kind.into() })
                .inc_by(n);
        }
    }

    /// The OpenMetrics text of every metric, ending with `# EOF`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl LiveEvents for Metrics {
    fn guard_sample(&self, cpu: u32, latency_ns: u64) {
        let seconds = latency_ns as f64 / 1e9;
        match self.guard_by_cpu.get(&cpu) {
            Some(h) => h.observe(seconds),
            None => self
                .guard_latency
                .get_or_create(&CpuLabel { cpu })
                .observe(seconds),
        }
    }

    fn eviction(&self, cpu: u32, cause: &'static str, n: u64) {
        self.evictions
            .get_or_create(&EvictionLabels { cpu, cause })
            .inc_by(n);
    }

    fn starvation_boost(&self, cpu: u32) {
        self.starvation_boosts
            .get_or_create(&CpuLabel { cpu })
            .inc();
    }
}

/// The metrics and their endpoint when the config asks for them
/// (`[serve] metrics`, `serve --metrics`).
pub fn start(
    cfg: &super::ServeConfig,
    rt: &CpuSet,
) -> Result<Option<(Arc<Metrics>, Exporter)>, super::ServeError> {
    let Some(text) = cfg.serve.metrics.as_deref() else {
        return Ok(None);
    };
    let addr: SocketAddr = text.parse().map_err(|e| {
        super::ServeError::Config(format!(
            "metrics address {text:?}: {e} (expected IP:PORT, e.g. 127.0.0.1:9464 or [::]:9464)"
        ))
    })?;
    let metrics = Arc::new(Metrics::new(rt));
    let exporter =
        Exporter::start(addr, metrics.clone()).map_err(|source| super::ServeError::Socket {
            path: format!("metrics {addr}"),
            source,
        })?;
    tracing::info!("metrics on http://{}/metrics", exporter.local_addr());
    Ok(Some((metrics, exporter)))
}

fn refusal_cpu(c: &CpuRefusal) -> u32 {
    match c {
        CpuRefusal::Utilisation { cpu, .. }
        | CpuRefusal::DeadlineShare { cpu, .. }
        | CpuRefusal::EdfDemand { cpu, .. }
        | CpuRefusal::ResponseTime { cpu, .. }
        | CpuRefusal::Offline { cpu }
        | CpuRefusal::NotRt { cpu } => *cpu,
    }
}

#[cfg(test)]
mod tests;
