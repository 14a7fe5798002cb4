//! One shape for every change rtmgr makes to the machine, as tuned has one
//! plugin shape (DROPS "Taming Linux" §4.1: the resource manager owns what
//! it grants, keeps it and gives it back; ARTiS §2.1: what a partition moves
//! off its RT CPUs): a step records what it will change (`snapshot`),
//! changes it (`apply`), says what no longer holds (`verify`, as
//! `drift::Drift`) and puts it back from its record alone (`undo`, so also
//! after a `kill -9`). The partition's knobs (`partition::knob`), a grant's
//! steps (`daemon::grant`) and the `[resources]` knobs (`resources::knobs`)
//! are its three families; each family says what its steps work with.

use crate::drift::Drift;

/// What one family's steps work with in each phase.
pub trait Family {
    /// Where `snapshot` records the old state (a grant's record being
    /// drafted; a knob that journals each item just before changing it, as
    /// the partition's do, records nothing here).
    type Snapshot<'a>;
    /// The machine and the record `apply` puts into effect.
    type Apply<'a>;
    /// What `verify` reads (read-only).
    type Verify<'a>;
    /// The record `undo` gives back from.
    type Undo<'a>;
    type Error;
}

/// One thing rtmgr changes, in one family.
pub trait Step<F: Family>: Sync {
    /// Its name in configs, journals, drift and logs.
    fn name(&self) -> &'static str;
    /// Record the old value of what `apply` will change, before anything
    /// changes (by default nothing left to read).
    fn snapshot(&self, _cx: &mut F::Snapshot<'_>) -> Result<(), F::Error> {
        Ok(())
    }
    /// Put it into effect (what it changes is recorded first).
    fn apply(&self, cx: &mut F::Apply<'_>) -> Result<(), F::Error>;
    /// What the machine no longer holds of it (changed behind rtmgr's back);
    /// empty: all holds.
    fn verify(&self, cx: &F::Verify<'_>) -> Vec<Drift>;
    /// Give it back from the record; what could not be (a task that is gone
    /// is no problem).
    fn undo(&self, cx: &mut F::Undo<'_>) -> Vec<String>;
}
