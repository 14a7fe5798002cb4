//! The L3 cache partition (DROPS §4.4: a VM server colours pages so that
//! time-sharing work cannot evict the real-time working set; today Intel CAT
//! and AMD L3 QoS give the same through resctrl's capacity bitmasks): which
//! ways the RT side gets and the `schemata` lines that say so. Pure: the
//! resctrl writer is `rtmgr_linux::resources::resctrl`.

/// The RT and NRT capacity bitmasks of one split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSplit {
    /// The RT side's ways (the high end of the mask).
    pub rt: u64,
    /// The NRT side's ways (the low end).
    pub nrt: u64,
    pub rt_ways: u32,
    pub total_ways: u32,
}

impl CacheSplit {
    /// The share of the ways the RT side has.
    pub fn rt_share(&self) -> f64 {
        f64::from(self.rt_ways) / f64::from(self.total_ways)
    }
}

/// Parse a hex capacity bitmask ("fffff", "0x7ff").
pub fn parse_mask(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_start_matches("0x");
    u64::from_str_radix(t, 16).map_err(|_| format!("{s:?} is not a hex capacity bitmask"))
}

/// Split the full mask `cbm` (contiguous ways, as resctrl's
/// `info/L3/cbm_mask` says) into RT and NRT, the RT side getting `share`
/// of the ways (rounded, at least `min_bits`, and leaving NRT at least
/// `min_bits`). Both masks are contiguous, as Intel CAT requires.
pub fn split(cbm: u64, min_bits: u32, share: f64) -> Result<CacheSplit, String> {
    let run = cbm.checked_shr(cbm.trailing_zeros()).unwrap_or(0);
    if cbm == 0 || run & run.wrapping_add(1) != 0 {
        return Err(format!("cbm_mask {cbm:x} is not a contiguous run of ways"));
    }
    let total = cbm.count_ones();
    let min = min_bits.max(1);
    if total < 2 * min {
        return Err(format!(
            "the L3 has {total} ways and each side needs at least {min}: too few to split"
        ));
    }
    if !(share > 0.0 && share < 1.0) {
        return Err(format!("RT cache share {share} must be within (0, 1)"));
    }
    let rt_ways = ((f64::from(total) * share).round() as u32).clamp(min, total - min);
    let low = cbm.trailing_zeros();
    let nrt_ways = total - rt_ways;
    let ones = |n: u32| if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    let nrt = ones(nrt_ways) << low;
    let rt = ones(rt_ways) << (low + nrt_ways);
    Ok(CacheSplit {
        rt,
        nrt,
        rt_ways,
        total_ways: total,
    })
}

/// The cache domains (ids) of a group's `schemata` L3 line
/// ("L3:0=fffff;1=fffff"). Err when the schemata has code/data
/// prioritisation (L3CODE/L3DATA) or no L3 line.
pub fn l3_domains(schemata: &str) -> Result<Vec<u32>, String> {
    for line in schemata.lines() {
        let line = line.trim();
        if line.starts_with("L3CODE") || line.starts_with("L3DATA") {
            return Err(
                "L3 code/data prioritisation (CDP) is on: rtmgr splits plain L3 masks only".into(),
            );
        }
        if let Some(rest) = line.strip_prefix("L3:") {
            return rest
                .split(';')
                .map(|d| {
                    d.split('=')
                        .next()
                        .and_then(|id| id.trim().parse().ok())
                        .ok_or_else(|| format!("schemata L3 entry {d:?}"))
                })
                .collect();
        }
    }
    Err("the resctrl schemata has no L3 line".into())
}

/// An L3 schemata line giving every domain `mask`.
pub fn l3_line(domains: &[u32], mask: u64) -> String {
    let parts: Vec<String> = domains.iter().map(|d| format!("{d}={mask:x}")).collect();
    format!("L3:{}", parts.join(";"))
}

/// The L3 masks of a schemata, by domain ("L3:0=003ff;1=3ff" → [(0, 0x3ff),
/// (1, 0x3ff)]): the kernel pads what it shows, so schemata compare by these.
pub fn l3_masks(schemata: &str) -> Option<Vec<(u32, u64)>> {
    let line = schemata
        .lines()
        .find_map(|l| l.trim().strip_prefix("L3:"))?;
    line.split(';')
        .map(|d| {
            let (id, mask) = d.split_once('=')?;
            Some((id.trim().parse().ok()?, parse_mask(mask).ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn l3_masks_compare_padded_and_bare() {
        let shown = "    MB:0=100\n    L3:0=003ff;1=fffff\n";
        assert_eq!(l3_masks(shown), Some(vec![(0, 0x3ff), (1, 0xfffff)]));
        assert_eq!(
            l3_masks(shown),
            l3_masks(&l3_line(&[0, 1], 0x3ff)).map(|mut v| {
                v[1].1 = 0xfffff;
                v
            })
        );
        assert_eq!(l3_masks("MB:0=100"), None);
    }

    #[test]
    fn halves_of_twenty_ways_are_contiguous_and_disjoint() {
        let s = split(0xfffff, 1, 0.5).unwrap();
        assert_eq!((s.rt, s.nrt, s.rt_ways), (0xffc00, 0x003ff, 10));
        assert_eq!(s.rt & s.nrt, 0);
        assert_eq!(s.rt | s.nrt, 0xfffff);
        assert_eq!(s.rt_share(), 0.5);
    }

    #[test]
    fn shares_round_and_keep_each_side_its_minimum() {
        assert_eq!(split(0x7ff, 2, 0.01).unwrap().rt_ways, 2);
        assert_eq!(split(0x7ff, 2, 0.99).unwrap().rt_ways, 9);
        assert_eq!(
            split(0xff0, 1, 0.25).unwrap(),
            CacheSplit {
                rt: 0xc00,
                nrt: 0x3f0,
                rt_ways: 2,
                total_ways: 8
            }
        );
        assert!(split(0x3, 2, 0.5).is_err());
        assert!(split(0xf0f, 1, 0.5).is_err());
        assert!(split(0xff, 1, 1.0).is_err());
    }

    #[test]
    fn schemata_lines_parse_and_print() {
        assert_eq!(
            l3_domains("    MB:0=100;1=100\n    L3:0=fffff;1=fffff\n"),
            Ok(vec![0, 1])
        );
        assert!(l3_domains("L3CODE:0=fffff\nL3DATA:0=fffff\n").is_err());
        assert!(l3_domains("MB:0=100\n").is_err());
        assert_eq!(l3_line(&[0, 1], 0xffc00), "L3:0=ffc00;1=ffc00");
        assert_eq!(parse_mask("0x7ff\n"), Ok(0x7ff));
        assert!(parse_mask("zz").is_err());
    }
}
