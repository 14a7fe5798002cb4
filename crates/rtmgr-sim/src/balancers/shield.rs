//! A static shield (cset shield, tuned's cpu-partitioning): ordinary tasks
//! and interrupts only on the NRT CPUs, the symmetric balancer inside them.
//! The baseline ARTiS §3.3 compares against (RT CPUs' spare time unused).

use super::{confine_to_nrt, steer_irqs_to_nrt, Balancer};
use crate::engine::machine::Machine;

pub(crate) struct Shield;

impl Balancer for Shield {
    fn attach(&mut self, m: &mut Machine) {
        confine_to_nrt(m);
        steer_irqs_to_nrt(m);
    }
}
