//! `rtmgr advise`: McKenney §5 Fig. 9's decision flow — real time or real
//! fast? — each branch answered by a fact measured on this machine where one
//! exists and by the user's description of the work where only the user
//! knows (`facts`); the total-delay arithmetic of Figs. 5–7 (`delay`). Pure:
//! the answer, every reason with its number, its source and the command that
//! would check it (schema `rtmgr.advice/1`, docs/report-schema.md). `plot`
//! draws Figs. 5–7 from the curves; `run` gathers the facts on the machine.

pub mod curves;
pub mod delay;
pub mod facts;
mod flow;
mod plot;
pub mod run;
#[cfg(test)]
mod tests;
mod text;

pub use facts::{
    cost_from_report, evaluate_run, from_host_test, parse_meminfo, parse_workload,
    steal_from_evaluate, steal_share, tail_from_evaluate, ConfigCost, CostFact, Facts,
    HostTestFact, StealFact, TailFact, Workload,
};
pub use flow::advise;
pub use plot::delay_svg;
pub use text::advice_text;

use serde::{Deserialize, Serialize};

pub const ADVICE_SCHEMA: &str = "rtmgr.advice/1";

/// Where the flow ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// Stock Linux, tuned for throughput.
    RealFast,
    /// A real-time set-up (see `Setup`).
    RealTime,
    /// Fig. 9's real-time bubble without the measurements to decide: benchmark.
    Benchmark,
}

/// Which real-time set-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Setup {
    /// A partition; ordinary work on the NRT CPUs only.
    Shield,
    /// A partition and the live balancer lending the RT CPUs' idle time.
    Balanced,
    /// A daemon reservation (`rtmgr serve` + `rtmgr reserve`): W every P.
    Reservation { period_ns: u64, budget_ns: u64 },
}

/// Where a reason's number comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "what", rename_all = "snake_case")]
pub enum Source {
    /// The user's flag or workload file.
    User(String),
    /// Measured now on this machine (a /proc file).
    Measured(String),
    /// An earlier report (`--from FILE`).
    Report(String),
    /// A rule of thumb (McKenney's, or rtmgr's default).
    Rule(String),
    /// Nobody said: the step assumed the harmless answer.
    Unknown,
}

/// One step of the flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reason {
    /// McKenney §5's principle (1–6); 0 for the deadline check.
    pub principle: u8,
    pub question: String,
    /// What was found, with its number.
    pub finding: String,
    pub source: Source,
    /// Where this step points; None when it leaves the decision to later steps.
    pub leads_to: Option<Answer>,
    /// The command that would check (or supply) the number.
    pub check: String,
}

/// The advice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    pub schema: String,
    pub answer: Answer,
    pub setup: Option<Setup>,
    /// The step that decided (index into `reasons`).
    pub decided_by: Option<usize>,
    pub reasons: Vec<Reason>,
    /// What the user could add to sharpen the answer.
    pub missing: Vec<String>,
    pub workload: Workload,
    pub facts: Facts,
}
