//! CPU sets in the kernel's two spellings: the list syntax (`0-3,8`, used by
//! cpuset.cpus and smp_affinity_list) and the hex mask syntax (`ff,00000001`,
//! used by smp_affinity and default_smp_affinity). ARTiS §2.1: a partition is
//! two such sets, RT and NRT.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// Largest CPU number accepted; guards against `0-4000000000` eating memory.
pub const MAX_CPUS: u32 = 8192;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetError {
    #[error("malformed CPU list {0:?}: expected the kernel's syntax, e.g. \"0-3,8\"")]
    Malformed(String),
    #[error("CPU list {0:?}: range {1}-{2} is reversed")]
    Reversed(String, u32, u32),
    #[error("CPU list {0:?}: CPU {1} is beyond the supported maximum {max}", max = MAX_CPUS - 1)]
    TooLarge(String, u32),
    #[error("malformed CPU mask {0:?}: expected comma-separated 32-bit hex words")]
    MalformedMask(String),
}

/// An ordered set of CPU numbers.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet(BTreeSet<u32>);

impl CpuSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn single(cpu: u32) -> Self {
        Self([cpu].into_iter().collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    pub fn insert(&mut self, cpu: u32) {
        self.0.insert(cpu);
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    pub fn first(&self) -> Option<u32> {
        self.0.first().copied()
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.union(&other.0).copied().collect())
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }

    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.difference(&other.0).copied().collect())
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }

    pub fn is_disjoint(&self, other: &CpuSet) -> bool {
        self.0.is_disjoint(&other.0)
    }

    /// Parse the kernel's list syntax. Whitespace around items and a trailing
    /// newline are accepted (sysfs files end with one); an empty string is the
    /// empty set (an empty cpuset.cpus file).
    pub fn parse_list(text: &str) -> Result<Self, CpuSetError> {
        let trimmed = text.trim();
        let mut set = BTreeSet::new();
        if trimmed.is_empty() {
            return Ok(CpuSet(set));
        }
        let bad = || CpuSetError::Malformed(trimmed.to_string());
        for item in trimmed.split(',') {
            let item = item.trim();
            let (range, stride) = match item.split_once(':') {
                // The kernel also accepts "0-15:2/4" (used/group); we accept the plain
                // stride form "a-b:s" only, which is rare; reject the rest clearly.
                Some((r, s)) => (r, Some(s.parse::<u32>().map_err(|_| bad())?)),
                None => (item, None),
            };
            let (lo, hi) = match range.split_once('-') {
                Some((a, b)) => (parse_num(a.trim(), trimmed)?, parse_num(b.trim(), trimmed)?),
                None => {
                    let n = parse_num(range.trim(), trimmed)?;
                    (n, n)
                }
            };
            if lo > hi {
                return Err(CpuSetError::Reversed(trimmed.to_string(), lo, hi));
            }
            if hi >= MAX_CPUS {
                return Err(CpuSetError::TooLarge(trimmed.to_string(), hi));
            }
            let step = stride.unwrap_or(1);
            if step == 0 {
                return Err(bad());
            }
            set.extend((lo..=hi).step_by(step as usize));
        }
        Ok(CpuSet(set))
    }

    /// Parse a hex mask as in /proc/irq/*/smp_affinity: 32-bit words separated
    /// by commas, most significant first.
    pub fn parse_mask(text: &str) -> Result<Self, CpuSetError> {
        let trimmed = text.trim();
        let bad = || CpuSetError::MalformedMask(trimmed.to_string());
        if trimmed.is_empty() {
            return Err(bad());
        }
        let words: Vec<&str> = trimmed.split(',').collect();
        let mut set = BTreeSet::new();
        for (i, word) in words.iter().rev().enumerate() {
            if word.is_empty() || word.len() > 8 {
                return Err(bad());
            }
            let value = u32::from_str_radix(word, 16).map_err(|_| bad())?;
            for bit in 0..32 {
                if value & (1 << bit) != 0 {
                    let cpu = i as u32 * 32 + bit;
                    if cpu >= MAX_CPUS {
                        return Err(bad());
                    }
                    set.insert(cpu);
                }
            }
        }
        Ok(CpuSet(set))
    }

    /// Format as a hex mask in the kernel's style (comma-separated 32-bit words).
    /// `nr_words` pads to the width the kernel prints (at least one word).
    pub fn to_mask(&self, nr_words: usize) -> String {
        let needed = self.0.last().map(|&c| c as usize / 32 + 1).unwrap_or(1);
        let words = needed.max(nr_words).max(1);
        let mut out = Vec::with_capacity(words);
        for w in (0..words).rev() {
            let mut value = 0u32;
            for bit in 0..32 {
                if self.contains(w as u32 * 32 + bit) {
                    value |= 1 << bit;
                }
            }
            out.push(if words == 1 {
                format!("{value:x}")
            } else {
                format!("{value:08x}")
            });
        }
        out.join(",")
    }

    /// Format in the kernel's list syntax, ranges collapsed: `0-3,8`.
    pub fn to_list(&self) -> String {
        let mut parts = Vec::new();
        let mut iter = self.0.iter().copied().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end = iter.next().unwrap_or(end);
            }
            parts.push(if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            });
        }
        parts.join(",")
    }
}

fn parse_num(text: &str, whole: &str) -> Result<u32, CpuSetError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CpuSetError::Malformed(whole.to_string()));
    }
    text.parse::<u32>()
        .map_err(|_| CpuSetError::TooLarge(whole.to_string(), u32::MAX))
}

impl FromStr for CpuSet {
    type Err = CpuSetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_list(s)
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_list())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({})", self.to_list())
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        CpuSet(iter.into_iter().collect())
    }
}

impl Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_list())
    }
}

impl<'de> Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        CpuSet::parse_list(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_kernel_lists() {
        assert_eq!(CpuSet::parse_list("0-3,8").unwrap().to_list(), "0-3,8");
        assert_eq!(CpuSet::parse_list("1\n").unwrap().to_list(), "1");
        assert_eq!(CpuSet::parse_list("").unwrap().len(), 0);
        assert_eq!(CpuSet::parse_list("5,1-2, 3").unwrap().to_list(), "1-3,5");
        assert_eq!(CpuSet::parse_list("0-7:2").unwrap().to_list(), "0,2,4,6");
    }

    #[test]
    fn rejects_malformed_lists() {
        for bad in [
            "a", "1-", "-1", "1,,2", "3-1", "1-2-3", "99999", "0x1", "1 2", "0-7:0",
        ] {
            assert!(CpuSet::parse_list(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn parses_and_formats_masks() {
        assert_eq!(CpuSet::parse_mask("3").unwrap().to_list(), "0-1");
        assert_eq!(
            CpuSet::parse_mask("00000001,00000000\n").unwrap().to_list(),
            "32"
        );
        assert_eq!(
            CpuSet::parse_list("0,33").unwrap().to_mask(1),
            "00000002,00000001"
        );
        assert_eq!(CpuSet::parse_list("1").unwrap().to_mask(1), "2");
        assert!(CpuSet::parse_mask("xyz").is_err());
        assert!(CpuSet::parse_mask("").is_err());
    }

    proptest! {
        #[test]
        fn list_round_trips(cpus in proptest::collection::btree_set(0u32..300, 0..40)) {
            let set: CpuSet = cpus.into_iter().collect();
            prop_assert_eq!(CpuSet::parse_list(&set.to_list()).unwrap(), set.clone());
            prop_assert_eq!(CpuSet::parse_mask(&set.to_mask(1)).unwrap(), set);
        }
    }
}
