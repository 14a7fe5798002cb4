//! Budget-based RTAI Fig. 6: budget rate (%) per period, one panel per task
//! (rows) and enforcement mode (columns); the grey band is the tolerance.

use crate::budget::BudgetRun;
use std::fmt::Write as _;

pub fn budget_rates_svg(runs: &[&BudgetRun]) -> String {
    let (pw, ph, ml, mt) = (300.0, 130.0, 45.0, 30.0);
    let rows = runs.iter().map(|r| r.tasks.len()).max().unwrap_or(0);
    let (w, h) = (
        ml + pw * runs.len() as f64 + 10.0,
        mt + ph * rows as f64 + 20.0,
    );
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="10"><rect width="{w}" height="{h}" fill="white"/>"#
    );
    let (lo, hi) = (80.0, 120.0);
    for (c, r) in runs.iter().enumerate() {
        let x0 = ml + pw * c as f64;
        let _ = write!(
            s,
            r#"<text x="{}" y="14" text-anchor="middle" font-size="12">{}</text>"#,
            x0 + pw / 2.0,
            r.mode
        );
        for (k, t) in r.tasks.iter().enumerate() {
            let y0 = mt + ph * k as f64;
            let (iw, ih) = (pw - 15.0, ph - 25.0);
            let y = |v: f64| y0 + ih * (1.0 - (v.clamp(lo, hi) - lo) / (hi - lo));
            let tol = t.tolerance_pct;
            let _ = write!(
                s,
                r##"<rect x="{x0}" y="{}" width="{iw}" height="{}" fill="#eee"/><rect x="{x0}" y="{y0}" width="{iw}" height="{ih}" fill="none" stroke="black"/>"##,
                y(100.0 + tol),
                y(100.0 - tol) - y(100.0 + tol)
            );
            let _ = write!(
                s,
                r#"<text x="{}" y="{}">{} P={}ms W={}ms: {} viol/{}</text>"#,
                x0 + 3.0,
                y0 + ih + 12.0,
                t.name,
                t.period_ns as f64 / 1e6,
                t.budget_ns as f64 / 1e6,
                t.violations,
                t.periods
            );
            if c == 0 {
                for v in [lo, 100.0, hi] {
                    let _ = write!(
                        s,
                        r#"<text x="{}" y="{}" text-anchor="end">{v}%</text>"#,
                        x0 - 3.0,
                        y(v) + 3.0
                    );
                }
            }
            let n = t.rates.len().max(2) as f64 - 1.0;
            let pts: String = t
                .rates
                .iter()
                .enumerate()
                .map(|(i, &v)| format!("{:.1},{:.1} ", x0 + iw * i as f64 / n, y(v)))
                .collect();
            let _ = write!(
                s,
                r##"<polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="0.8"/>"##
            );
        }
    }
    s.push_str("</svg>\n");
    s
}
