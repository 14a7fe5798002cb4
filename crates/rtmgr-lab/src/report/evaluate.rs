//! `rtmgr evaluate`'s report: the RT CPU's latency per configuration
//! (ARTiS §3.1 Table 1), its table with ratios, and plain verdicts.

use super::text::{ratio_cell, render, us};
use super::{CpuResult, Disturbance};
use crate::load::{ComponentMetrics, LoadEngine};
use rtmgr_core::cpuset::CpuSet;
use rtmgr_core::stats::Summary;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// `rtmgr evaluate`: the RT CPU's latency in each configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluateRun {
    pub rt_cpus: CpuSet,
    pub nrt_cpus: CpuSet,
    pub load: String,
    /// The program that ran the load.
    pub load_engine: LoadEngine,
    pub interval_ns: u64,
    pub rounds_planned: u32,
    pub rounds_done: u32,
    pub segment_ns: u64,
    pub latency_bound_us: u64,
    pub configs: Vec<ConfigResult>,
    pub verdicts: Vec<String>,
    /// Why the RT CPU is the one it is, when evaluate chose it (`--rt-cpus auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rt_choice: Option<String>,
    /// Configurations this machine cannot run, each with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// The host-preemption test this run was made under (`rtmgr status
    /// --host-test`'s cached result, when recent and from this boot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_preemption: Option<rtmgr_core::host_preemption::HostPreemption>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigResult {
    /// "idle", "stock", "shield" or "rtmgr".
    pub name: String,
    pub description: String,
    pub result: CpuResult,
    /// Per load component, ops/s averaged over the segments.
    pub throughput: Vec<ComponentMetrics>,
    pub segments: u32,
    pub disturbance: Disturbance,
    /// What explains this configuration's tail (`evaluate --trace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_causes: Option<crate::trace::TailCauses>,
}

/// Geometric-mean throughput of `c` relative to `base` (see load::relative_throughput).
pub fn throughput_ratio(c: &ConfigResult, base: Option<&ConfigResult>) -> Option<f64> {
    crate::load::relative_throughput(&c.throughput, &base?.throughput)
}

/// The ARTiS-Table-1-style table of `rtmgr evaluate`.
pub fn evaluate_table(e: &EvaluateRun) -> String {
    let find = |n: &str| e.configs.iter().find(|c| c.name == n);
    let (stock, idle) = (find("stock"), find("idle"));
    let mut table = vec![[
        "config",
        "n",
        "p50",
        "p99",
        "p99.9",
        "max",
        "missed",
        "p99/stock",
        "max/stock",
        "p99/idle",
        "throughput/stock",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect::<Vec<_>>()];
    for c in &e.configs {
        let s = &c.result.summary;
        let rel = |base: Option<&ConfigResult>, ppm: Option<u32>| {
            let pick = |x: &Summary| match ppm {
                Some(p) => x.get(p),
                None => x.max_ns,
            };
            base.and_then(|b| rtmgr_core::stats::ratio(pick(s), pick(&b.result.summary)))
        };
        table.push(vec![
            c.name.clone(),
            s.n.to_string(),
            us(s.get(500_000)),
            us(s.get(990_000)),
            us(s.get(999_000)),
            us(s.max_ns),
            s.missed.to_string(),
            ratio_cell(rel(stock, Some(990_000))),
            ratio_cell(rel(stock, None)),
            ratio_cell(rel(idle, Some(990_000))),
            if c.throughput.is_empty() {
                "-".into()
            } else {
                ratio_cell(throughput_ratio(c, stock))
            },
        ]);
    }
    let mut out = render(&table);
    out.push_str(
        "(latency of the RT CPU in µs; throughput = geometric mean over load components of ops/s relative to stock)\n",
    );
    out
}

/// Plain verdict lines for `rtmgr evaluate`, from the numbers of this run only.
pub fn evaluate_verdicts(e: &EvaluateRun) -> Vec<String> {
    let find = |n: &str| e.configs.iter().find(|c| c.name == n);
    let mut v = Vec::new();
    let p99 = |c: &ConfigResult| c.result.summary.get(990_000);
    let max = |c: &ConfigResult| c.result.summary.max_ns;
    let Some(stock) = find("stock") else {
        return vec!["no stock measurement: nothing to compare".into()];
    };
    for name in ["shield", "rtmgr"] {
        let Some(c) = find(name) else { continue };
        let (Some(r99), Some(rmax)) = (
            rtmgr_core::stats::ratio(p99(c), p99(stock)),
            rtmgr_core::stats::ratio(max(c), max(stock)),
        ) else {
            v.push(format!("{name}: too few samples to compare with stock"));
            continue;
        };
        let word = |r: f64| {
            if r < 0.9 {
                format!("{:.1}x lower than stock", 1.0 / r)
            } else if r > 1.1 {
                format!("{r:.1}x higher than stock")
            } else {
                "about the same as stock".to_string()
            }
        };
        let mut line = format!(
            "{name}: p99 latency {} ({} vs {} µs), max {} ({} vs {} µs)",
            word(r99),
            us(p99(c)),
            us(p99(stock)),
            word(rmax),
            us(max(c)),
            us(max(stock)),
        );
        if let Some(t) = throughput_ratio(c, Some(stock)) {
            let _ = write!(
                line,
                "; ordinary work ran at {:.0}% of stock throughput",
                t * 100.0
            );
        }
        v.push(line);
    }
    if let (Some(sh), Some(rm)) = (find("shield"), find("rtmgr")) {
        if let (Some(ts), Some(tr)) = (
            throughput_ratio(sh, Some(stock)),
            throughput_ratio(rm, Some(stock)),
        ) {
            if ts < 1.0 {
                let recovered = ((tr - ts) / (1.0 - ts)).clamp(-10.0, 10.0);
                v.push(format!(
                    "rtmgr's SCHED_IDLE guests recovered {:.0}% of the throughput the shield gave up",
                    recovered * 100.0
                ));
            }
        }
    }
    let bound_ns = e.latency_bound_us as i64 * 1000;
    for c in &e.configs {
        if c.name == "idle" {
            continue;
        }
        if let Some(m) = max(c) {
            let over = c.result.summary.missed;
            v.push(format!(
                "{}: max {} µs {} the {} µs bound{}",
                c.name,
                us(Some(m)),
                if m <= bound_ns { "within" } else { "EXCEEDS" },
                e.latency_bound_us,
                if over > 0 {
                    format!(", {over} missed periods")
                } else {
                    String::new()
                }
            ));
        }
    }
    v
}

/// The one-page HTML report of `rtmgr evaluate`: the configurations, the
/// table, the verdicts and the two plots (given as SVG text).
pub fn evaluate_html(
    rep: &super::Report,
    e: &EvaluateRun,
    hist_svg: &str,
    pct_svg: &str,
) -> String {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let verdicts: String = e
        .verdicts
        .iter()
        .map(|v| format!("<li>{}</li>", esc(v)))
        .collect();
    let configs: String = e
        .configs
        .iter()
        .map(|c| format!("<li><b>{}</b>: {}</li>", c.name, esc(&c.description)))
        .collect();
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>rtmgr evaluate</title></head><body>\
         <h1>rtmgr evaluate</h1><p>{host} ({kernel}){partial}</p><ul>{configs}</ul><pre>{table}</pre><ul>{verdicts}</ul>\
         {hist_svg}{pct_svg}<p>Data: <a href=\"report.json\">report.json</a> (schema {schema}).</p></body></html>\n",
        host = esc(&rep.header.host.hostname),
        kernel = esc(&rep.header.host.kernel),
        partial = if rep.header.partial {
            format!(" — <b>PARTIAL</b>: {}", esc(rep.header.partial_reason.as_deref().unwrap_or("")))
        } else {
            String::new()
        },
        table = esc(&evaluate_table(e)),
        schema = rep.header.schema,
    )
}
