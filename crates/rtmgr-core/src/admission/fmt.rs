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

/// Parse "4ms", "250us", "250µs", "1.5ms", "2s", "100ns" (a number and a unit).
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("duration {text:?} has no unit (ns, us, ms or s)"))?;
    let (num, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        u => {
            return Err(format!(
                "duration {text:?}: unknown unit {u:?} (ns, us, ms or s)"
            ))
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("duration {text:?}: {num:?} is not a number"))?;
    let ns = v * scale;
    if !ns.is_finite() || !(0.0..=1e18).contains(&ns) {
        return Err(format!("duration {text:?} out of range"));
    }
    Ok(ns.round() as u64)
}

#[cfg(test)]
mod parse_tests {
    #[test]
    fn parses_units() {
        assert_eq!(super::parse_duration("4ms"), Ok(4_000_000));
        assert_eq!(super::parse_duration("1.5 ms"), Ok(1_500_000));
        assert_eq!(super::parse_duration("250µs"), Ok(250_000));
        assert_eq!(super::parse_duration("2s"), Ok(2_000_000_000));
        assert!(super::parse_duration("4").is_err());
        assert!(super::parse_duration("4 h").is_err());
        assert!(super::parse_duration("x ms").is_err());
    }
}
