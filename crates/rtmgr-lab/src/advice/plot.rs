//! McKenney §3 Figs. 5–7: total delay (latency at a percentile + work ×
//! slowdown) against work-unit duration, log-log, one curve per
//! configuration, the crossovers marked.

use crate::advice::curves::KindCurves;
use crate::plot::{esc, Frame, COLORS, H, MB, MT};
use std::fmt::Write as _;

fn duration_label(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.0} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.0} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// One figure: x = work duration, y = total delay, both log10.
pub fn delay_svg(title: &str, k: &KindCurves) -> String {
    let ys = k.curves.iter().flat_map(|c| c.points.iter().map(|p| p.1));
    let (ylo, yhi) = ys
        .filter(|y| *y > 0.0)
        .fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
    let (ylo, yhi) = if ylo <= yhi { (ylo, yhi) } else { (1e3, 1e8) };
    let (y0, y1) = (ylo.log10().floor(), yhi.log10().ceil());
    let mut f = Frame::new(
        title,
        "work-unit duration (log)",
        "total delay (log)",
        (3.0, 8.0),
        (y0, y1.max(y0 + 1.0)),
    );
    for d in 3..=8 {
        f.xtick(d as f64, &duration_label(10f64.powi(d)));
    }
    for d in (y0 as i32)..=(y1 as i32) {
        f.ytick(d as f64, &duration_label(10f64.powi(d)));
    }
    for (i, c) in k.curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = c
            .points
            .iter()
            .filter(|p| p.0 > 0.0 && p.1 > 0.0)
            .map(|p| (p.0.log10(), p.1.log10()))
            .collect();
        f.polyline(&pts, color);
        f.legend(i, &c.config, color);
    }
    for x in &k.crossovers {
        if !(1e3..=1e8).contains(&x.work_ns) {
            continue;
        }
        let px = f.px(x.work_ns.log10());
        let _ = write!(
            f.svg,
            r##"<line x1="{px:.1}" y1="{MT}" x2="{px:.1}" y2="{}" stroke="#999" stroke-dasharray="3,3"/><text x="{:.1}" y="{}" font-size="9">{}</text>"##,
            H - MB,
            px + 3.0,
            MT + 12.0,
            esc(&format!(
                "{}|{} {}",
                x.below,
                x.above,
                duration_label(x.work_ns)
            ))
        );
    }
    f.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advice::curves::{Crossover, Curve};
    use crate::advice::delay::DelayModel;

    #[test]
    fn log_log_figure_is_well_formed() {
        let model = DelayModel {
            latency_ns: 1e5,
            slowdown: 1.5,
        };
        let k = KindCurves {
            kind: "user".into(),
            what: "user-mode compute".into(),
            curves: vec![Curve {
                config: "shield".into(),
                model,
                points: vec![(1e3, model.total_ns(1e3)), (1e8, model.total_ns(1e8))],
            }],
            crossovers: vec![Crossover {
                below: "shield".into(),
                above: "stock".into(),
                work_ns: 1.8e6,
            }],
        };
        let s = delay_svg("Fig. 5 <user>", &k);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert!(s.contains("shield|stock 2 ms") && s.contains("&lt;user&gt;"));
        assert!(!s.contains("NaN") && !s.contains("inf"));
        let empty = KindCurves {
            curves: vec![],
            crossovers: vec![],
            ..k
        };
        assert!(!delay_svg("none", &empty).contains("NaN"));
    }
}
