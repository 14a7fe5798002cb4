//! The probe service (McKenney §2.1: a pinned SCHED_FIFO thread that sleeps
//! to each release and measures how late it woke): the balancer's latency
//! guard (ARTiS §2.2), `rtmgr top --probe` and the lab's probe start their
//! threads here (`threads`), run the same paced loop (`pace`) and keep
//! samples in preallocated lock-free rings (`ring`). Nothing on the probe
//! thread allocates or locks; percentiles are computed by whoever reads.

pub mod live;
mod pace;
mod ring;
mod threads;

pub use pace::{run_paced, Pace};
pub use ring::SampleRing;
pub use threads::{spawn_pinned, Started};
