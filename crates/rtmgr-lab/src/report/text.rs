//! Text tables of the measurement reports (ARTiS Table 1 style; McKenney §3
//! percentiles): µs cells, ratio cells, aligned columns, disturbance lines.

use super::{CpuResult, Disturbance, EvaluateRun};
use rtmgr_core::stats::{label, Summary};
use std::fmt::Write as _;

/// Format nanoseconds as µs with one decimal.
pub fn us(ns: Option<i64>) -> String {
    match ns {
        Some(v) => format!("{:.1}", v as f64 / 1000.0),
        None => "-".into(),
    }
}

/// A ratio cell: "221x", "2.71x", "0.34x", "0.0045x" (see `ratio_text`), or "-".
pub(crate) fn ratio_cell(r: Option<f64>) -> String {
    match r {
        Some(r) => format!("{}x", ratio_text(r)),
        None => "-".into(),
    }
}

/// A ratio with significant digits whatever its size: three from 1 up
/// (1.00, 2.71, 22.1, 221, 4310), two below 1 (0.34, 0.050, 0.0045), so a
/// 221-fold difference never prints as 0.00.
pub fn ratio_text(r: f64) -> String {
    if !r.is_finite() {
        return format!("{r}");
    }
    if r == 0.0 {
        return "0".into();
    }
    let digits = if r.abs() >= 1.0 { 3 } else { 2 };
    let magnitude = r.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).max(0) as usize;
    format!("{r:.decimals$}")
}

/// Columns of a summary table: n, min, the percentiles any row supports, max, missed.
pub fn summary_table(rows: &[(String, &Summary)]) -> String {
    let mut ppms: Vec<u32> = rows
        .iter()
        .flat_map(|(_, s)| s.percentiles.iter().map(|p| p.ppm))
        .collect();
    ppms.sort_unstable();
    ppms.dedup();
    let mut header = vec!["".to_string(), "n".into(), "min".into()];
    header.extend(ppms.iter().map(|&p| label(p)));
    header.extend(["max".into(), "missed".into()]);
    let mut table = vec![header];
    for (name, s) in rows {
        let mut r = vec![name.clone(), s.n.to_string(), us(s.min_ns)];
        r.extend(ppms.iter().map(|&p| us(s.get(p))));
        r.extend([us(s.max_ns), s.missed.to_string()]);
        table.push(r);
    }
    let mut out = render(&table);
    out.push_str(
        "(latencies in µs; a percentile is shown only when n has ≥10 samples beyond it)\n",
    );
    out
}

/// Left-align the first column, right-align the others.
pub fn render(table: &[Vec<String>]) -> String {
    let cols = table.iter().map(|r| r.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            table
                .iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in table {
        for (c, cell) in r.iter().enumerate() {
            let pad = widths[c].saturating_sub(cell.chars().count());
            if c == 0 {
                out.push_str(cell);
                out.push_str(&" ".repeat(pad));
            } else {
                out.push_str("  ");
                out.push_str(&" ".repeat(pad));
                out.push_str(cell);
            }
        }
        out.push('\n');
    }
    out
}

/// The disturbance lines: steal, then IRQ/softirq totals with their top sources.
pub fn disturbance_text(d: &Disturbance) -> String {
    let mut out = String::new();
    for s in &d.steal {
        let _ = writeln!(out, "cpu{}: steal {:.1} ms", s.cpu, s.steal_ns as f64 / 1e6);
    }
    for (what, evs) in [("irqs", &d.interrupts), ("softirqs", &d.softirqs)] {
        for e in evs {
            let tops: Vec<String> = e
                .top
                .iter()
                .map(|s| format!("{} {}", s.source, s.count))
                .collect();
            let _ = writeln!(
                out,
                "cpu{}: {what} {} ({})",
                e.cpu,
                e.total,
                tops.join(", ")
            );
        }
    }
    out
}

/// The two tails (issue 21): all samples beside the samples the host did not
/// stall ("guest"), and what the host took. None when no row was labelled
/// (reports from before the labelling, results that are not the probe's).
pub fn two_tails_table(rows: &[(String, &CpuResult)]) -> Option<String> {
    if rows.iter().all(|(_, r)| r.guest_summary.is_none()) {
        return None;
    }
    let mut table = vec![[
        "",
        "p99",
        "p99.9",
        "max",
        "guest p99",
        "guest p99.9",
        "guest max",
        "host samples",
        "host ms",
    ]
    .map(String::from)
    .to_vec()];
    for (name, r) in rows {
        let (s, g) = (&r.summary, r.guest_summary.as_ref());
        let guest = |pick: &dyn Fn(&Summary) -> Option<i64>| us(g.and_then(pick));
        table.push(vec![
            name.clone(),
            us(s.get(990_000)),
            us(s.get(999_000)),
            us(s.max_ns),
            guest(&|x| x.get(990_000)),
            guest(&|x| x.get(999_000)),
            guest(&|x| x.max_ns),
            r.host_stalled_samples.to_string(),
            format!("{:.1}", r.host_stalled_ns as f64 / 1e6),
        ]);
    }
    let mut out = render(&table);
    out.push_str(
        "(µs; guest = the samples the host did not stall, on evidence: the CPU's steal advanced \
         across the wake-up, or with --trace a busy CPU saw no tick; see docs/evaluate.md \"Two tails\")\n",
    );
    Some(out)
}

/// `two_tails_table` of an evaluate run's configurations.
pub fn evaluate_tails(e: &EvaluateRun) -> Option<String> {
    let rows: Vec<(String, &CpuResult)> = e
        .configs
        .iter()
        .map(|c| (c.name.clone(), &c.result))
        .collect();
    two_tails_table(&rows)
}
