//! rtmgr-rt: the library real-time applications link, in Rust or through
//! its C ABI (`include/rtmgr.h`, pkg-config `rtmgr`).
//!
//! **What it is.** Periodic tasks with computation budgets ([`periodic`]:
//! budget-based RTAI §3 — `init`, `make_periodic_budget`, `wait_period`, hard
//! enforcement by SCHED_DEADLINE and soft enforcement by a CPU-time timer and
//! a signal, group budgets §5), and the RT-FIFO ([`fifo`]: ARTiS §2.2 — a
//! wait-free single-producer/single-consumer ring, in-process or in shared
//! memory between processes, with futex wake-ups).
//!
//! **Central types.** `periodic::{Task, TaskConfig, BudgetMode, Group,
//! TaskStats}`; `fifo::{Ring, shm::{Producer, Consumer}}`.
//!
//! **Key decision.** The accounting is rtmgr-core's pure state machine
//! (`rtmgr_core::budget`), so the catch-up rules are tested under a fake
//! clock; this crate only reads clocks, arms timers and handles signals.
//! Syscalls go through rtmgr-sys; `unsafe` stays in the signal/timer code,
//! the lock-free structures and the C ABI.
pub mod client;
pub mod fifo;
pub mod periodic;
