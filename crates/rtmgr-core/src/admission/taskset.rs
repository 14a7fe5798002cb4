//! Task sets for offline admission (`rtmgr admit FILE`; ARTiS §4: periodicity
//! and capacity per task): rtmgr's TOML (`[[task]]` with period, budget or a
//! measured WCET from `rtmgr measure exec --json`, deadline, class, cpu,
//! threads) or an rt-app JSON file (SCHED_DEADLINE and SCHED_FIFO/RR tasks).
//! Pure: files named inside the set are read by the caller's `wcet` function.

use super::{Demand, Kind, SetTask};
use crate::class::TaskClass;
use crate::cpuset::CpuSet;
use crate::duration::{parse_ns, BareNumber};
use serde::Deserialize;
use serde_json::Value;

/// A parsed task set.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSetFile {
    /// `rt_cpus` of a TOML set, if it names them.
    pub rt_cpus: Option<CpuSet>,
    pub tasks: Vec<SetTask>,
    /// What was skipped and why (rt-app tasks that are not real-time).
    pub notes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlSet {
    rt_cpus: Option<CpuSet>,
    #[serde(default)]
    task: Vec<TomlTask>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlTask {
    name: String,
    period: String,
    budget: Option<String>,
    /// A `rtmgr measure exec --json` report: its worst run is the budget.
    wcet_report: Option<String>,
    deadline: Option<String>,
    #[serde(default = "default_class")]
    class: String,
    cpu: Option<u32>,
    #[serde(default = "one")]
    threads: u32,
}

fn default_class() -> String {
    "rt0".into()
}
fn one() -> u32 {
    1
}

/// Parse a task set; `wcet(path)` returns the measured WCET (ns) a task names.
pub fn parse(
    text: &str,
    wcet: &dyn Fn(&str) -> Result<u64, String>,
) -> Result<TaskSetFile, String> {
    if text.trim_start().starts_with('{') {
        parse_rt_app(text)
    } else {
        parse_toml(text, wcet)
    }
}

/// Hard for RT0, soft at its priority for RT1+.
pub fn kind_of_class(class: TaskClass) -> Result<Kind, String> {
    match class {
        TaskClass::Rt0 => Ok(Kind::Hard),
        TaskClass::Rt1 { priority } => Ok(Kind::Soft { priority }),
        TaskClass::Linux => Err("class linux has no reservation: use rt0 or rt1[:PRIO]".into()),
    }
}

fn parse_toml(
    text: &str,
    wcet: &dyn Fn(&str) -> Result<u64, String>,
) -> Result<TaskSetFile, String> {
    let set: TomlSet = toml::from_str(text).map_err(|e| {
        format!(
            "task set: {}",
            e.to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        )
    })?;
    let parse_duration = |text: &str| parse_ns(text, BareNumber::Refused).map_err(String::from);
    let mut tasks = Vec::new();
    for t in set.task {
        let ctx = |e: String| format!("task {:?}: {e}", t.name);
        let period = parse_duration(&t.period).map_err(ctx)?;
        let budget = match (&t.budget, &t.wcet_report) {
            (Some(b), None) => parse_duration(b).map_err(ctx)?,
            (None, Some(r)) => wcet(r).map_err(ctx)?,
            (Some(_), Some(_)) => return Err(ctx("give budget or wcet_report, not both".into())),
            (None, None) => return Err(ctx("needs budget or wcet_report".into())),
        };
        let deadline = t
            .deadline
            .as_deref()
            .map(parse_duration)
            .transpose()
            .map_err(ctx)?;
        let class: TaskClass = t.class.parse().map_err(|e| ctx(format!("{e}")))?;
        let kind = kind_of_class(class).map_err(ctx)?;
        let demand = Demand::new(period, budget, deadline, kind).map_err(|e| ctx(e.to_string()))?;
        if t.threads == 0 {
            return Err(ctx("threads must be ≥ 1".into()));
        }
        tasks.push(SetTask {
            name: t.name,
            demand,
            count: t.threads,
            cpu: t.cpu,
        });
    }
    Ok(TaskSetFile {
        rt_cpus: set.rt_cpus,
        tasks,
        notes: Vec::new(),
    })
}

fn us(v: &Value, key: &str) -> Option<u64> {
    v.get(key)?.as_u64().map(|x| x * 1000)
}

/// rt-app's JSON (times in µs): SCHED_DEADLINE tasks from dl-runtime,
/// dl-period, dl-deadline; SCHED_FIFO/RR tasks from `run` (or `runtime`)
/// and `timer.period` (or `period`, or run + `sleep`).
fn parse_rt_app(text: &str) -> Result<TaskSetFile, String> {
    let root: Value = serde_json::from_str(text).map_err(|e| format!("rt-app JSON: {e}"))?;
    let tasks = root
        .get("tasks")
        .and_then(Value::as_object)
        .ok_or("rt-app JSON: no \"tasks\" object")?;
    let mut out = TaskSetFile {
        rt_cpus: None,
        tasks: Vec::new(),
        notes: Vec::new(),
    };
    for (name, t) in tasks {
        let ctx = |e: String| format!("rt-app task {name:?}: {e}");
        let policy = t
            .get("policy")
            .and_then(Value::as_str)
            .unwrap_or("SCHED_OTHER");
        let count = t
            .get("instance")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1) as u32;
        let cpu = t
            .get("cpus")
            .and_then(Value::as_array)
            .filter(|a| a.len() == 1)
            .and_then(|a| a[0].as_u64())
            .map(|c| c as u32);
        let demand = match policy {
            "SCHED_DEADLINE" => {
                let w = us(t, "dl-runtime").ok_or_else(|| ctx("no dl-runtime".into()))?;
                let p = us(t, "dl-period").ok_or_else(|| ctx("no dl-period".into()))?;
                Demand::new(p, w, us(t, "dl-deadline"), Kind::Hard)
            }
            "SCHED_FIFO" | "SCHED_RR" => {
                let w = us(t, "run")
                    .or_else(|| us(t, "runtime"))
                    .ok_or_else(|| ctx("no run/runtime".into()))?;
                let p = t
                    .get("timer")
                    .and_then(|x| us(x, "period"))
                    .or_else(|| us(t, "period"))
                    .or_else(|| us(t, "sleep").map(|s| s + w))
                    .ok_or_else(|| ctx("no timer.period, period or sleep".into()))?;
                let prio = t.get("priority").and_then(Value::as_u64).unwrap_or(50);
                let priority = u8::try_from(prio).map_err(|_| ctx(format!("priority {prio}")))?;
                Demand::new(p, w, None, Kind::Soft { priority })
            }
            other => {
                out.notes.push(format!(
                    "rt-app task {name:?}: policy {other} is not real-time; not admitted"
                ));
                continue;
            }
        }
        .map_err(|e| ctx(e.to_string()))?;
        out.tasks.push(SetTask {
            name: name.clone(),
            demand,
            count,
            cpu,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_wcet(_: &str) -> Result<u64, String> {
        Err("no reports here".into())
    }

    #[test]
    fn toml_set_with_classes_and_measured_wcet() {
        let text = r#"
rt_cpus = "1-2"
[[task]]
name = "ctrl"
period = "4ms"
budget = "1ms"
[[task]]
name = "log"
period = "10ms"
wcet_report = "exec.json"
deadline = "8ms"
class = "rt1:30"
cpu = 2
threads = 2
"#;
        let f = parse(text, &|p| {
            if p == "exec.json" {
                Ok(2_000_000)
            } else {
                no_wcet(p)
            }
        })
        .unwrap();
        assert_eq!(f.rt_cpus, Some(CpuSet::parse_list("1-2").unwrap()));
        assert_eq!(f.tasks.len(), 2);
        assert_eq!(f.tasks[0].demand.kind, Kind::Hard);
        assert_eq!(f.tasks[1].demand.budget_ns, 2_000_000);
        assert_eq!(f.tasks[1].demand.deadline_ns, 8_000_000);
        assert_eq!(f.tasks[1].demand.kind, Kind::Soft { priority: 30 });
        assert_eq!((f.tasks[1].count, f.tasks[1].cpu), (2, Some(2)));
        assert!(parse("[[task]]\nname='x'\nperiod='1ms'\n", &no_wcet).is_err());
        assert!(parse("bogus = 1\n", &no_wcet).is_err());
    }

    #[test]
    fn task_set_durations_name_their_unit() {
        let set = |period: &str| format!("[[task]]\nname='x'\nperiod='{period}'\nbudget='100us'\n");
        let f = parse(&set("1.5 ms"), &no_wcet).unwrap();
        assert_eq!(f.tasks[0].demand.period_ns, 1_500_000);
        assert_eq!(
            parse(&set("250µs"), &no_wcet).unwrap().tasks[0]
                .demand
                .period_ns,
            250_000
        );
        let bare = parse(&set("4"), &no_wcet).unwrap_err();
        assert!(bare.contains("has no unit"), "{bare}");
        assert!(bare.contains("expected a number and a unit"), "{bare}");
    }

    #[test]
    fn rt_app_json() {
        let text = r#"{"tasks": {
            "dl": {"policy": "SCHED_DEADLINE", "dl-runtime": 10000, "dl-period": 100000},
            "fifo": {"policy": "SCHED_FIFO", "priority": 10, "run": 20000, "sleep": 130000},
            "cfs": {"policy": "SCHED_OTHER", "run": 1000}
        }, "global": {"duration": 5}}"#;
        let f = parse(text, &no_wcet).unwrap();
        assert_eq!(f.tasks.len(), 2);
        let fifo = f.tasks.iter().find(|t| t.name == "fifo").unwrap();
        assert_eq!(fifo.demand.period_ns, 150_000_000);
        assert_eq!(fifo.demand.kind, Kind::Soft { priority: 10 });
        assert_eq!(f.notes.len(), 1);
    }
}
