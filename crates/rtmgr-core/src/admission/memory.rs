//! Locked-memory admission (McKenney §4–5: `mlockall` takes memory away from
//! the VM system, and a workload that oversubscribes memory cannot be real
//! time; DROPS footnote 1: the RT side asks for more memory at run time).
//! RT clients' locked-memory allowances are counted against MemAvailable; a
//! request that would oversubscribe the share the daemon may hand out is
//! refused with its numbers.

use std::fmt;

/// How much locked memory RT clients may hold in all.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryBudget {
    /// Share of MemAvailable (at the daemon's start) RT clients may lock, (0, 1].
    pub share: f64,
    /// MemAvailable when the daemon started, bytes.
    pub available_at_start: u64,
}

/// A request for locked memory that does not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryRefusal {
    pub asked: u64,
    /// Already allowed to other reservations.
    pub held: u64,
    /// The most RT clients may hold in all.
    pub limit: u64,
    /// MemAvailable now.
    pub available_now: u64,
}

impl MemoryBudget {
    /// The most RT clients may hold in all, bytes.
    pub fn limit(&self) -> u64 {
        (self.available_at_start as f64 * self.share) as u64
    }

    /// May `asked` bytes more be locked, with `held` already allowed and
    /// `available_now` bytes available? Both the share of the start's
    /// MemAvailable and what is available now must hold it (memory locked
    /// since by others counts too).
    pub fn check(&self, asked: u64, held: u64, available_now: u64) -> Result<(), MemoryRefusal> {
        let limit = self.limit();
        if held.saturating_add(asked) > limit || asked > available_now {
            return Err(MemoryRefusal {
                asked,
                held,
                limit,
                available_now,
            });
        }
        Ok(())
    }
}

/// Bytes for people: "64 MiB", "1.5 GiB", "512 B".
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if v.fract() < 0.05 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A byte size from config: a number of bytes, or one with a K/M/G/T suffix
/// (powers of 1024, optional "iB"/"B").
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (bytes, or a number with K, M, G or T)"))?;
    let shift = match unit.trim().trim_end_matches("iB").trim_end_matches('B') {
        "" => 0,
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        "T" | "t" => 40,
        _ => return Err(format!("{s:?}: unknown unit (K, M, G or T)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

impl fmt::Display for MemoryRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.held.saturating_add(self.asked) > self.limit {
            write!(
                f,
                "locked memory: {} asked, {} already allowed to RT clients, {} is the most they may lock ({} available now); ask for at most {}",
                fmt_bytes(self.asked),
                fmt_bytes(self.held),
                fmt_bytes(self.limit),
                fmt_bytes(self.available_now),
                fmt_bytes(self.limit.saturating_sub(self.held)),
            )
        } else {
            write!(
                f,
                "locked memory: {} asked, only {} available now (MemAvailable); locking it would oversubscribe memory",
                fmt_bytes(self.asked),
                fmt_bytes(self.available_now),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn allowances_add_up_to_the_share_and_no_further() {
        let b = MemoryBudget {
            share: 0.5,
            available_at_start: 8 * GIB,
        };
        assert_eq!(b.limit(), 4 * GIB);
        assert!(b.check(GIB, 3 * GIB, 6 * GIB).is_ok());
        let r = b.check(GIB + 1, 3 * GIB, 6 * GIB).unwrap_err();
        assert_eq!((r.asked, r.held, r.limit), (GIB + 1, 3 * GIB, 4 * GIB));
        let m = r.to_string();
        assert!(
            m.contains("4 GiB is the most") && m.contains("at most 1 GiB"),
            "{m}"
        );
    }

    #[test]
    fn what_is_available_now_bounds_it_too() {
        let b = MemoryBudget {
            share: 1.0,
            available_at_start: 8 * GIB,
        };
        let r = b.check(2 * GIB, 0, GIB).unwrap_err();
        assert!(r.to_string().contains("only 1 GiB available now"), "{r}");
        assert!(b.check(0, 8 * GIB, 0).is_ok());
    }

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes(" 1 G "), Ok(1 << 30));
        assert!(parse_bytes("1.5G").is_err());
        assert!(parse_bytes("12Q").is_err());
        assert!(parse_bytes("99999999999T").is_err());
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(1536 << 20), "1.5 GiB");
    }
}
