//! The facts behind `rtmgr advise` (McKenney §5 Fig. 9): measured now on
//! this machine — the hypervisor flag, MemAvailable and swap, and the steal
//! time under load: from an evaluate report's `stock`, else the cached host
//! test, else a short window with every CPU kept busy — and read from earlier
//! reports (`--from`: an evaluate report gives the tail per configuration, a
//! cost report the slowdowns). The flow itself is pure: `crate::advice::advise`.

use crate::advice::{
    cost_from_report, evaluate_run, from_host_test, parse_meminfo, steal_from_evaluate,
    steal_share, tail_from_evaluate, Facts, Source, StealFact,
};
use crate::cost::{CostReport, COST_SCHEMA};
use crate::experiment::{bad_input, Error, Result};
use crate::host_test::spinner::{SpinnerSpec, Spinners};
use crate::report::{Report, SCHEMA, SCHEMAS_READ};
use rtmgr_core::admission::DEFAULT_CAP;
use rtmgr_linux::Host;
use std::path::PathBuf;
use std::time::Duration;

/// What to gather.
#[derive(Debug, Clone)]
pub struct FactsConfig {
    /// How long to watch steal time.
    pub steal_window: Duration,
    /// Earlier reports: evaluate (`rtmgr.report/2`, kind evaluate) or cost (`rtmgr.cost/1`).
    pub from: Vec<PathBuf>,
    /// The latency percentile taken from an evaluate report, ppm.
    pub percentile_ppm: u32,
}

/// Read an earlier report into the facts; anything else is bad input.
fn read_report(facts: &mut Facts, path: &PathBuf, ppm: u32) -> Result<()> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(format!("read {shown}"), e))?;
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => return bad_input(format!("--from {shown}: not JSON ({e})")),
    };
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(s) if s == COST_SCHEMA => {
            let r: CostReport = serde_json::from_value(value)
                .or_else(|e| bad_input(format!("--from {shown}: {e}")))?;
            facts.cost = Some(cost_from_report(&r, &shown));
        }
        Some(s) if SCHEMAS_READ.contains(&s) => {
            let r: Report = serde_json::from_value(value)
                .or_else(|e| bad_input(format!("--from {shown}: {e}")))?;
            let Some(run) = evaluate_run(&r) else {
                return bad_input(format!(
                    "--from {shown}: a measurement report but not `rtmgr evaluate`'s"
                ));
            };
            facts.tail = Some(tail_from_evaluate(run, ppm, &shown));
            facts.steal = steal_from_evaluate(run, &shown).or(facts.steal.take());
            // The host test the run was made under (a cached one of this boot overrides it).
            if let Some(h) = &run.host_preemption {
                facts.host_test = Some(from_host_test(h).1);
            }
        }
        other => {
            return bad_input(format!(
                "--from {shown}: schema {other:?}; expected {COST_SCHEMA} (measure cost) or {SCHEMA} (evaluate)"
            ))
        }
    }
    Ok(())
}

/// Measure and read everything `advise` can know about this machine.
pub fn gather(host: &Host, cfg: &FactsConfig) -> Result<Facts> {
    let online = rtmgr_linux::cpus::online(host)?;
    let mut facts = Facts {
        online_cpus: online.len() as u32,
        rt_cap: DEFAULT_CAP,
        steal_window_ms: cfg.steal_window.as_millis() as u64,
        ..Facts::default()
    };
    for p in &cfg.from {
        read_report(&mut facts, p, cfg.percentile_ppm)?;
    }
    let cpuinfo = host.read_opt("/proc/cpuinfo").unwrap_or_default();
    facts.hypervisor = match host.read_opt("/sys/hypervisor/type") {
        Some(t) if !t.trim().is_empty() => Some(t.trim().to_string()),
        _ => cpuinfo
            .contains(" hypervisor")
            .then(|| "cpuinfo hypervisor flag".to_string()),
    };
    let (avail, swap_total, swap_free) =
        parse_meminfo(&host.read_opt("/proc/meminfo").unwrap_or_default());
    facts.mem_available_bytes = avail;
    facts.swap_total_bytes = swap_total;
    facts.swap_free_bytes = swap_free;
    if let Ok(r) = rtmgr_linux::host_preemption::recent_host_preemption_on(
        host,
        rtmgr_linux::host_preemption::SHOWN_MAX_AGE,
    ) {
        let (steal, fact) = from_host_test(&r);
        facts.host_test = Some(fact);
        facts.steal = facts.steal.take().or(steal);
    }
    if facts.steal.is_none() {
        facts.steal = steal_under_load(host, cfg.steal_window);
    }
    facts.steal_share = match &facts.steal {
        Some(s) => Some(s.share),
        None => sample_steal(host, cfg.steal_window),
    };
    Ok(facts)
}

/// The worst CPU's steal share over `window` (as loaded as the machine is).
fn sample_steal(host: &Host, window: Duration) -> Option<f64> {
    let before = host.read_opt("/proc/stat").unwrap_or_default();
    std::thread::sleep(window);
    let after = host.read_opt("/proc/stat").unwrap_or_default();
    steal_share(&before, &after, window.as_millis() as u64)
}

/// Steal over `window` with every CPU this process may use kept busy by a
/// SCHED_IDLE user-mode spinner (it takes only idle time: running work is not
/// delayed, but every vCPU is busy, which is when a host preempts). None on a
/// fake machine or when no spinner could start.
fn steal_under_load(host: &Host, window: Duration) -> Option<StealFact> {
    if host.root() != std::path::Path::new("/") || window.is_zero() {
        return None;
    }
    let cpus = rtmgr_linux::sched::get_affinity(0).ok()?;
    let specs: Vec<SpinnerSpec> = cpus
        .iter()
        .map(|cpu| SpinnerSpec {
            cpu,
            policy: rtmgr_linux::sched::Policy::Idle,
            prepare: None,
        })
        .collect();
    let _busy = Spinners::start(&specs).ok()?;
    let share = sample_steal(host, window)?;
    Some(StealFact {
        share,
        how: format!(
            "/proc/stat steal over {} ms with CPUs {cpus} kept busy by SCHED_IDLE spinners",
            window.as_millis()
        ),
        source: Source::Measured(format!(
            "/proc/stat steal, CPUs busy for {} ms",
            window.as_millis()
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Body, Header, HostInfo};

    fn evaluate_report(schema: &str) -> String {
        let run = crate::advice::tests::evaluate(vec![
            crate::advice::tests::config("stock", 2000, 50_000),
            crate::advice::tests::config("shield", 2000, 10_000),
        ]);
        let rep = Report {
            header: Header {
                schema: schema.into(),
                rtmgr_version: "0".into(),
                command: vec![],
                started_unix_s: 0,
                host: HostInfo {
                    hostname: "h".into(),
                    kernel: "6.18".into(),
                    cpus_online: "0-1".parse().unwrap(),
                    hypervisor: None,
                },
                partial: false,
                partial_reason: None,
            },
            body: Body::Evaluate(run),
        };
        serde_json::to_string(&rep).unwrap()
    }

    /// Issue 28 bumped the report to /3: an evaluate report of /2 is still
    /// read; an unknown version is bad input and leaves the facts as they were.
    #[test]
    fn evaluate_reports_of_both_schemas_are_read_and_others_refused() {
        let dir = tempfile::tempdir().unwrap();
        for schema in SCHEMAS_READ {
            let path = dir.path().join("r.json");
            std::fs::write(&path, evaluate_report(schema)).unwrap();
            let mut facts = Facts::default();
            read_report(&mut facts, &path, 990_000).unwrap();
            assert!(facts.tail.is_some(), "{schema}");
        }
        let path = dir.path().join("future.json");
        std::fs::write(&path, evaluate_report("rtmgr.report/9")).unwrap();
        let mut facts = Facts::default();
        let err = read_report(&mut facts, &path, 990_000).unwrap_err();
        assert!(err.to_string().contains("rtmgr.report/9"), "{err}");
        assert_eq!(facts, Facts::default());
    }
}
