//! The one grammar of durations rtmgr reads (flags, task sets, `rtmgr reserve`):
//! a decimal number and a unit — ns, us (µs), ms, s, m (min), h — as in "100us",
//! "1.5 ms", "10s" (McKenney §2.1: periods and runs; budget-based RTAI §3: W every P).

use std::fmt;

/// What a number without a unit means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BareNumber {
    /// Seconds: the measuring commands' flags ("--duration 10").
    Seconds,
    /// Refused: a reservation's period, budget or deadline names its unit.
    Refused,
}

/// A duration that does not follow the grammar; the message says the grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError(String);

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DurationError {}

impl From<DurationError> for String {
    fn from(e: DurationError) -> String {
        e.0
    }
}

/// Nanoseconds per unit, for each unit the grammar knows.
const UNITS: [(&str, u128); 9] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("min", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("", 1_000_000_000),
];

/// Parse a duration into nanoseconds, rounded to the nearest (half up). The
/// number is digits with at most one '.', a space may stand before the unit.
pub fn parse_ns(text: &str, bare: BareNumber) -> Result<u64, DurationError> {
    let t = text.trim();
    let fail = |what: String| DurationError(format!("{what}; {}", grammar(bare)));
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim();
    if unit.is_empty() && bare == BareNumber::Refused {
        return Err(fail(format!("duration {text:?} has no unit")));
    }
    let Some(&(_, scale)) = UNITS.iter().find(|(u, _)| *u == unit) else {
        return Err(fail(format!("duration {text:?}: unknown unit {unit:?}")));
    };
    let Some((units, fraction)) = decimal(number) else {
        return Err(fail(format!(
            "duration {text:?}: {number:?} is not a number"
        )));
    };
    let scaled = units
        .checked_mul(scale)
        .and_then(|whole| {
            let (num, den) = fraction;
            let part = num.checked_mul(scale)?;
            whole.checked_add((part + den / 2) / den)
        })
        .and_then(|ns| u64::try_from(ns).ok());
    scaled.ok_or_else(|| fail(format!("duration {text:?} is out of range")))
}

/// The grammar, as error messages state it.
fn grammar(bare: BareNumber) -> &'static str {
    match bare {
        BareNumber::Seconds => {
            "expected a number and a unit (ns, us, ms, s, m or h), e.g. 100us, 1.5ms, 10s; a bare number is seconds"
        }
        BareNumber::Refused => {
            "expected a number and a unit (ns, us, ms, s, m or h), e.g. 250us, 1.5ms, 4ms"
        }
    }
}

/// "12.345" → (12, (345, 1000)): the integer part and the fraction as a
/// ratio; None unless digits with at most one '.' and at least one digit.
fn decimal(number: &str) -> Option<(u128, (u128, u128))> {
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return None;
    }
    let digits = |s: &str| -> Option<u128> {
        s.chars().try_fold(0u128, |acc, c| {
            acc.checked_mul(10)?
                .checked_add(u128::from(c.to_digit(10)?))
        })
    };
    // Digits beyond 1e-24 s cannot change a nanosecond: keep the ratio in range.
    let frac = &frac[..frac.len().min(24)];
    let den = 10u128.pow(frac.len() as u32);
    Some((digits(int)?, (digits(frac)?, den)))
}

#[cfg(test)]
mod tests {
    use super::BareNumber::{Refused, Seconds};
    use super::*;

    #[test]
    fn flags_read_as_before_and_a_bare_number_is_seconds() {
        let ns = |s| parse_ns(s, Seconds).unwrap();
        assert_eq!(ns("100us"), 100_000);
        assert_eq!(ns("100µs"), 100_000);
        assert_eq!(ns("1ms"), 1_000_000);
        assert_eq!(ns("2.5s"), 2_500_000_000);
        assert_eq!(ns("3"), 3_000_000_000);
        assert_eq!(ns(" 3 "), 3_000_000_000);
        assert_eq!(ns("1.5"), 1_500_000_000);
        assert_eq!(ns("1m"), 60_000_000_000);
        assert_eq!(ns("2min"), 120_000_000_000);
        assert_eq!(ns("8h"), 8 * 3_600_000_000_000);
        assert_eq!(ns("250000ns"), 250_000);
        assert_eq!(ns(".5s"), 500_000_000);
        assert_eq!(ns("5.s"), 5_000_000_000);
        assert_eq!(ns("225ms"), 225_000_000);
        // Exact decimals: no binary rounding artefacts (4.1 × 1e9 in f64 is 4099999999.99…).
        assert_eq!(ns("4.1s"), 4_100_000_000);
        assert_eq!(ns("0.29s"), 290_000_000);
    }

    #[test]
    fn reservations_and_task_sets_name_their_unit() {
        let ns = |s| parse_ns(s, Refused).unwrap();
        assert_eq!(ns("4ms"), 4_000_000);
        assert_eq!(ns("1.5 ms"), 1_500_000);
        assert_eq!(ns("250µs"), 250_000);
        assert_eq!(ns("250us"), 250_000);
        assert_eq!(ns("2s"), 2_000_000_000);
        assert_eq!(ns("100ns"), 100);
        assert_eq!(ns("0ms"), 0);
        assert_eq!(ns("1.0000005ms"), 1_000_001, "rounded to the nearest ns");
        let bare = parse_ns("4", Refused).unwrap_err().to_string();
        assert!(bare.contains("has no unit"), "{bare}");
        assert!(bare.contains("e.g. 250us"), "{bare}");
    }

    #[test]
    fn errors_say_the_grammar() {
        for bad in [
            "x ms",
            "fast",
            "10 parsecs",
            "-1s",
            "1.2.3s",
            "ms",
            "",
            ".s",
            "1e3s",
        ] {
            let e = parse_ns(bad, Seconds).unwrap_err().to_string();
            assert!(e.contains("expected a number and a unit"), "{bad}: {e}");
            assert!(e.contains("a bare number is seconds"), "{bad}: {e}");
        }
        let e = parse_ns("4 parsecs", Refused).unwrap_err().to_string();
        assert!(e.contains("unknown unit \"parsecs\""), "{e}");
        assert!(!e.contains("bare number is seconds"), "{e}");
        let huge = parse_ns("99999999999h", Seconds).unwrap_err().to_string();
        assert!(huge.contains("out of range"), "{huge}");
    }
}
