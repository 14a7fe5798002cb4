//! Linux 2.6's symmetric balancer (ARTiS §2.3, "the original behaviour"):
//! no partition, every task anywhere its mask allows, interrupts on every
//! CPU, loads counted in runnable tasks.

use super::Balancer;
use crate::engine::machine::Machine;

pub(crate) struct Linux;

impl Balancer for Linux {
    fn attach(&mut self, m: &mut Machine) {
        let _ = m;
    }
}
