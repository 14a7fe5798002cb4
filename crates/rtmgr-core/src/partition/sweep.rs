//! The daemon's drift check of the partition's knobs spread over its
//! reconciles (DROPS §4.1: the manager keeps what it set, at a cost an idle
//! machine does not notice): which knobs one reconcile verifies.

/// Which knobs a reconcile verifies: the partition's enabled knobs and then
/// `[resources]` as one more, spread over `slices` reconciles, so each is
/// verified once every `slices` ticks (`[serve] knob_verify_ms` over
/// `reconcile_ms`) and a tick reads a few of them, not all (issue 29: ~235
/// file opens a second when every knob was verified every second).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnobSweep {
    slices: u64,
    tick: u64,
}

impl Default for KnobSweep {
    /// Every knob at every reconcile.
    fn default() -> Self {
        KnobSweep { slices: 1, tick: 0 }
    }
}

impl KnobSweep {
    /// Every knob within `knob_verify_ms` at one reconcile each
    /// `reconcile_ms`; up to `reconcile_ms` (0 too): all at every reconcile.
    pub fn new(knob_verify_ms: u64, reconcile_ms: u64) -> KnobSweep {
        KnobSweep {
            slices: knob_verify_ms.div_ceil(reconcile_ms.max(1)).max(1),
            tick: 0,
        }
    }

    /// Reconciles between two checks of one knob.
    pub fn slices(&self) -> u64 {
        self.slices
    }

    /// Of `units` knobs, is the `i`th due at this tick? Unit `i` has the
    /// slice `i * slices / units`: spread evenly, each in exactly one.
    pub fn due(&self, i: usize, units: usize) -> bool {
        let units = units.max(1) as u64;
        (i as u64 * self.slices / units) == self.tick % self.slices
    }

    /// On to the next reconcile's slice.
    pub fn advance(&mut self) {
        self.tick = self.tick.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_puts_every_knob_in_exactly_one_slice_and_spreads_them() {
        for (units, slices) in [(15, 10), (15, 50), (3, 3), (1, 1), (7, 1), (2, 9)] {
            let mut s = KnobSweep { slices, tick: 0 };
            let mut seen = vec![0u32; units];
            let per_tick_max = (units as u64).div_ceil(slices);
            for _ in 0..slices {
                let due: Vec<usize> = (0..units).filter(|&i| s.due(i, units)).collect();
                assert!(
                    due.len() as u64 <= per_tick_max,
                    "{units}/{slices}: {due:?}"
                );
                due.iter().for_each(|&i| seen[i] += 1);
                s.advance();
            }
            assert!(seen.iter().all(|&n| n == 1), "{units}/{slices}: {seen:?}");
        }
        assert_eq!(KnobSweep::new(10_000, 1000).slices(), 10);
        assert_eq!(KnobSweep::new(10_000, 200).slices(), 50);
        assert_eq!(KnobSweep::new(2500, 1000).slices(), 3);
        assert_eq!(KnobSweep::new(0, 1000).slices(), 1);
        assert_eq!(KnobSweep::new(500, 1000).slices(), 1);
    }
}
