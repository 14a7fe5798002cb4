//! `rtmgr advise`'s human answer: the verdict and set-up, then each step of
//! McKenney Fig. 9's flow with its finding, source and check command.

use super::{Advice, Answer, Setup, Source};
use std::fmt::Write as _;

fn answer_text(a: Answer) -> &'static str {
    match a {
        Answer::RealFast => "REAL FAST: stock Linux, tuned for throughput",
        Answer::RealTime => "REAL TIME",
        Answer::Benchmark => {
            "BENCHMARK: in Fig. 9's real-time bubble, and the numbers to decide are missing"
        }
    }
}

fn setup_text(s: &Setup) -> String {
    match s {
        Setup::Shield => "a shield: `rtmgr partition apply`, the real-time work on the RT CPUs (`rtmgr run --class rt0 --mlock -- YOUR_PROGRAM`)".into(),
        Setup::Balanced => "a partition with the live balancer: `rtmgr partition apply` then `rtmgr balance` (ordinary work keeps the RT CPUs' idle time)".into(),
        Setup::Reservation { period_ns, budget_ns } => format!(
            "a daemon reservation: `rtmgr serve`, then `rtmgr reserve --period {}us --budget {}us -- YOUR_PROGRAM`",
            period_ns / 1000,
            budget_ns / 1000
        ),
    }
}

fn source_text(s: &Source) -> String {
    match s {
        Source::User(f) => format!("you ({f})"),
        Source::Measured(w) => format!("measured: {w}"),
        Source::Report(f) => format!("report {f}"),
        Source::Rule(r) => format!("rule: {r}"),
        Source::Unknown => "unknown".into(),
    }
}

pub fn advice_text(a: &Advice) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", answer_text(a.answer));
    if let Some(setup) = &a.setup {
        let _ = writeln!(s, "  with {}", setup_text(setup));
    }
    let _ = writeln!(s);
    for (i, r) in a.reasons.iter().enumerate() {
        let mark = match (Some(i) == a.decided_by, r.leads_to) {
            (true, _) => "=>",
            (false, Some(_)) => " *",
            (false, None) => "  ",
        };
        let p = if r.principle == 0 {
            "deadline".to_string()
        } else {
            format!("principle {}", r.principle)
        };
        let _ = writeln!(s, "{mark} [{p}] {}", r.question);
        let _ = writeln!(s, "     {}", r.finding);
        let _ = writeln!(
            s,
            "     source: {}; check: {}",
            source_text(&r.source),
            r.check
        );
    }
    if !a.missing.is_empty() {
        let _ = writeln!(s, "\nto sharpen the answer, say: {}", a.missing.join("; "));
    }
    s
}
