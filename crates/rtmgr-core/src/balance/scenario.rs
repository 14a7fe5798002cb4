//! lbµ scenario files (ARTiS §3.3, Fig. 4): blocks of fake-task properties
//! (`cpu_mask`, `sched`, `priority`, `loop`, `sloop`, `sleep`) plus rtmgr's
//! documented extensions (`name`, `instances`, kernel-heavy phases, global
//! machine settings). Parsing is all-or-nothing: a malformed file is an error
//! naming its line, and nothing is started.

use crate::class::{TaskClass, RT0_PRIORITY, RT1_MAX_PRIORITY};
use crate::cpuset::CpuSet;
use serde::{Deserialize, Serialize};

/// Default CPU time of one `loop` iteration, in ns.
pub const DEFAULT_ITER_NS: u64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sched {
    Other,
    Fifo,
    Rr,
}

/// One task block (repeated `instances` times when run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub name: String,
    /// Line of the opening `{`.
    pub line: usize,
    /// CPUs the task may use; None = every CPU.
    pub cpu_mask: Option<CpuSet>,
    pub sched: Sched,
    /// SCHED_FIFO/RR priority 1..99 (0 for `sched = OTHER`).
    pub priority: u8,
    /// Total busy-loop iterations (the task's work).
    pub loops: u64,
    /// Iterations between two sleeps; 0 = never sleeps.
    pub sloop: u64,
    /// Length of each sleep, µs.
    pub sleep_us: u64,
    /// Copies of this task.
    pub instances: u32,
    /// Iterations between two kernel-heavy phases; 0 = none.
    pub kernel_every: u64,
    /// Length of each kernel-heavy (system-call, non-preemptible) phase, µs.
    pub kernel_us: u64,
    /// Sleep to absolute releases every sloop + sleep, like evaluate's
    /// latency probe (simulator: latency counts from the release, and a
    /// release passed while late is run at once); false: sleep `sleep` µs.
    #[serde(default)]
    pub periodic: bool,
}

impl TaskSpec {
    /// ARTiS class: FIFO/RR at 99 bound to one CPU is RT0; other FIFO/RR is
    /// RT1+; `OTHER` is a Linux task.
    pub fn class(&self) -> TaskClass {
        match self.sched {
            Sched::Other => TaskClass::Linux,
            Sched::Fifo | Sched::Rr
                if self.priority == RT0_PRIORITY
                    && self.cpu_mask.as_ref().is_some_and(|m| m.len() == 1) =>
            {
                TaskClass::Rt0
            }
            Sched::Fifo | Sched::Rr => TaskClass::Rt1 {
                priority: self.priority.min(RT1_MAX_PRIORITY),
            },
        }
    }
}

/// A whole scenario.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scenario {
    /// Machine size for the simulator (default: the mask bits used, at least 2).
    pub cpus: Option<u32>,
    /// RT CPUs of the partition (default: the CPUs of the RT0 tasks).
    pub rt_cpus: Option<CpuSet>,
    /// CPU time of one iteration, ns.
    pub iter_ns: u64,
    pub tasks: Vec<TaskSpec>,
}

impl Scenario {
    /// The task instances in order, with their names (`name`, `name#2`, …).
    pub fn instances(&self) -> Vec<(String, &TaskSpec)> {
        let mut out = Vec::new();
        for t in &self.tasks {
            for i in 0..t.instances {
                let name = if t.instances == 1 {
                    t.name.clone()
                } else {
                    format!("{}#{}", t.name, i + 1)
                };
                out.push((name, t));
            }
        }
        out
    }

    /// RT CPUs: given, or those of the RT0 tasks.
    pub fn rt_set(&self) -> CpuSet {
        self.rt_cpus.clone().unwrap_or_else(|| {
            self.tasks
                .iter()
                .filter(|t| t.class() == TaskClass::Rt0)
                .filter_map(|t| t.cpu_mask.as_ref())
                .fold(CpuSet::new(), |a, m| a.union(m))
        })
    }

    /// Highest CPU a task mask or `rt_cpus` mentions, plus one.
    pub fn cpus_needed(&self) -> u32 {
        let masks = self.tasks.iter().filter_map(|t| t.cpu_mask.as_ref());
        let top = masks
            .chain(self.rt_cpus.as_ref())
            .filter_map(|m| m.iter().last())
            .max()
            .map_or(0, |c| c + 1);
        top.max(2)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {msg}")]
pub struct ScenarioError {
    pub line: usize,
    pub msg: String,
}

fn err<T>(line: usize, msg: impl Into<String>) -> Result<T, ScenarioError> {
    Err(ScenarioError {
        line,
        msg: msg.into(),
    })
}

fn number(line: usize, key: &str, v: &str) -> Result<u64, ScenarioError> {
    let v = v.replace('_', "");
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse::<u64>(),
    };
    parsed.or_else(|_| err(line, format!("{key}: {v:?} is not a non-negative integer")))
}

/// The mask of Fig. 4 (`0xffff`, bit i = CPU i); a plain CPU list is accepted too.
fn mask(line: usize, v: &str) -> Result<CpuSet, ScenarioError> {
    let set = if v.starts_with("0x") || v.starts_with("0X") {
        let bits = number(line, "cpu_mask", v)?;
        (0..64).filter(|b| bits >> b & 1 == 1).collect()
    } else {
        CpuSet::parse_list(v).or_else(|e| err(line, format!("cpu_mask: {e}")))?
    };
    if set.is_empty() {
        return err(line, "cpu_mask: no CPU selected");
    }
    Ok(set)
}

#[derive(Default)]
struct Block {
    line: usize,
    seen: Vec<&'static str>,
    name: Option<String>,
    cpu_mask: Option<CpuSet>,
    sched: Option<Sched>,
    priority: Option<(usize, u64)>,
    loops: Option<u64>,
    sloop: Option<(usize, u64)>,
    sleep_us: Option<u64>,
    instances: Option<u64>,
    kernel_every: Option<(usize, u64)>,
    kernel_us: Option<u64>,
    periodic: Option<(usize, u64)>,
}

const TASK_KEYS: &[&str] = &[
    "name",
    "cpu_mask",
    "sched",
    "priority",
    "loop",
    "sloop",
    "sleep",
    "instances",
    "kernel_every",
    "kernel_us",
    "periodic",
];
const GLOBAL_KEYS: &[&str] = &["cpus", "rt_cpus", "iter_ns"];

impl Block {
    fn set(&mut self, line: usize, key: &str, v: &str) -> Result<(), ScenarioError> {
        let Some(&k) = TASK_KEYS.iter().find(|k| **k == key) else {
            return err(
                line,
                format!("unknown task key {key:?} (known: {})", TASK_KEYS.join(", ")),
            );
        };
        if self.seen.contains(&k) {
            return err(line, format!("{key} given twice in this block"));
        }
        self.seen.push(k);
        match k {
            "name" => self.name = Some(v.to_string()),
            "cpu_mask" => self.cpu_mask = Some(mask(line, v)?),
            "sched" => {
                self.sched = Some(match v.to_ascii_uppercase().as_str() {
                    "OTHER" | "NORMAL" => Sched::Other,
                    "FIFO" => Sched::Fifo,
                    "RR" => Sched::Rr,
                    _ => return err(line, format!("sched: {v:?} is not FIFO, RR or OTHER")),
                })
            }
            "priority" => self.priority = Some((line, number(line, key, v)?)),
            "loop" => self.loops = Some(number(line, key, v)?),
            "sloop" => self.sloop = Some((line, number(line, key, v)?)),
            "sleep" => self.sleep_us = Some(number(line, key, v)?),
            "instances" => self.instances = Some(number(line, key, v)?),
            "kernel_every" => self.kernel_every = Some((line, number(line, key, v)?)),
            "kernel_us" => self.kernel_us = Some(number(line, key, v)?),
            "periodic" => self.periodic = Some((line, number(line, key, v)?)),
            _ => unreachable!("key list"),
        }
        Ok(())
    }

    fn finish(self, index: usize, end_line: usize) -> Result<TaskSpec, ScenarioError> {
        let sched = self.sched.unwrap_or(Sched::Other);
        let priority = match (sched, self.priority) {
            (Sched::Other, Some((l, p))) if p != 0 => {
                return err(l, "priority needs sched = FIFO or RR")
            }
            (Sched::Other, _) => 0,
            (_, Some((l, p))) if !(1..=99).contains(&p) => {
                return err(l, format!("priority {p} out of range 1..99"))
            }
            (_, Some((_, p))) => p as u8,
            (_, None) => return err(self.line, "sched = FIFO/RR needs a priority"),
        };
        let Some(loops) = self.loops else {
            return err(self.line, "block has no `loop` (the task's work)");
        };
        if loops == 0 {
            return err(self.line, "loop must be > 0");
        }
        let sloop = self.sloop.map_or(0, |s| s.1);
        let sleep_us = self.sleep_us.unwrap_or(0);
        if sloop > 0 && sleep_us == 0 {
            return err(self.sloop.unwrap().0, "sloop without sleep");
        }
        if sloop == 0 && sleep_us > 0 {
            return err(end_line, "sleep without sloop (iterations between sleeps)");
        }
        let instances = self.instances.unwrap_or(1);
        if !(1..=100_000).contains(&instances) {
            return err(self.line, "instances must be 1..100000");
        }
        let kernel_every = self.kernel_every.map_or(0, |k| k.1);
        let kernel_us = self.kernel_us.unwrap_or(0);
        if (kernel_every == 0) != (kernel_us == 0) {
            let l = self.kernel_every.map_or(self.line, |k| k.0);
            return err(l, "kernel_every and kernel_us go together (both > 0)");
        }
        let periodic = match self.periodic {
            Some((l, p)) if p > 1 => return err(l, "periodic must be 0 or 1"),
            Some((l, 1)) if sloop == 0 => return err(l, "periodic needs sloop and sleep"),
            p => p.is_some_and(|p| p.1 == 1),
        };
        Ok(TaskSpec {
            name: self.name.unwrap_or_else(|| format!("task{index}")),
            line: self.line,
            cpu_mask: self.cpu_mask,
            sched,
            priority,
            loops,
            sloop,
            sleep_us,
            instances: instances as u32,
            kernel_every,
            kernel_us,
            periodic,
        })
    }
}

/// Parse a scenario. `#` starts a comment; `key = value` inside `{ }` sets a
/// task property, outside it a global setting.
pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
    let mut sc = Scenario {
        cpus: None,
        rt_cpus: None,
        iter_ns: DEFAULT_ITER_NS,
        tasks: Vec::new(),
    };
    let mut globals_seen: Vec<String> = Vec::new();
    let mut block: Option<Block> = None;
    let mut last = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        last = line;
        let text = raw.split('#').next().unwrap_or("").trim();
        if text.is_empty() {
            continue;
        }
        match text {
            "{" => {
                if block.is_some() {
                    return err(line, "`{` inside a block (missing `}`?)");
                }
                block = Some(Block {
                    line,
                    ..Default::default()
                });
                continue;
            }
            "}" => {
                let b = block
                    .take()
                    .ok_or(())
                    .or_else(|_| err(line, "`}` without `{`"))?;
                let idx = sc.tasks.len();
                sc.tasks.push(b.finish(idx, line)?);
                continue;
            }
            _ => {}
        }
        let Some((key, value)) = text.split_once('=') else {
            return err(
                line,
                format!("expected `key = value`, `{{` or `}}`, got {text:?}"),
            );
        };
        let (key, value) = (key.trim(), value.trim());
        if value.is_empty() {
            return err(line, format!("{key}: missing value"));
        }
        match block.as_mut() {
            Some(b) => b.set(line, key, value)?,
            None => {
                if !GLOBAL_KEYS.contains(&key) {
                    return err(
                        line,
                        format!(
                            "unknown setting {key:?} outside a task block (known: {})",
                            GLOBAL_KEYS.join(", ")
                        ),
                    );
                }
                if globals_seen.iter().any(|g| g == key) {
                    return err(line, format!("{key} given twice"));
                }
                globals_seen.push(key.to_string());
                match key {
                    "cpus" => {
                        let n = number(line, key, value)?;
                        if !(1..=4096).contains(&n) {
                            return err(line, "cpus must be 1..4096");
                        }
                        sc.cpus = Some(n as u32);
                    }
                    "rt_cpus" => {
                        sc.rt_cpus = Some(
                            CpuSet::parse_list(value)
                                .or_else(|e| err(line, format!("rt_cpus: {e}")))?,
                        )
                    }
                    _ => {
                        let n = number(line, key, value)?;
                        if n == 0 {
                            return err(line, "iter_ns must be > 0");
                        }
                        sc.iter_ns = n;
                    }
                }
            }
        }
    }
    if let Some(b) = block {
        return err(
            b.line,
            format!("block opened here is not closed before line {last} (end of file)"),
        );
    }
    if sc.tasks.is_empty() {
        return err(last.max(1), "no task block");
    }
    if let Some(n) = sc.cpus {
        for t in &sc.tasks {
            if let Some(c) = t.cpu_mask.as_ref().and_then(|m| m.iter().last()) {
                if c >= n {
                    return err(t.line, format!("cpu_mask uses CPU {c} but cpus = {n}"));
                }
            }
        }
    }
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIG4: &str = "# a normal task\n{\n    cpu_mask      = 0xffff\n    loop          = 10000000\n}\n# a RT task\n{\n    cpu_mask      = 0x2\n    sched         = FIFO\n    priority      = 99\n    loop          = 110000000\n    sloop         = 4000\n    sleep         = 1000000\n}\n";

    #[test]
    fn parses_figure_4() {
        let s = parse(FIG4).unwrap();
        assert_eq!(s.tasks.len(), 2);
        let (n, r) = (&s.tasks[0], &s.tasks[1]);
        assert_eq!(n.cpu_mask.as_ref().unwrap().len(), 16);
        assert_eq!(n.class(), TaskClass::Linux);
        assert_eq!(n.loops, 10_000_000);
        assert_eq!(r.class(), TaskClass::Rt0);
        assert_eq!(r.cpu_mask, Some(CpuSet::single(1)));
        assert_eq!((r.sloop, r.sleep_us), (4000, 1_000_000));
        assert_eq!(s.rt_set(), CpuSet::single(1));
        assert_eq!(s.iter_ns, DEFAULT_ITER_NS);
        assert_eq!(s.cpus_needed(), 16);
    }

    #[test]
    fn extensions_and_instances() {
        let s = parse(
            "cpus = 4\nrt_cpus = 1-3\niter_ns = 10\n{\n name = hog\n instances = 3\n loop = 5\n kernel_every = 100\n kernel_us = 50\n}\n{\n sched = fifo\n priority = 40\n loop = 1\n}\n",
        )
        .unwrap();
        assert_eq!(s.cpus, Some(4));
        assert_eq!(s.iter_ns, 10);
        let names: Vec<String> = s.instances().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["hog#1", "hog#2", "hog#3", "task1"]);
        assert_eq!(s.tasks[0].kernel_every, 100);
        assert_eq!(s.tasks[1].class(), TaskClass::Rt1 { priority: 40 });
        assert!(!s.tasks[0].periodic);
        let p = parse("{\n loop = 9\n sloop = 5\n sleep = 245\n periodic = 1\n}\n").unwrap();
        assert!(p.tasks[0].periodic);
    }

    #[test]
    fn malformed_inputs_name_their_line() {
        let cases: &[(&str, usize, &str)] = &[
            ("{\n loop = 1\n", 1, "not closed"),
            ("}\n", 1, "without"),
            ("{\n{\n", 2, "inside a block"),
            ("{\n loop = x\n}\n", 2, "not a non-negative integer"),
            ("{\n loop = 1\n loop = 2\n}\n", 3, "twice"),
            ("{\n lop = 1\n}\n", 2, "unknown task key"),
            ("{\n cpu_mask = 0x0\n loop = 1\n}\n", 2, "no CPU"),
            ("{\n sched = EDF\n loop = 1\n}\n", 2, "sched"),
            ("{\n sched = FIFO\n loop = 1\n}\n", 1, "needs a priority"),
            (
                "{\n sched = FIFO\n priority = 100\n loop = 1\n}\n",
                3,
                "out of range",
            ),
            ("{\n priority = 5\n loop = 1\n}\n", 2, "needs sched"),
            ("{\n cpu_mask = 0x1\n}\n", 1, "no `loop`"),
            ("{\n loop = 1\n sloop = 5\n}\n", 3, "sloop without sleep"),
            ("{\n loop = 1\n kernel_us = 5\n}\n", 1, "go together"),
            (
                "{\n loop = 1\n just words\n}\n",
                3,
                "expected `key = value`",
            ),
            ("seed = 3\n{\n loop = 1\n}\n", 1, "unknown setting"),
            (
                "cpus = 2\n{\n cpu_mask = 0x4\n loop = 1\n}\n",
                2,
                "cpus = 2",
            ),
            ("# nothing\n", 1, "no task block"),
            ("{\n loop =\n}\n", 2, "missing value"),
            ("rt_cpus = 3-1\n{\n loop = 1\n}\n", 1, "reversed"),
            (
                "{\n loop = 1\n periodic = 2\n}\n",
                3,
                "periodic must be 0 or 1",
            ),
            (
                "{\n loop = 1\n periodic = 1\n}\n",
                3,
                "periodic needs sloop",
            ),
        ];
        for (text, line, needle) in cases {
            let e = parse(text).expect_err(text);
            assert_eq!(e.line, *line, "{text:?}: {e}");
            assert!(e.to_string().contains(needle), "{text:?}: {e}");
            assert!(e.to_string().starts_with(&format!("line {line}:")));
        }
    }
}
