//! The report of `rtmgr measure resources` (DROPS §4.4: a cache-sized matrix
//! multiply beside a cache-thrashing neighbour; §5.3: small reads beside a
//! dd/find-like I/O load): conditions measured in interleaved rounds, each
//! an execution-time distribution, compared as ratios. Schema
//! `rtmgr.measure.resources/1` (docs/report-schema.md). This file is the
//! report (pure); `run` measures the rounds and `contend` holds the workloads.

pub mod contend;
pub mod run;

use rtmgr_core::stats::Hist;
use serde::Serialize;

pub const RESOURCES_SCHEMA: &str = "rtmgr.measure.resources/1";

/// One condition's distribution (ns).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Condition {
    pub name: String,
    pub n: u64,
    pub min_ns: Option<i64>,
    pub p50_ns: Option<i64>,
    pub p99_ns: Option<i64>,
    pub max_ns: Option<i64>,
    pub mean_ns: Option<f64>,
}

impl Condition {
    pub fn of(name: &str, h: &Hist) -> Condition {
        Condition {
            name: name.into(),
            n: h.len(),
            min_ns: h.min(),
            p50_ns: h.percentile(500_000),
            p99_ns: h.percentile(990_000),
            max_ns: h.max(),
            mean_ns: h.mean(),
        }
    }
}

/// `of` / `over`: how many times slower (> 1) or faster.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ratio {
    pub of: String,
    pub over: String,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
}

fn div(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

pub fn ratio(of: &Condition, over: &Condition) -> Ratio {
    let f = |v: Option<i64>| v.map(|v| v as f64);
    Ratio {
        of: of.name.clone(),
        over: over.name.clone(),
        p50: div(f(of.p50_ns), f(over.p50_ns)),
        p99: div(f(of.p99_ns), f(over.p99_ns)),
        max: div(f(of.max_ns), f(over.max_ns)),
        mean: div(of.mean_ns, over.mean_ns),
    }
}

/// The cache experiment: a matrix multiply on the RT CPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CachePart {
    pub matrix_n: u32,
    pub working_set_bytes: u64,
    pub thrash_bytes: u64,
    pub conditions: Vec<Condition>,
    pub ratios: Vec<Ratio>,
    /// "measured", or "not available: why; it would measure …".
    pub partition: String,
}

/// The I/O experiment: small reads on the RT CPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IoPart {
    pub file: String,
    pub file_bytes: u64,
    pub read_bytes: u64,
    /// O_DIRECT, or buffered (page cache dropped before each read).
    pub direct: bool,
    /// The disk's I/O scheduler ("none" ignores ioprio classes).
    pub scheduler: Option<String>,
    pub conditions: Vec<Condition>,
    pub ratios: Vec<Ratio>,
    /// What "settings" means in this run, and what could not be set here.
    pub settings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResourcesReport {
    pub schema: &'static str,
    pub cpu: u32,
    pub neighbour_cpu: u32,
    pub rounds: u32,
    pub runs_per_round: u64,
    pub cache: Option<CachePart>,
    pub io: Option<IoPart>,
    pub notes: Vec<String>,
}

fn us(v: Option<i64>) -> String {
    v.map_or("-".into(), |v| format!("{:.1}", v as f64 / 1e3))
}

fn x(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}x"))
}

fn table(title: &str, conds: &[Condition], ratios: &[Ratio]) -> String {
    let mut s = format!(
        "{title}\n{:<26} {:>7} {:>10} {:>10} {:>10} {:>10}\n",
        "condition", "n", "min µs", "p50 µs", "p99 µs", "max µs"
    );
    for c in conds {
        s.push_str(&format!(
            "{:<26} {:>7} {:>10} {:>10} {:>10} {:>10}\n",
            c.name,
            c.n,
            us(c.min_ns),
            us(c.p50_ns),
            us(c.p99_ns),
            us(c.max_ns)
        ));
    }
    for r in ratios {
        s.push_str(&format!(
            "  {} / {}: p50 {}  p99 {}  max {}  mean {}\n",
            r.of,
            r.over,
            x(r.p50),
            x(r.p99),
            x(r.max),
            x(r.mean)
        ));
    }
    s
}

/// The human tables.
pub fn text(r: &ResourcesReport) -> String {
    let mut s = format!(
        "RT CPU {}, neighbour on CPU {}; {} interleaved rounds of {} runs per condition\n\n",
        r.cpu, r.neighbour_cpu, r.rounds, r.runs_per_round
    );
    if let Some(c) = &r.cache {
        s.push_str(&table(
            &format!(
                "cache: {0}×{0} matrix multiply ({1} KiB) beside a thrasher over {2} MiB",
                c.matrix_n,
                c.working_set_bytes >> 10,
                c.thrash_bytes >> 20
            ),
            &c.conditions,
            &c.ratios,
        ));
        s.push_str(&format!("  cache partition: {}\n\n", c.partition));
    }
    if let Some(io) = &r.io {
        s.push_str(&table(
            &format!(
                "I/O: {} B {} reads of {} ({} MiB), scheduler {}",
                io.read_bytes,
                if io.direct { "O_DIRECT" } else { "buffered" },
                io.file,
                io.file_bytes >> 20,
                io.scheduler.as_deref().unwrap_or("unknown")
            ),
            &io.conditions,
            &io.ratios,
        ));
        for l in &io.settings {
            s.push_str(&format!("  {l}\n"));
        }
        s.push('\n');
    }
    for n in &r.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_compare_conditions_and_the_table_shows_them() {
        let (mut a, mut b) = (Hist::new(), Hist::new());
        for v in [1000, 1000, 2000] {
            a.record(v);
            b.record(v * 3);
        }
        let (alone, beside) = (Condition::of("alone", &a), Condition::of("beside", &b));
        let r = ratio(&beside, &alone);
        assert!((r.p50.unwrap() - 3.0).abs() < 0.01 && (r.max.unwrap() - 3.0).abs() < 0.01);
        let empty = Condition::of("none", &Hist::new());
        assert_eq!(ratio(&empty, &alone).p50, None);
        let rep = ResourcesReport {
            schema: RESOURCES_SCHEMA,
            cpu: 1,
            neighbour_cpu: 0,
            rounds: 2,
            runs_per_round: 3,
            cache: Some(CachePart {
                matrix_n: 64,
                working_set_bytes: 98304,
                thrash_bytes: 64 << 20,
                conditions: vec![alone, beside],
                ratios: vec![r],
                partition: "not available: no resctrl".into(),
            }),
            io: None,
            notes: vec![],
        };
        let t = text(&rep);
        assert!(t.contains("beside / alone: p50 3.00x"), "{t}");
        let j = serde_json::to_value(&rep).unwrap();
        assert_eq!(j["schema"], "rtmgr.measure.resources/1");
    }
}
