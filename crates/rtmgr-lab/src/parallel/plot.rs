//! McKenney §3 Fig. 8: average, p99.999 and maximum latency (log scale)
//! against the number of parallel real-time tasks.

use super::{ParallelLevel, P99999};
use crate::plot::{fmt_us, Frame, COLORS};

pub fn parallel_svg(title: &str, levels: &[ParallelLevel]) -> String {
    type Pick = fn(&ParallelLevel) -> Option<f64>;
    let series: [(&str, Pick); 3] = [
        ("average", |l| l.summary.mean_ns),
        ("p99.999", |l| l.summary.get(P99999).map(|v| v as f64)),
        ("maximum", |l| l.summary.max_ns.map(|v| v as f64)),
    ];
    let all: Vec<f64> = levels
        .iter()
        .flat_map(|l| series.iter().filter_map(move |(_, f)| f(l)))
        .filter(|v| *v > 0.0)
        .collect();
    let lo = all.iter().copied().fold(f64::MAX, f64::min).clamp(1.0, 1e3);
    let hi = all.iter().copied().fold(1e4, f64::max);
    let xmax = levels.iter().map(|l| l.tasks).max().unwrap_or(1).max(2) as f64;
    let mut f = Frame::new(
        title,
        "parallel real-time tasks",
        "latency (µs, log scale)",
        (0.5, xmax + 0.5),
        (lo.log10().floor(), hi.log10().ceil()),
    );
    for l in levels {
        f.xtick(l.tasks as f64, &l.tasks.to_string());
    }
    for d in (lo.log10().floor() as i32)..=(hi.log10().ceil() as i32) {
        f.ytick(d as f64, &fmt_us(10f64.powi(d)));
    }
    for (k, (name, pick)) in series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = levels
            .iter()
            .filter_map(|l| {
                pick(l)
                    .filter(|v| *v > 0.0)
                    .map(|v| (l.tasks as f64, v.log10()))
            })
            .collect();
        f.polyline(&pts, COLORS[k]);
        f.legend(k, name, COLORS[k]);
    }
    f.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtmgr_core::stats::Hist;

    #[test]
    fn three_lines_no_nan() {
        let levels: Vec<ParallelLevel> = (1..=3)
            .map(|k| {
                let mut h = Hist::new();
                for v in 0..100 {
                    h.record(5_000 * k + v);
                }
                ParallelLevel {
                    tasks: k as u32,
                    summary: h.summary(0),
                }
            })
            .collect();
        let s = parallel_svg("Fig. 8", &levels);
        assert!(s.contains("average") && s.contains("maximum") && s.contains("polyline"));
        assert!(!s.contains("NaN") && !s.contains("inf"));
        assert!(!parallel_svg("empty", &[]).contains("NaN"));
    }
}
