//! rtmgr-lab: the lab — rtmgr's proof that the manager's promises hold.
//!
//! **What it is.** Everything rtmgr measures and reports, beside the manager
//! (rtmgr-core's policy, rtmgr-linux's OS side) it measures: the latency probe,
//! loads and disturbance snapshots ([`measure`]; McKenney §2–3, ARTiS §3.1–3.2),
//! the experiment engines behind `rtmgr measure`, `evaluate`, `ablate`,
//! `measure cost` and `advise` ([`experiment`]), the tail tracer and its
//! per-sample attribution ([`trace`]), lbµ on the machine ([`lbu`], ARTiS
//! §3.3), and their pure parts: the load model ([`load`]), the cost model
//! ([`cost`], DROPS §5, McKenney Table 1), the advice ([`advice`], McKenney
//! Fig. 9), the ablation statistics ([`ablation`]), and the versioned reports
//! with their tables and SVG plots ([`report`], [`plot`]), and the
//! disturbance counters read from /proc ([`procstat`]).
//!
//! **Central types.** `report::{Report, Body}`; `measure::probe::Probe`;
//! `experiment::{Session, Reporter}`; `trace::{Attribution, TailTracer}`.
//!
//! **Key decision.** The lab depends on the manager, never the other way
//! round: the daemon, the partition and the balancer build and run without
//! it. Pure parts (models, statistics, reports, plots, advice) make no system
//! call, so they are tested without a machine; live parts go through
//! rtmgr-linux's `Host` like the manager does.

pub mod ablation;
pub mod advice;
pub mod budget;
pub mod cost;
pub mod experiment;
pub mod host_test;
pub mod lbu;
pub mod load;
pub mod measure;
pub mod parallel;
pub mod plot;
pub mod procstat;
pub mod report;
pub mod resources;
pub mod trace;
