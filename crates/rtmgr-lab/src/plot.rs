//! Plain SVG plots for measurement reports (docs/architecture.md "Measuring"): latency
//! histograms with a log y-axis, HDR-style percentile plots (x in "nines"), and
//! the DROPS §5.3 Figs. 6–8 series (time since the previous activation per
//! activation). Pure string building, no dependencies.

use rtmgr_core::stats::HistData;
use std::fmt::Write as _;

pub(crate) const W: f64 = 760.0;
pub(crate) const H: f64 = 360.0;
pub(crate) const ML: f64 = 70.0;
pub(crate) const MR: f64 = 150.0;
pub(crate) const MT: f64 = 30.0;
pub(crate) const MB: f64 = 45.0;
pub(crate) const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// Horizontal scale of the histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XScale {
    Linear,
    Log,
}

pub(crate) struct Frame {
    pub(crate) svg: String,
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Frame {
    pub(crate) fn new(
        title: &str,
        xlabel: &str,
        ylabel: &str,
        x: (f64, f64),
        y: (f64, f64),
    ) -> Frame {
        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"#
        );
        let _ = write!(
            svg,
            r#"<rect width="{W}" height="{H}" fill="white"/><text x="{}" y="18" text-anchor="middle" font-size="13">{}</text>"#,
            (ML + W - MR) / 2.0,
            esc(title)
        );
        let _ = write!(
            svg,
            r#"<rect x="{ML}" y="{MT}" width="{}" height="{}" fill="none" stroke="black"/>"#,
            W - ML - MR,
            H - MT - MB
        );
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text transform="translate(14,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
            (ML + W - MR) / 2.0,
            H - 8.0,
            esc(xlabel),
            (MT + H - MB) / 2.0,
            esc(ylabel)
        );
        let (x1, y1) = (
            if x.1 > x.0 { x.1 } else { x.0 + 1.0 },
            if y.1 > y.0 { y.1 } else { y.0 + 1.0 },
        );
        Frame {
            svg,
            x0: x.0,
            x1,
            y0: y.0,
            y1,
        }
    }

    pub(crate) fn px(&self, x: f64) -> f64 {
        ML + (x - self.x0) / (self.x1 - self.x0) * (W - ML - MR)
    }

    pub(crate) fn py(&self, y: f64) -> f64 {
        H - MB - (y - self.y0) / (self.y1 - self.y0) * (H - MT - MB)
    }

    pub(crate) fn xtick(&mut self, x: f64, text: &str) {
        let p = self.px(x);
        let _ = write!(
            self.svg,
            r#"<line x1="{p:.1}" y1="{}" x2="{p:.1}" y2="{}" stroke="black"/><text x="{p:.1}" y="{}" text-anchor="middle">{}</text>"#,
            H - MB,
            H - MB + 4.0,
            H - MB + 16.0,
            esc(text)
        );
    }

    pub(crate) fn ytick(&mut self, y: f64, text: &str) {
        let p = self.py(y);
        let _ = write!(
            self.svg,
            r##"<line x1="{}" y1="{p:.1}" x2="{}" y2="{p:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            ML,
            W - MR,
            ML - 4.0,
            p + 4.0,
            esc(text)
        );
    }

    pub(crate) fn polyline(&mut self, pts: &[(f64, f64)], color: &str) {
        let mut s = String::new();
        for (x, y) in pts {
            let _ = write!(s, "{:.1},{:.1} ", self.px(*x), self.py(*y));
        }
        let _ = write!(
            self.svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{}"/>"#,
            s.trim_end()
        );
    }

    pub(crate) fn legend(&mut self, i: usize, name: &str, color: &str) {
        let y = MT + 14.0 + 16.0 * i as f64;
        let x = W - MR + 10.0;
        let _ = write!(
            self.svg,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            x + 18.0,
            x + 22.0,
            y + 4.0,
            esc(name)
        );
    }

    pub(crate) fn finish(mut self) -> String {
        self.svg.push_str("</svg>\n");
        self.svg
    }
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

pub(crate) fn fmt_us(ns: f64) -> String {
    let us = ns / 1000.0;
    if us.abs() >= 100.0 || us == 0.0 {
        format!("{us:.0}")
    } else if us.abs() >= 10.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.2}")
    }
}

/// Decades of 10 covering [lo, hi] (both > 0).
fn decades(lo: f64, hi: f64) -> Vec<f64> {
    let mut v = Vec::new();
    let mut d = 10f64.powf(lo.max(1e-9).log10().floor());
    while d <= hi * 1.0001 {
        if d >= lo * 0.9999 {
            v.push(d);
        }
        d *= 10.0;
    }
    v
}

/// Histogram of one or more distributions: x = latency (µs), y = count (log scale).
pub fn histogram_svg(title: &str, series: &[(&str, &HistData)], xs: XScale) -> String {
    let nonempty: Vec<_> = series
        .iter()
        .filter(|(_, d)| !d.buckets.is_empty())
        .collect();
    let lo = nonempty
        .iter()
        .map(|(_, d)| d.buckets[0].0)
        .min()
        .unwrap_or(0) as f64;
    let hi = nonempty
        .iter()
        .map(|(_, d)| d.buckets[d.buckets.len() - 1].0)
        .max()
        .unwrap_or(1) as f64;
    let log_x = xs == XScale::Log && lo > 0.0;
    let tx = |v: f64| if log_x { v.max(1.0).log10() } else { v };
    let (a, b) = (tx(lo), tx(hi.max(lo + 1.0)));
    const BINS: usize = 100;
    let width = (b - a) / BINS as f64;
    let binned: Vec<Vec<u64>> = nonempty
        .iter()
        .map(|(_, d)| {
            let mut bins = vec![0u64; BINS];
            for &(v, c) in &d.buckets {
                let i = (((tx(v as f64) - a) / width) as usize).min(BINS - 1);
                bins[i] += c;
            }
            bins
        })
        .collect();
    let ymax = binned.iter().flatten().copied().max().unwrap_or(1).max(1) as f64;
    let mut f = Frame::new(
        title,
        if log_x {
            "latency (µs, log scale)"
        } else {
            "latency (µs)"
        },
        "samples (log scale)",
        (a, b),
        (0.0, (ymax * 2.0).log10()),
    );
    for d in decades(1.0, ymax) {
        f.ytick(d.log10(), &format!("{d:.0}"));
    }
    if log_x {
        for d in decades(lo.max(1.0), hi) {
            f.xtick(d.log10(), &fmt_us(d));
        }
    } else {
        for i in 0..=5 {
            let v = a + (b - a) * i as f64 / 5.0;
            f.xtick(v, &fmt_us(v));
        }
    }
    for (k, ((name, _), bins)) in nonempty.iter().zip(&binned).enumerate() {
        let color = COLORS[k % COLORS.len()];
        let mut pts = Vec::new();
        for (i, &c) in bins.iter().enumerate() {
            // log10(1 + c): empty bins sit on the axis.
            let y = ((c + 1) as f64).log10();
            pts.push((a + width * i as f64, y));
            pts.push((a + width * (i + 1) as f64, y));
        }
        f.polyline(&pts, color);
        f.legend(k, name, color);
    }
    f.finish()
}

/// Percentile plot: x = percentile in "nines" (−log10(1 − q)), y = latency (µs, log).
pub fn percentile_svg(title: &str, series: &[(&str, &HistData)]) -> String {
    let nonempty: Vec<_> = series.iter().filter(|(_, d)| d.n > 0).collect();
    let nmax = nonempty
        .iter()
        .map(|(_, d)| d.n)
        .max()
        .unwrap_or(10)
        .max(10) as f64;
    let ymin = nonempty
        .iter()
        .filter_map(|(_, d)| d.min_ns)
        .min()
        .unwrap_or(1)
        .max(1) as f64;
    let ymax = nonempty
        .iter()
        .filter_map(|(_, d)| d.max_ns)
        .max()
        .unwrap_or(10)
        .max(10) as f64;
    let mut f = Frame::new(
        title,
        "percentile",
        "latency (µs, log scale)",
        (0.0, nmax.log10()),
        (ymin.log10(), (ymax * 1.5).log10()),
    );
    for (i, name) in ["p0", "p90", "p99", "p99.9", "p99.99", "p99.999", "p99.9999"]
        .iter()
        .enumerate()
    {
        if (i as f64) <= nmax.log10() {
            f.xtick(i as f64, name);
        }
    }
    for d in decades(ymin, ymax * 1.5) {
        f.ytick(d.log10(), &fmt_us(d));
    }
    for (k, (name, d)) in nonempty.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let mut cum = 0u64;
        let mut pts = Vec::new();
        for &(v, c) in &d.buckets {
            let q_before = cum as f64 / d.n as f64;
            cum += c;
            let q = (cum as f64 / d.n as f64).min(1.0 - 1.0 / d.n as f64);
            let y = (v.max(1) as f64).log10();
            pts.push((-(1.0 - q_before).log10(), y));
            pts.push((-(1.0 - q).log10(), y));
        }
        f.polyline(&pts, color);
        f.legend(k, name, color);
    }
    f.finish()
}

/// DROPS Figs. 6–8: x = activation number, y = time since the previous activation (µs).
pub fn series_svg(title: &str, values_ns: &[i64], period_ns: u64) -> String {
    let ymax = values_ns
        .iter()
        .copied()
        .max()
        .unwrap_or(period_ns as i64)
        .max(period_ns as i64) as f64;
    let mut f = Frame::new(
        title,
        "activation",
        "time since previous activation (µs)",
        (0.0, values_ns.len().max(1) as f64),
        (0.0, ymax * 1.1),
    );
    for i in 0..=5 {
        let y = ymax * 1.1 * i as f64 / 5.0;
        f.ytick(y, &fmt_us(y));
    }
    for i in 0..=4 {
        let x = values_ns.len() as f64 * i as f64 / 4.0;
        f.xtick(x, &format!("{x:.0}"));
    }
    let pts: Vec<(f64, f64)> = values_ns
        .iter()
        .enumerate()
        .map(|(i, &v)| (i as f64, v as f64))
        .collect();
    f.polyline(&pts, COLORS[0]);
    f.polyline(
        &[
            (0.0, period_ns as f64),
            (values_ns.len() as f64, period_ns as f64),
        ],
        "#999",
    );
    f.legend(0, "measured", COLORS[0]);
    f.legend(1, "period", "#999");
    f.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtmgr_core::stats::Hist;

    fn data(vals: impl IntoIterator<Item = i64>) -> HistData {
        let mut h = Hist::new();
        for v in vals {
            h.record(v);
        }
        h.to_data()
    }

    #[test]
    fn svgs_are_well_formed_and_name_series() {
        let a = data((1..5000).map(|i| 2000 + i * 3));
        let b = data((1..100).map(|i| 50_000 + i * 1000));
        for xs in [XScale::Log, XScale::Linear] {
            let s = histogram_svg("t <1>", &[("stock", &a), ("rtmgr", &b)], xs);
            assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
            assert!(s.contains("stock") && s.contains("rtmgr") && s.contains("t &lt;1&gt;"));
            assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
        }
        let p = percentile_svg("p", &[("a", &a), ("empty", &data([]))]);
        assert!(p.contains("p99") && !p.contains("NaN"));
        let d = series_svg("drops", &[100_000, 99_000, 250_000], 100_000);
        assert!(d.contains("polyline") && !d.contains("NaN"));
        let neg = histogram_svg("jitter", &[("j", &data([-500, 0, 700]))], XScale::Log);
        assert!(!neg.contains("NaN"));
        assert!(!histogram_svg("none", &[], XScale::Log).contains("NaN"));
    }
}
