//! The daemon's configuration file (DROPS §4.1: the resource manager is
//! configured by a script): the partition keys of `rtmgr partition apply
//! --config` at the top level, plus `[serve]` (where state lives, what runs
//! beside the socket), `[admission]` (cap per RT CPU, placement), `[policy]`
//! and `[[client]]` rules (who may reserve what), `[rtkit]` (rtkit's D-Bus
//! API, `rtkit/config.rs`), `[resources]` (memory, I/O, cache:
//! `rtmgr_core::resources`). Unknown keys are errors.

use rtmgr_core::admission::policy::{ClientPolicy, ClientRule};
use rtmgr_core::admission::{Placement, DEFAULT_CAP};
use rtmgr_core::partition::PartitionConfig;
use serde::Deserialize;
use std::path::PathBuf;

/// Where the daemon keeps its state by default (tmpfs: a reboot forgets).
pub const DEFAULT_STATE_DIR: &str = "/run/rtmgr";
pub const DEFAULT_CONFIG: &str = "/etc/rtmgr/rtmgr.toml";

/// `[serve]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSection {
    /// Partition journal, grants journal and socket live here.
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// The socket (default: state_dir/rtmgr.sock).
    pub socket: Option<PathBuf>,
    /// How often drift is looked for and repaired.
    #[serde(default = "default_reconcile_ms")]
    pub reconcile_ms: u64,
    /// Every partition and `[resources]` knob is verified within this time,
    /// a slice of them at each reconcile (up to `reconcile_ms`: all each time).
    #[serde(default = "default_knob_verify_ms")]
    pub knob_verify_ms: u64,
    /// Run the live balancer (ARTiS §2.3) beside the socket.
    #[serde(default = "yes")]
    pub balancer: bool,
    /// Run its latency guard.
    #[serde(default = "yes")]
    pub guard: bool,
    #[serde(default = "default_balance_ms")]
    pub balance_period_ms: u64,
    /// Connections served at once (more wait in the listen queue).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Serve OpenMetrics text on http://ADDR/metrics (`serve --metrics`).
    pub metrics: Option<String>,
    /// SCHED_FIFO priority of the request loop, pinned to the NRT CPUs
    /// (`loop_priority.rs`); 0 leaves it SCHED_OTHER.
    #[serde(default = "default_loop_priority")]
    pub loop_priority: u32,
    /// A grant's kernel steps (and a revocation's placement, a root
    /// domain's rebuild) on the grant worker thread, off the request loop
    /// (`grant_worker.rs`); false: on the loop, as before (for comparison).
    #[serde(default = "default_true")]
    pub grant_worker: bool,
}

fn default_state_dir() -> PathBuf {
    PathBuf::from(DEFAULT_STATE_DIR)
}
fn default_reconcile_ms() -> u64 {
    1000
}
fn default_knob_verify_ms() -> u64 {
    10_000
}
fn default_balance_ms() -> u64 {
    50
}
fn default_max_connections() -> usize {
    128
}
fn default_true() -> bool {
    true
}
fn default_loop_priority() -> u32 {
    super::loop_priority::DEFAULT
}
fn yes() -> bool {
    true
}

impl Default for ServeSection {
    fn default() -> Self {
        toml::from_str("").expect("defaults")
    }
}

/// `[admission]`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionSection {
    #[serde(default = "default_cap")]
    pub cap: f64,
    #[serde(default)]
    pub placement: Placement,
}

fn default_cap() -> f64 {
    DEFAULT_CAP
}

impl Default for AdmissionSection {
    fn default() -> Self {
        AdmissionSection {
            cap: DEFAULT_CAP,
            placement: Placement::default(),
        }
    }
}

/// `[policy]` (the rules themselves are `[[client]]`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicySection {
    max_total_utilisation: Option<f64>,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServeConfig {
    pub partition: PartitionConfig,
    pub serve: ServeSection,
    pub admission: AdmissionSection,
    pub policy: ClientPolicy,
    /// Per `[[client]]` rule, its `existing_processes` (default false): may
    /// reserve for an existing process its user owns (`rtmgr reserve --pid`).
    pub existing_processes: Vec<bool>,
    /// `[rtkit]`: the D-Bus front end (rtkit's API).
    pub rtkit: super::rtkit::RtkitSection,
    pub resources: rtmgr_core::resources::ResourcesConfig,
    pub starvation: rtmgr_core::resources::starvation::StarvationConfig,
}

impl ServeConfig {
    /// Parse the file: daemon sections out, the rest is a partition config.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        fn one_line(e: &dyn std::fmt::Display) -> String {
            e.to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        }
        let mut table: toml::Table = toml::from_str(text).map_err(|e| one_line(&e))?;
        // One `[section]` of the file, or its default when absent.
        fn section<T: serde::de::DeserializeOwned + Default>(
            table: &mut toml::Table,
            key: &str,
        ) -> Result<T, String> {
            match table.remove(key) {
                Some(v) => v
                    .try_into()
                    .map_err(|e| format!("[{key}]: {}", one_line(&e))),
                None => Ok(T::default()),
            }
        }
        let serve: ServeSection = section(&mut table, "serve")?;
        let admission: AdmissionSection = section(&mut table, "admission")?;
        let policy: PolicySection = section(&mut table, "policy")?;
        let (rules, existing_processes) = match table.remove("client") {
            Some(v) => {
                let (rules, existing) = client_rules(v)?;
                (Some(rules), existing)
            }
            None => (None, Vec::new()),
        };
        let rtkit: super::rtkit::RtkitSection = section(&mut table, "rtkit")?;
        let resources = section(&mut table, "resources")?;
        let starvation = section(&mut table, "starvation")?;
        let rest = toml::to_string(&table).map_err(|e| one_line(&e))?;
        let partition = PartitionConfig::from_toml(&rest).map_err(|e| e.to_string())?;
        let mut pol = ClientPolicy::default();
        if let Some(rules) = rules {
            pol.rules = rules;
        }
        pol.max_total_utilisation = policy.max_total_utilisation;
        let cfg = ServeConfig {
            partition,
            serve,
            admission,
            policy: pol,
            existing_processes,
            rtkit,
            resources,
            starvation,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), String> {
        if !(self.admission.cap > 0.0 && self.admission.cap <= 1.0) {
            return Err(format!(
                "[admission] cap {} must be within (0, 1]",
                self.admission.cap
            ));
        }
        if self.serve.reconcile_ms == 0 || self.serve.balance_period_ms == 0 {
            return Err("[serve] reconcile_ms and balance_period_ms must be > 0".into());
        }
        if self.serve.max_connections == 0 {
            return Err("[serve] max_connections must be > 0".into());
        }
        if self.serve.loop_priority > 98 {
            return Err(format!(
                "[serve] loop_priority {} must be within 0..=98 (0: SCHED_OTHER)",
                self.serve.loop_priority
            ));
        }
        self.rtkit.validate()?;
        self.resources.validate()?;
        self.starvation.validate()?;
        self.policy.validate()
    }

    /// The optional front ends this config turns on are in this build:
    /// `--rtkit` needs the cargo feature `rtkit`, `--metrics` the feature
    /// `metrics`. Checked before anything changes; the error names the feature.
    pub fn check_built(&self) -> Result<(), String> {
        let fronts = [
            (
                self.rtkit.enabled,
                cfg!(feature = "rtkit"),
                "--rtkit ([rtkit] enabled)",
                "rtkit",
            ),
            (
                self.serve.metrics.is_some(),
                cfg!(feature = "metrics"),
                "--metrics ([serve] metrics)",
                "metrics",
            ),
        ];
        match fronts.into_iter().find(|(on, built, ..)| *on && !*built) {
            Some((_, _, what, feature)) => Err(format!(
                "{what} needs the cargo feature `{feature}`, and this rtmgr was built without it; \
                 rebuild with it, e.g. `cargo install --path crates/rtmgr --features {feature}` \
                 (`--features full` for every optional part)"
            )),
            None => Ok(()),
        }
    }

    pub fn partition_journal(&self) -> PathBuf {
        self.serve.state_dir.join("journal.jsonl")
    }

    pub fn grants_journal(&self) -> PathBuf {
        grants_journal_beside(&self.partition_journal())
    }

    pub fn socket(&self) -> PathBuf {
        self.serve
            .socket
            .clone()
            .unwrap_or_else(|| self.serve.state_dir.join("rtmgr.sock"))
    }
}

/// The `[[client]]` rules, and each one's `existing_processes` (a daemon
/// key beside the policy's own, taken out before the rule is read).
fn client_rules(v: toml::Value) -> Result<(Vec<ClientRule>, Vec<bool>), String> {
    let one_line = |e: &dyn std::fmt::Display| {
        let text = e.to_string();
        format!(
            "[[client]]: {}",
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        )
    };
    let toml::Value::Array(entries) = v else {
        return Err("[[client]]: an array of tables".into());
    };
    let mut rules = Vec::new();
    let mut existing = Vec::new();
    for mut entry in entries {
        let flag = match entry
            .as_table_mut()
            .and_then(|t| t.remove("existing_processes"))
        {
            None => false,
            Some(toml::Value::Boolean(b)) => b,
            Some(other) => {
                return Err(format!(
                    "[[client]]: existing_processes = {other} is not true or false"
                ))
            }
        };
        rules.push(entry.try_into().map_err(|e| one_line(&e))?);
        existing.push(flag);
    }
    Ok((rules, existing))
}

/// The grants journal that belongs with a partition journal (same directory).
pub fn grants_journal_beside(partition_journal: &std::path::Path) -> PathBuf {
    partition_journal.with_file_name("grants.jsonl")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_split_from_the_partition_keys() {
        let text = r#"
rt_cpus = "1"
latency_bound_us = 200
[irq]
leave = [9]
[serve]
state_dir = "/tmp/x"
balancer = false
[admission]
cap = 0.8
placement = "first-fit"
[policy]
max_total_utilisation = 1.5
[[client]]
users = ["root"]
[[client]]
groups = ["audio"]
max_utilisation = 0.5
max_priority = 40
hard = false
"#;
        let c = ServeConfig::from_toml(text).unwrap();
        assert_eq!(c.partition.latency_bound_us, Some(200));
        assert_eq!(c.partition.irq.leave, vec![9]);
        assert!(!c.serve.balancer);
        assert_eq!(c.socket(), PathBuf::from("/tmp/x/rtmgr.sock"));
        assert_eq!(c.grants_journal(), PathBuf::from("/tmp/x/grants.jsonl"));
        assert_eq!(c.admission.placement, Placement::FirstFit);
        assert_eq!(c.policy.rules.len(), 2);
        assert_eq!(c.policy.max_total_utilisation, Some(1.5));
        assert!(ServeConfig::from_toml("rt_cpus = \"1\"\nbogus = 1\n").is_err());
        assert!(ServeConfig::from_toml("[serve]\nbogus = 1\n").is_err());
        assert!(ServeConfig::from_toml("[admission]\ncap = 1.5\n").is_err());
        assert!(ServeConfig::from_toml("[resources]\nmemlock_share = 2\n").is_err());
        let r = ServeConfig::from_toml("[resources]\nnrt_io_weight = 50\n").unwrap();
        assert_eq!(r.resources.nrt_io_weight, Some(50));
        assert!(ServeConfig::from_toml(
            "[starvation]\nenabled = false\nlift_rt_throttling = true\n"
        )
        .is_err());
        assert!(ServeConfig::from_toml("[[client]]\nmax_priority = 10\n").is_err());
        let e = ServeConfig::from_toml(
            "[[client]]\nusers = [\"root\"]\n[[client]]\nusers = [\"alice\"]\nexisting_processes = true\n",
        )
        .unwrap();
        assert_eq!(e.existing_processes, vec![false, true]);
        assert_eq!(e.policy.rules.len(), 2);
        assert!(
            ServeConfig::from_toml("[[client]]\nusers = [\"a\"]\nexisting_processes = 1\n")
                .is_err()
        );
        let d = ServeConfig::from_toml("").unwrap();
        assert_eq!(
            (d.serve.reconcile_ms, d.serve.knob_verify_ms),
            (1000, 10_000)
        );
        let k = ServeConfig::from_toml("[serve]\nknob_verify_ms = 3000\n").unwrap();
        assert_eq!(k.serve.knob_verify_ms, 3000);
        assert!(ServeConfig::from_toml("[serve]\nknob_verify_ms = -1\n").is_err());
        assert_eq!(d.policy, ClientPolicy::default());
        assert_eq!(d.socket(), PathBuf::from("/run/rtmgr/rtmgr.sock"));
    }

    #[test]
    fn optional_fronts_are_refused_by_a_build_without_their_feature() {
        let plain = ServeConfig::from_toml("rt_cpus = \"1\"\n").unwrap();
        assert_eq!(plain.check_built(), Ok(()));
        let mut rtkit = plain.clone();
        rtkit.rtkit.enabled = true;
        let mut metrics = plain.clone();
        metrics.serve.metrics = Some("127.0.0.1:9464".into());
        for (c, feature, built) in [
            (rtkit, "rtkit", cfg!(feature = "rtkit")),
            (metrics, "metrics", cfg!(feature = "metrics")),
        ] {
            match c.check_built() {
                Ok(()) => assert!(built, "{feature}: accepted without the feature"),
                Err(e) => {
                    assert!(!built, "{feature}: refused with the feature: {e}");
                    let install = format!("cargo install --path crates/rtmgr --features {feature}");
                    assert!(e.contains(&install), "{e}");
                }
            }
        }
    }
}
