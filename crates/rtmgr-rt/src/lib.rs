//! rtmgr-rt: the library real-time applications link (DESIGN.md): periodic
//! tasks with computation budgets (budget-based RTAI) and the RT-FIFO (ARTiS §2.2).
pub mod fifo;
pub mod periodic;
