//! Durations in refusals and tables: "11.2 ms", "250 µs", "1.5 s".

/// A duration in ns, in the largest unit that keeps it ≥ 1, one decimal at most.
pub fn duration(ns: u64) -> String {
    let (v, unit) = if ns >= 1_000_000_000 {
        (ns as f64 / 1e9, "s")
    } else if ns >= 1_000_000 {
        (ns as f64 / 1e6, "ms")
    } else if ns >= 1_000 {
        (ns as f64 / 1e3, "µs")
    } else {
        (ns as f64, "ns")
    };
    let rounded = (v * 10.0).round() / 10.0;
    if rounded.fract() == 0.0 {
        format!("{rounded:.0} {unit}")
    } else {
        format!("{rounded:.1} {unit}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn units() {
        assert_eq!(super::duration(11_200_000), "11.2 ms");
        assert_eq!(super::duration(10_000_000), "10 ms");
        assert_eq!(super::duration(250_000), "250 µs");
        assert_eq!(super::duration(1_500_000_000), "1.5 s");
        assert_eq!(super::duration(7), "7 ns");
    }
}
