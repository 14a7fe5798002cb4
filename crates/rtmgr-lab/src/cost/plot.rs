//! The cost report's plots: DROPS §5.1 Fig. 4 (micro-benchmarks normalised to
//! stock Linux: one bar per configuration, the absolute stock value written in
//! the bars) and DROPS §5.2 Fig. 5 (jobs per minute against concurrent jobs).

use super::{sig3, MicroBench, SweepCost, BASELINE};
use crate::plot::{esc, Frame, COLORS, ML, MR, W};
use std::fmt::Write as _;

/// Fig. 4: per benchmark, each configuration's slowdown against stock
/// (stock = 1, the dashed line); the stock bar carries stock's absolute value.
pub fn slowdown_svg(title: &str, benches: &[MicroBench]) -> String {
    let configs: Vec<String> = benches
        .iter()
        .find(|b| !b.per_config.is_empty())
        .map(|b| b.per_config.iter().map(|m| m.config.clone()).collect())
        .unwrap_or_default();
    let top = benches
        .iter()
        .flat_map(|b| b.per_config.iter().filter_map(|m| m.slowdown))
        .filter(|r| r.is_finite())
        .fold(1.0f64, f64::max);
    let ymax = (top * 1.15).max(1.2);
    let n = benches.len().max(1) as f64;
    let mut f = Frame::new(
        title,
        "micro-benchmark (stock's absolute value in its bar)",
        "slowdown against stock (x)",
        (0.0, n),
        (0.0, ymax),
    );
    for i in 0..=4 {
        let y = ymax * i as f64 / 4.0;
        f.ytick(y, &format!("{y:.2}"));
    }
    let group = 0.8 / configs.len().max(1) as f64;
    for (i, b) in benches.iter().enumerate() {
        f.xtick(i as f64 + 0.5, &b.name);
        for (k, c) in configs.iter().enumerate() {
            let Some(m) = b.per_config.iter().find(|m| &m.config == c) else {
                continue;
            };
            let Some(r) = m.slowdown.filter(|r| r.is_finite()) else {
                continue;
            };
            let x0 = f.px(i as f64 + 0.1 + group * k as f64);
            let x1 = f.px(i as f64 + 0.1 + group * (k + 1) as f64);
            let (y0, y1) = (f.py(0.0), f.py(r.min(ymax)));
            let color = COLORS[k % COLORS.len()];
            let _ = write!(
                f.svg,
                r#"<rect x="{x0:.1}" y="{y1:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
                (x1 - x0 - 1.0).max(1.0),
                (y0 - y1).max(0.0)
            );
            let label = if c == BASELINE {
                format!("{} {}", m.mean().map(sig3).unwrap_or_default(), b.unit)
            } else {
                format!("{r:.2}")
            };
            let (cx, cy) = ((x0 + x1) / 2.0, y0 - 4.0);
            let _ = write!(
                f.svg,
                r#"<text transform="translate({cx:.1},{cy:.1}) rotate(-90)" font-size="9" fill="white">{}</text>"#,
                esc(&label)
            );
        }
    }
    let one = f.py(1.0);
    let _ = write!(
        f.svg,
        r#"<line x1="{ML}" y1="{one:.1}" x2="{}" y2="{one:.1}" stroke="black" stroke-dasharray="4,3"/>"#,
        W - MR
    );
    for (k, c) in configs.iter().enumerate() {
        f.legend(k, c, COLORS[k % COLORS.len()]);
    }
    f.finish()
}

/// Fig. 5: jobs per minute (mean over the rounds) against concurrent jobs, one line per configuration.
pub fn sweep_svg(title: &str, sweep: &SweepCost) -> String {
    let ymax = sweep
        .per_config
        .iter()
        .flat_map(|c| c.points.iter().filter_map(|p| p.mean()))
        .fold(1.0f64, f64::max)
        * 1.1;
    let n = sweep.levels.len().max(2) as f64 - 1.0;
    let mut f = Frame::new(
        title,
        "concurrent jobs",
        "jobs per minute",
        (0.0, n),
        (0.0, ymax),
    );
    for (i, l) in sweep.levels.iter().enumerate() {
        f.xtick(i as f64, &l.to_string());
    }
    for i in 0..=4 {
        let y = ymax * i as f64 / 4.0;
        f.ytick(y, &sig3(y));
    }
    for (k, c) in sweep.per_config.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let pts: Vec<(f64, f64)> = c
            .points
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.mean().map(|m| (i as f64, m)))
            .collect();
        f.polyline(&pts, color);
        f.legend(k, &c.config, color);
    }
    f.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{set_slowdowns, summarize_sweep, Better, Measured, SweepConfigCost};

    #[test]
    fn bars_and_lines_are_well_formed() {
        let mut per_config = vec![
            Measured::new("stock", vec![100.0]),
            Measured::new("shield", vec![150.0]),
            Measured::new("balanced", vec![]),
        ];
        set_slowdowns(&mut per_config, Better::Lower);
        let b = MicroBench {
            name: "ctx-switch".into(),
            what: "pipe ping-pong".into(),
            unit: "ns".into(),
            better: Better::Lower,
            per_config,
        };
        let s = slowdown_svg("cost <micro>", &[b]);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert!(s.contains("100 ns") && s.contains("1.50") && s.contains("&lt;micro&gt;"));
        assert!(!s.contains("NaN") && !s.contains("inf"));
        assert!(!slowdown_svg("empty", &[]).contains("NaN"));
        let mut sweep = SweepCost {
            job: "mix".into(),
            segment_ms: 10,
            levels: vec![1, 2],
            per_config: vec![SweepConfigCost {
                config: "stock".into(),
                points: vec![
                    Measured::new("stock", vec![10.0]),
                    Measured::new("stock", vec![]),
                ],
                relative_to_stock: None,
                max_jobs_per_min: None,
                max_at: None,
            }],
        };
        summarize_sweep(&[1, 2], &mut sweep.per_config);
        let s = sweep_svg("sweep", &sweep);
        assert!(s.contains("polyline") && !s.contains("NaN"));
    }
}
