//! `rtmgr evaluate`'s report: the RT CPU's latency per configuration
//! (ARTiS §3.1 Table 1), its table with ratios, and plain verdicts (with
//! their intervals and the A/A floor from `intervals` when the report has
//! per-round figures; the point ratios of older reports otherwise).

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
    /// The host-preemption test the balancer started from (issue 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_preemption: Option<rtmgr_core::host_preemption::HostPreemption>,
    /// Every comparison's ratios with a 95 % interval, and the A/A control
    /// (issue 28, `rtmgr.report/3`); None in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intervals: Option<super::Intervals>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigResult {
    /// "idle", "stock", "preempt", "shield", "idle-guests" or "balanced";
    /// an old report's "rtmgr" is read as "idle-guests" ([`config_name`]).
    #[serde(deserialize_with = "deserialize_config_name")]
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
    /// What the live balancer did ("balanced" only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balancer: Option<super::BalancerSummary>,
    /// This configuration's figures round by round (issue 28, `rtmgr.report/3`):
    /// what the intervals are computed from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<super::RoundFigures>,
}

/// The name evaluate gives a configuration today, for a name read from a
/// report of any version: reports before issue 21 called the SCHED_IDLE
/// guests without the balancer "rtmgr", the tool's own name.
pub fn config_name(name: &str) -> &str {
    match name {
        "rtmgr" => "idle-guests",
        other => other,
    }
}

fn deserialize_config_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    Ok(config_name(&name).to_string())
}

/// Geometric-mean throughput of `c` relative to `base` (see load::relative_throughput).
pub fn throughput_ratio(c: &ConfigResult, base: Option<&ConfigResult>) -> Option<f64> {
    crate::load::relative_throughput(&c.throughput, &base?.throughput)
}

/// The ARTiS-Table-1-style table of `rtmgr evaluate`.
pub fn evaluate_table(e: &EvaluateRun) -> String {
    let find = |n: &str| e.configs.iter().find(|c| config_name(&c.name) == n);
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
    if let Some(h) = &e.host_preemption {
        let _ = writeln!(out, "host: {}", h.verdict);
    }
    for c in &e.configs {
        if let Some(b) = &c.balancer {
            let _ = writeln!(out, "{}: {}", c.name, b.line());
        }
    }
    out
}

/// `ratio` of a configuration's figure to a base's, in words.
fn compared(r: f64, base: &str) -> String {
    if r < 0.9 {
        format!("{:.1}x lower than {base}", 1.0 / r)
    } else if r > 1.1 {
        format!("{r:.1}x higher than {base}")
    } else {
        format!("about the same as {base}")
    }
}

/// Plain verdict lines for `rtmgr evaluate`, from the numbers of this run
/// only: with intervals (and the A/A floor) when the run has them, else the
/// point ratios older reports were judged by.
pub fn evaluate_verdicts(e: &EvaluateRun) -> Vec<String> {
    let find = |n: &str| e.configs.iter().find(|c| config_name(&c.name) == n);
    let mut v = Vec::new();
    if let Some(iv) = &e.intervals {
        v = super::interval_verdicts(iv);
        recovered(e, &mut v);
        bound_lines(e, &mut v);
        return v;
    }
    let pick = |c: &ConfigResult, ppm: Option<u32>| match ppm {
        Some(p) => c.result.summary.get(p),
        None => c.result.summary.max_ns,
    };
    // "p99 latency 2.0x lower than stock (10.0 vs 20.0 µs), max ..." of `c` against `base`.
    let latency = |c: &ConfigResult, base: &ConfigResult, ppm: u32, label: &str| {
        let base_name = config_name(&base.name);
        let mut parts = Vec::new();
        for (what, p) in [(label, Some(ppm)), ("max", None)] {
            let r = rtmgr_core::stats::ratio(pick(c, p), pick(base, p))?;
            parts.push(format!(
                "{what} {} ({} vs {} µs)",
                compared(r, base_name),
                us(pick(c, p)),
                us(pick(base, p)),
            ));
        }
        Some(parts.join(", "))
    };
    let Some(stock) = find("stock") else {
        return vec!["no stock measurement: nothing to compare".into()];
    };
    for name in ["shield", "idle-guests", "balanced"] {
        let Some(c) = find(name) else { continue };
        let Some(lat) = latency(c, stock, 990_000, "p99 latency") else {
            v.push(format!("{name}: too few samples to compare with stock"));
            continue;
        };
        let mut line = format!("{name}: {lat}");
        if let Some(t) = throughput_ratio(c, Some(stock)) {
            let _ = write!(
                line,
                "; ordinary work ran at {:.0}% of stock throughput",
                t * 100.0
            );
        }
        v.push(line);
    }
    recovered(e, &mut v);
    if let Some(sh) = find("shield") {
        // What a user of the balancer weighs: its tail and throughput against the shield's.
        if let Some(b) = find("balanced") {
            // p99.9 when both runs are long enough for it (--quick may not be), else p99.
            let ppm = [999_000, 990_000]
                .into_iter()
                .find(|p| pick(b, Some(*p)).is_some() && pick(sh, Some(*p)).is_some())
                .unwrap_or(999_000);
            let label = format!("{} latency", rtmgr_core::stats::label(ppm));
            let mut line = match latency(b, sh, ppm, &label) {
                Some(lat) => format!("balanced vs shield: {lat}"),
                None => "balanced vs shield: too few samples to compare the tails".into(),
            };
            if let Some(t) = throughput_ratio(b, Some(sh)) {
                let _ = write!(line, "; throughput {t:.2}x the shield's");
            }
            v.push(line);
        }
    }
    bound_lines(e, &mut v);
    v
}

/// How much of the throughput the shield gave up the guests won back (point figures).
fn recovered(e: &EvaluateRun, v: &mut Vec<String>) {
    let find = |n: &str| e.configs.iter().find(|c| config_name(&c.name) == n);
    let (Some(stock), Some(sh)) = (find("stock"), find("shield")) else {
        return;
    };
    for (name, what) in [
        ("idle-guests", "idle-guests's SCHED_IDLE guests"),
        ("balanced", "the balancer's guests"),
    ] {
        let Some(c) = find(name) else { continue };
        if let (Some(ts), Some(tc)) = (
            throughput_ratio(sh, Some(stock)),
            throughput_ratio(c, Some(stock)),
        ) {
            if ts < 1.0 {
                let recovered = ((tc - ts) / (1.0 - ts)).clamp(-10.0, 10.0);
                v.push(format!(
                    "{what} recovered {:.0}% of the throughput the shield gave up",
                    recovered * 100.0
                ));
            }
        }
    }
}

/// Each loaded configuration's maximum against the partition's latency bound.
fn bound_lines(e: &EvaluateRun, v: &mut Vec<String>) {
    let bound_ns = e.latency_bound_us as i64 * 1000;
    for c in &e.configs {
        if c.name == "idle" {
            continue;
        }
        if let Some(m) = c.result.summary.max_ns {
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
        table = esc(&(evaluate_table(e)
            + &super::evaluate_tails(e).map_or(String::new(), |t| format!("\n{t}"))
            + &e.intervals.as_ref().map_or(String::new(), |iv| format!("\n{}", super::intervals_table(iv))))),
        schema = rep.header.schema,
    )
}
