//! Knobs verify (ARTiS §2.1: the RT CPUs stay clear while the partition
//! lasts; DROPS §4.1: the manager keeps what it set): every knob a partition
//! applied says what no longer holds, and repair re-applies just that,
//! journalled first, so `reset` still restores the machine as it was before.
//! The daemon's drift repair runs both, a slice of the knobs at each
//! reconcile (`verify_some`).

use super::knob::{RepairCx, VerifyCx};
use super::{Applied, Result, KNOBS};
use crate::drift::{self, Drift, Fix};
use crate::journal::{self, Journal};
use crate::Host;

/// What drifted in every knob `applied` enabled, in apply order. Files the
/// kernel refused or did not keep (`Unheld`) are not expected to hold.
/// `exempt_irqs`: IRQs steered to RT CPUs on purpose since (grants).
pub fn verify(host: &Host, applied: &Applied, exempt_irqs: &[u32]) -> Result<Vec<Drift>> {
    verify_some(host, applied, exempt_irqs, |_| true)
}

/// How many knobs `applied` enabled: the indices `verify_some` picks from.
pub fn enabled_knobs(applied: &Applied) -> usize {
    KNOBS
        .iter()
        .filter(|k| applied.plan.enabled(k.id()))
        .count()
}

/// `verify` of the enabled knobs whose index among them (apply order) `due`
/// picks; the journal is not even read when it picks none (the daemon's
/// drift check verifies a slice of the knobs at each reconcile).
pub fn verify_some(
    host: &Host,
    applied: &Applied,
    exempt_irqs: &[u32],
    due: impl Fn(usize) -> bool,
) -> Result<Vec<Drift>> {
    let knobs: Vec<_> = KNOBS
        .iter()
        .filter(|k| applied.plan.enabled(k.id()))
        .enumerate()
        .filter(|(i, _)| due(*i))
        .map(|(_, k)| k)
        .collect();
    if knobs.is_empty() {
        return Ok(Vec::new());
    }
    let records = journal::read(host, &applied.journal)?.unwrap_or_default();
    let unheld = drift::unheld(&records);
    let cx = VerifyCx {
        host,
        applied,
        records: &records,
        exempt_irqs,
    };
    Ok(knobs
        .into_iter()
        .flat_map(|k| k.verify(&cx))
        .filter(|d| !matches!(&d.fix, Fix::File { path, .. } if unheld.contains(path)))
        .collect())
}

/// Re-apply what drifted, each knob its own items; how many items of each
/// knob hold again, in apply order (knobs without drift left out).
pub fn repair(
    host: &Host,
    applied: &Applied,
    drift: &[Drift],
) -> Result<Vec<(&'static str, usize)>> {
    if drift.is_empty() {
        return Ok(Vec::new());
    }
    let mut j = Journal::append_to(host, &applied.journal)?;
    let mut cx = RepairCx {
        host,
        applied,
        journal: &mut j,
    };
    let mut out = Vec::new();
    for k in KNOBS {
        let mine: Vec<&Drift> = drift.iter().filter(|d| d.knob == k.name()).collect();
        if !mine.is_empty() {
            out.push((k.name(), k.repair(&mut cx, &mine)?));
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
