//! The cost report's tables: micro-benchmarks with their slowdown (DROPS
//! Fig. 4 as numbers), the build in McKenney Table 1's layout (real, user,
//! sys: mean ± sd), and the load sweep (DROPS Fig. 5 as numbers).

use super::{BuildCost, Measured, MicroBench, SweepCost};
use crate::report::{ratio_text, render};

/// A number with three significant digits (no exponent for ordinary sizes).
pub fn sig3(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v == 0.0 {
        return "0".into();
    }
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (2 - magnitude).max(0) as usize;
    format!("{v:.decimals$}")
}

/// "12.3 ± 0.40" or "-".
fn mean_sd_cell(m: &Measured) -> String {
    match m.stats {
        Some(s) if s.n > 1 => format!("{} ± {}", sig3(s.mean), sig3(s.sd)),
        Some(s) => sig3(s.mean),
        None => "-".into(),
    }
}

/// "12.3 ± 0.40 (1.05x [0.98, 1.12])": the stock row without a ratio, the
/// interval where the run had the rounds for one.
fn cell_with_ratio(m: &Measured) -> String {
    match (m.config.as_str(), m.slowdown, m.slowdown_ci) {
        (super::BASELINE, _, _) | (_, None, _) => mean_sd_cell(m),
        (_, Some(r), None) => format!("{} ({}x)", mean_sd_cell(m), ratio_text(r)),
        (_, Some(r), Some(i)) => format!(
            "{} ({}x [{}, {}])",
            mean_sd_cell(m),
            ratio_text(r),
            ratio_text(i.low),
            ratio_text(i.high)
        ),
    }
}

/// The configurations in the order of the first row that has any.
fn config_names<'a>(rows: impl Iterator<Item = &'a [Measured]>) -> Vec<String> {
    rows.map(|r| r.iter().map(|m| m.config.clone()).collect::<Vec<_>>())
        .find(|v| !v.is_empty())
        .unwrap_or_default()
}

/// One row per micro-benchmark: mean ± sd per configuration, slowdown against stock.
pub fn micro_table(benches: &[MicroBench]) -> String {
    let names = config_names(benches.iter().map(|b| b.per_config.as_slice()));
    let mut head = vec!["micro-benchmark".to_string(), "unit".to_string()];
    head.extend(names.iter().cloned());
    let mut t = vec![head];
    for b in benches {
        let mut row = vec![b.name.clone(), b.unit.clone()];
        for n in &names {
            let cell = b.per_config.iter().find(|m| &m.config == n);
            row.push(cell.map(cell_with_ratio).unwrap_or_else(|| "-".into()));
        }
        t.push(row);
    }
    let mut out = render(&t);
    out.push_str("(mean ± sd over the rounds; (Nx [low, high]) = slowdown against stock with its 95 % interval (paired bootstrap over rounds, from 4 rounds), > 1 is slower)\n");
    out
}

/// McKenney Table 1: one row per configuration, real/user/sys mean ± sd.
pub fn build_table(b: &BuildCost) -> String {
    let mut t = vec![vec![
        "build".to_string(),
        "-j".into(),
        "real (s)".into(),
        "user (s)".into(),
        "sys (s)".into(),
    ]];
    for c in &b.per_config {
        t.push(vec![
            c.config.clone(),
            c.jobs.to_string(),
            cell_with_ratio(&c.real_s),
            cell_with_ratio(&c.user_s),
            cell_with_ratio(&c.sys_s),
        ]);
    }
    let mut out = format!("{} ({})\n", b.source, b.command.join(" "));
    out.push_str(&render(&t));
    for c in &b.per_config {
        for f in &c.failures {
            out.push_str(&format!("{}: build failed: {f}\n", c.config));
        }
    }
    out
}

/// Jobs per minute per level and configuration, then average relative to stock and the maximum.
pub fn sweep_table(s: &SweepCost) -> String {
    let mut head = vec!["concurrent jobs".to_string()];
    head.extend(
        s.per_config
            .iter()
            .map(|c| format!("{} jobs/min", c.config)),
    );
    let mut t = vec![head];
    for (i, l) in s.levels.iter().enumerate() {
        let mut row = vec![l.to_string()];
        for c in &s.per_config {
            row.push(c.points.get(i).map(mean_sd_cell).unwrap_or_default());
        }
        t.push(row);
    }
    let mut rel = vec!["relative to stock".to_string()];
    let mut max = vec!["maximum (at jobs)".to_string()];
    for c in &s.per_config {
        rel.push(
            c.relative_to_stock
                .map(|r| format!("{}x", ratio_text(r)))
                .unwrap_or_else(|| "-".into()),
        );
        max.push(match (c.max_jobs_per_min, c.max_at) {
            (Some(m), Some(at)) => format!("{} ({at})", sig3(m)),
            _ => "-".into(),
        });
    }
    t.push(rel);
    t.push(max);
    format!("job mix: {}\n{}", s.job, render(&t))
}
