//! The five ARTiS loads (ARTiS §3.1: computing, input/output, network, kernel
//! locks, cache misses) and `all`, the engines that run them (stress-ng or
//! rtmgr's built-in loads), the stress-ng stressor lists, plus the parser of
//! stress-ng's `--yaml` metrics (bogo-ops/s = the throughput ordinary work achieved).
//! Pure: building argument lists and parsing text only; rtmgr-linux runs stress-ng.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The program that runs the loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LoadEngine {
    /// stress-ng (a Debian package), the engine when it is installed.
    #[serde(rename = "stress-ng")]
    StressNg,
    /// rtmgr's own loads (`rtmgr __load`): nothing to install.
    #[serde(rename = "builtin")]
    Builtin,
}

impl LoadEngine {
    pub fn name(self) -> &'static str {
        match self {
            LoadEngine::StressNg => "stress-ng",
            LoadEngine::Builtin => "builtin",
        }
    }
}

impl fmt::Display for LoadEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LoadEngine {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "stress-ng" => Ok(LoadEngine::StressNg),
            "builtin" => Ok(LoadEngine::Builtin),
            _ => Err(format!(
                "unknown load engine {s:?}: expected builtin or stress-ng"
            )),
        }
    }
}

/// A load to run on the load CPUs while measuring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadKind {
    /// Integer and floating-point computation (stress-ng `cpu`).
    Compute,
    /// File writes, reads and syncs (`hdd`, `io`).
    Io,
    /// TCP over loopback (`sock`).
    Network,
    /// Kernel lock contention: file locks and futexes (`flock`, `futex`).
    Locks,
    /// Cache thrashing (`cache`).
    Cache,
    /// All five at once.
    All,
}

pub const ALL_KINDS: [LoadKind; 5] = [
    LoadKind::Compute,
    LoadKind::Io,
    LoadKind::Network,
    LoadKind::Locks,
    LoadKind::Cache,
];

impl LoadKind {
    pub fn name(self) -> &'static str {
        match self {
            LoadKind::Compute => "compute",
            LoadKind::Io => "io",
            LoadKind::Network => "network",
            LoadKind::Locks => "locks",
            LoadKind::Cache => "cache",
            LoadKind::All => "all",
        }
    }

    /// The stress-ng stressors of this load.
    pub fn stressors(self) -> Vec<&'static str> {
        match self {
            LoadKind::Compute => vec!["cpu"],
            LoadKind::Io => vec!["hdd", "io"],
            LoadKind::Network => vec!["sock"],
            LoadKind::Locks => vec!["flock", "futex"],
            LoadKind::Cache => vec!["cache"],
            LoadKind::All => ALL_KINDS.iter().flat_map(|k| k.stressors()).collect(),
        }
    }

    /// stress-ng arguments selecting the stressors, `instances` workers each, plus
    /// the per-stressor options that keep them bounded (file sizes, loopback).
    pub fn stress_ng_args(self, instances: usize) -> Vec<String> {
        let mut args = Vec::new();
        for s in self.stressors() {
            args.push(format!("--{s}"));
            args.push(instances.to_string());
            match s {
                "hdd" => args.extend(["--hdd-bytes".into(), "16M".into()]),
                "sock" => args.extend(["--sock-domain".into(), "ipv4".into()]),
                _ => {}
            }
        }
        args
    }
}

impl fmt::Display for LoadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LoadKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "compute" | "cpu" => Ok(LoadKind::Compute),
            "io" => Ok(LoadKind::Io),
            "network" | "net" => Ok(LoadKind::Network),
            "locks" | "lock" => Ok(LoadKind::Locks),
            "cache" => Ok(LoadKind::Cache),
            "all" => Ok(LoadKind::All),
            _ => Err(format!(
                "unknown load {s:?}: expected compute, io, network, locks, cache or all"
            )),
        }
    }
}

/// What one operation of a stress-ng stressor is.
pub const STRESS_NG_OP: &str = "bogo-op (stress-ng's unit of work of this stressor)";

/// One load component's throughput: a stress-ng stressor's bogo-ops, or a
/// built-in load's operations. Operations of different components are not
/// commensurable (see `relative_throughput`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentMetrics {
    /// The stressor ("cpu", "sock", …) or built-in component ("int-float", …).
    pub component: String,
    /// Operations done.
    pub ops: u64,
    /// Operations per second of wall-clock time.
    pub ops_per_s: f64,
    /// What one operation is.
    pub op: String,
}

/// Parse the `metrics:` list of a stress-ng `--yaml` file. Unknown keys are ignored;
/// entries without a stressor name are skipped.
pub fn parse_stress_ng_yaml(text: &str) -> Vec<ComponentMetrics> {
    let mut out = Vec::new();
    let mut in_metrics = false;
    let mut cur: Option<ComponentMetrics> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if !line.starts_with(' ') && !line.starts_with('-') && trimmed.ends_with(':') {
            in_metrics = trimmed == "metrics:";
            if let Some(m) = cur.take() {
                out.push(m);
            }
            continue;
        }
        if !in_metrics {
            continue;
        }
        let (item_start, kv) = match trimmed.strip_prefix("- ") {
            Some(rest) => (true, rest),
            None => (false, trimmed),
        };
        if item_start {
            if let Some(m) = cur.take() {
                out.push(m);
            }
            cur = Some(ComponentMetrics {
                component: String::new(),
                ops: 0,
                ops_per_s: 0.0,
                op: STRESS_NG_OP.into(),
            });
        }
        let Some((k, v)) = kv.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if let Some(m) = cur.as_mut() {
            match k {
                "stressor" => m.component = v.to_string(),
                "bogo-ops" => m.ops = v.parse::<f64>().map(|f| f as u64).unwrap_or(0),
                "bogo-ops-per-second-real-time" => m.ops_per_s = v.parse().unwrap_or(0.0),
                _ => {}
            }
        }
    }
    if let Some(m) = cur.take() {
        out.push(m);
    }
    out.retain(|m| !m.component.is_empty());
    out
}

/// Sum per component (several load processes, e.g. NRT and guest loads).
pub fn merge_metrics(parts: &[Vec<ComponentMetrics>]) -> Vec<ComponentMetrics> {
    let mut out: Vec<ComponentMetrics> = Vec::new();
    for m in parts.iter().flatten() {
        match out.iter_mut().find(|o| o.component == m.component) {
            Some(o) => {
                o.ops += m.ops;
                o.ops_per_s += m.ops_per_s;
            }
            None => out.push(m.clone()),
        }
    }
    out
}

/// Throughput of `a` relative to `b`: the geometric mean over the components
/// both ran of (ops/s in a) / (ops/s in b). Operations of different components
/// are not commensurable, so they are never summed across components.
pub fn relative_throughput(a: &[ComponentMetrics], b: &[ComponentMetrics]) -> Option<f64> {
    let mut log_sum = 0.0;
    let mut k = 0;
    for x in a {
        if let Some(y) = b.iter().find(|y| y.component == x.component) {
            if x.ops_per_s > 0.0 && y.ops_per_s > 0.0 {
                log_sum += (x.ops_per_s / y.ops_per_s).ln();
                k += 1;
            }
        }
    }
    (k > 0).then(|| (log_sum / k as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "---
system-info:
      stress-ng-version: 0.15.06
      cpus: 2
metrics:
    - stressor: cpu
      bogo-ops: 1234
      bogo-ops-per-second-usr-sys-time: 620.5
      bogo-ops-per-second-real-time: 610.25
      wall-clock-time: 2.02
    - stressor: sock
      bogo-ops: 99
      bogo-ops-per-second-real-time: 49.5
times:
      run-time: 2.0
...
";

    #[test]
    fn parses_metrics_and_ignores_other_sections() {
        let m = parse_stress_ng_yaml(YAML);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].component, "cpu");
        assert_eq!(m[0].ops, 1234);
        assert_eq!(m[0].ops_per_s, 610.25);
        assert_eq!(m[0].op, STRESS_NG_OP);
        assert_eq!(m[1].component, "sock");
        assert_eq!(m[1].ops_per_s, 49.5);
        assert!(parse_stress_ng_yaml("garbage\n").is_empty());
    }

    #[test]
    fn all_is_the_five_loads() {
        let all = LoadKind::All.stressors();
        for k in ALL_KINDS {
            for s in k.stressors() {
                assert!(all.contains(&s));
            }
        }
        let args = LoadKind::Compute.stress_ng_args(3);
        assert_eq!(args, ["--cpu", "3"]);
        assert_eq!("network".parse::<LoadKind>(), Ok(LoadKind::Network));
        assert!("nope".parse::<LoadKind>().is_err());
        for e in [LoadEngine::StressNg, LoadEngine::Builtin] {
            assert_eq!(e.name().parse::<LoadEngine>(), Ok(e));
            assert_eq!(serde_json::to_value(e).unwrap(), e.name());
        }
        assert!("stressng".parse::<LoadEngine>().is_err());
    }

    #[test]
    fn relative_throughput_is_geometric_mean() {
        let m = |s: &str, v: f64| ComponentMetrics {
            component: s.into(),
            ops: 0,
            ops_per_s: v,
            op: STRESS_NG_OP.into(),
        };
        let a = [m("cpu", 50.0), m("sock", 400.0)];
        let b = [m("cpu", 100.0), m("sock", 100.0)];
        let r = relative_throughput(&a, &b).unwrap();
        assert!((r - 2f64.sqrt()).abs() < 1e-9); // sqrt(0.5 * 4)
        assert!(relative_throughput(&a, &[]).is_none());
        let merged = merge_metrics(&[a.to_vec(), b.to_vec()]);
        assert_eq!(merged[0].ops_per_s, 150.0);
    }
}
