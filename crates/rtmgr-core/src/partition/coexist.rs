//! Living beside irqbalance and tuned (McKenney §2.1: steer interrupts away
//! from the RT CPU; DROPS §4.1: one owner per resource). Pure: parses what
//! the two say about themselves and says what each will undo of a partition;
//! the linux side reads the files and talks to irqbalance's socket.

use crate::CpuSet;

/// The CPUs irqbalance bans, from its socket's answer to `setup`
/// (`SLEEP 10 IRQ 24 LOAD 0 DIFF 0 CLASS 0 BANNED 00000002`: a hex mask).
pub fn irqbalance_banned_from_setup(reply: &str) -> Option<CpuSet> {
    let mask = reply
        .split_whitespace()
        .skip_while(|w| *w != "BANNED")
        .nth(1)?;
    CpuSet::parse_mask(mask).ok()
}

/// A variable's value in a shell-style environment file (`KEY=value`,
/// `KEY="value"`, `#` comments) or a NUL-separated `/proc/PID/environ`.
pub fn env_value(text: &str, key: &str) -> Option<String> {
    text.split(['\0', '\n'])
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("export ").unwrap_or(l).split_once('='))
        .filter(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().trim_matches(['"', '\'']).to_string())
        .next_back()
}

/// What irqbalance bans when nobody told it otherwise (its
/// `setup_banned_cpus`): `IRQBALANCE_BANNED_CPULIST` when set, else the CPUs
/// the kernel isolates at boot (`isolcpus`) or runs tickless (`nohz_full`).
pub fn irqbalance_default_banned(
    env_cpulist: Option<&str>,
    isolated: &CpuSet,
    nohz_full: &CpuSet,
) -> CpuSet {
    match env_cpulist.map(CpuSet::parse_list) {
        Some(Ok(set)) => set,
        _ => isolated.union(nohz_full),
    }
}

/// The socket command that bans `cpus` (`NULL`: back to irqbalance's own rules).
pub fn irqbalance_ban_command(cpus: Option<&CpuSet>) -> String {
    match cpus {
        Some(c) if !c.is_empty() => format!("settings cpus {}", c.to_list()),
        _ => "settings cpus NULL".to_string(),
    }
}

/// The command that gives irqbalance back the ban it had before rtmgr: its
/// own rules when that ban was what its rules give, else the same list.
pub fn irqbalance_restore_command(before: &CpuSet, its_default: &CpuSet) -> String {
    if before == its_default {
        irqbalance_ban_command(None)
    } else {
        irqbalance_ban_command(Some(before))
    }
}

/// Profiles shipped with tuned that isolate CPUs through `isolated_cores`.
pub const ISOLATING_PROFILES: &[&str] = &[
    "cpu-partitioning",
    "cpu-partitioning-powersave",
    "realtime",
    "realtime-virtual-guest",
    "realtime-virtual-host",
];

/// The `include=` of a tuned.conf's `[main]` section (profiles it builds on).
pub fn tuned_includes(tuned_conf: &str) -> Vec<String> {
    ini_values(tuned_conf, "main", "include")
        .into_iter()
        .flat_map(|v| {
            v.split([',', ' '])
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The `isolated_cores` a profile's `[variables]` (or a variables file, which
/// has no sections) sets, unless it only forwards `${isolated_cores}`.
pub fn tuned_isolated_cores(text: &str) -> Option<String> {
    let in_vars = ini_values(text, "variables", "isolated_cores");
    let bare = ini_values(text, "", "isolated_cores");
    in_vars
        .into_iter()
        .chain(bare)
        .rfind(|v| !v.contains("${isolated_cores}"))
}

/// Values of `key` in `section` of an ini text ("" = before any section).
fn ini_values(text: &str, section: &str, key: &str) -> Vec<String> {
    let mut current = String::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.trim().to_string();
            continue;
        }
        if current != section {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            if k.trim() == key {
                out.push(v.trim().to_string());
            }
        }
    }
    out
}

/// What an active tuned profile does to a partition with RT CPUs `rt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunedEffect {
    /// Nothing it does works against the partition.
    pub agrees: bool,
    pub why: String,
}

/// What tuned undoes: `isolating` when the profile (or one it includes)
/// isolates CPUs; `isolated` its `isolated_cores` when they could be read.
pub fn tuned_effect(
    isolating: bool,
    isolated: Option<&CpuSet>,
    rt: Option<&CpuSet>,
) -> TunedEffect {
    const ROLLBACK: &str = "when tuned stops or switches profile it writes back the values it saved when it applied the profile, over whatever rtmgr set since";
    if !isolating {
        return TunedEffect {
            agrees: true,
            why: format!("the profile isolates no CPU; its [cpu] plugin may set the frequency governor and a PM QoS latency that rtmgr's cpufreq and cpuidle knobs also set (the last writer wins); {ROLLBACK}"),
        };
    }
    let does = |iso: &str| {
        format!("whenever the profile is applied (tuned start, `tuned-adm profile`, boot) its scheduler plugin moves processes off CPUs {iso} and keeps new ones off them, [sysfs] sets the workqueue cpumasks to the other CPUs, and its [irqbalance] plugin bans {iso} and restarts irqbalance (dropping a ban rtmgr gave through irqbalance's socket)")
    };
    match (isolated, rt) {
        (Some(iso), Some(rt)) if iso == rt => TunedEffect {
            agrees: true,
            why: format!("its isolated_cores are the RT CPUs: it isolates the same CPUs rtmgr does ({}); {ROLLBACK}", does(&iso.to_list())),
        },
        (Some(iso), Some(rt)) => TunedEffect {
            agrees: false,
            why: format!(
                "its isolated_cores {} are not the RT CPUs {}: {}; RT CPUs it does not isolate: {}; `rtmgr partition export --tuned DIR` writes a profile that matches the partition",
                iso.to_list(),
                rt.to_list(),
                does(&iso.to_list()),
                none_if_empty(&rt.difference(iso)),
            ),
        },
        (Some(iso), None) => TunedEffect {
            agrees: true,
            why: format!("no partition applied; {}", does(&iso.to_list())),
        },
        (None, _) => TunedEffect {
            agrees: false,
            why: format!("its isolated_cores could not be read (computed by tuned, or the variables file is missing); {}", does("isolated_cores")),
        },
    }
}

fn none_if_empty(set: &CpuSet) -> String {
    if set.is_empty() {
        "none".into()
    } else {
        set.to_list()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(l: &str) -> CpuSet {
        CpuSet::parse_list(l).unwrap()
    }

    #[test]
    fn setup_reply_gives_the_banned_mask() {
        let reply = "SLEEP 10 IRQ 24 LOAD 0 DIFF 0 CLASS 0 BANNED 00000000,00000006";
        assert_eq!(irqbalance_banned_from_setup(reply), Some(set("1-2")));
        assert_eq!(irqbalance_banned_from_setup("SLEEP 10 "), None);
    }

    #[test]
    fn environment_files_and_environ() {
        let file = "# comment\n#IRQBALANCE_BANNED_CPULIST=7\nIRQBALANCE_BANNED_CPULIST=\"2-3\"\nIRQBALANCE_ARGS=\"\"\n";
        assert_eq!(
            env_value(file, "IRQBALANCE_BANNED_CPULIST").as_deref(),
            Some("2-3")
        );
        let environ = "PATH=/bin\0IRQBALANCE_BANNED_CPULIST=1\0";
        assert_eq!(
            env_value(environ, "IRQBALANCE_BANNED_CPULIST").as_deref(),
            Some("1")
        );
        assert_eq!(env_value(environ, "IRQBALANCE_ONESHOT"), None);
    }

    #[test]
    fn default_ban_and_the_restore_command() {
        let iso = set("3");
        let nohz = CpuSet::new();
        assert_eq!(irqbalance_default_banned(None, &iso, &nohz), iso);
        assert_eq!(irqbalance_default_banned(Some("1"), &iso, &nohz), set("1"));
        assert_eq!(irqbalance_restore_command(&iso, &iso), "settings cpus NULL");
        assert_eq!(
            irqbalance_restore_command(&set("1,3"), &iso),
            "settings cpus 1,3"
        );
        assert_eq!(
            irqbalance_ban_command(Some(&set("1-2"))),
            "settings cpus 1-2"
        );
        assert_eq!(
            irqbalance_ban_command(Some(&CpuSet::new())),
            "settings cpus NULL"
        );
    }

    #[test]
    fn tuned_profiles_and_variables() {
        let conf = "[main]\nsummary=x\ninclude=cpu-partitioning\n[variables]\nisolated_cores=${isolated_cores}\n";
        assert_eq!(tuned_includes(conf), vec!["cpu-partitioning"]);
        assert_eq!(tuned_isolated_cores(conf), None);
        let child = "[main]\ninclude=cpu-partitioning\n[variables]\nisolated_cores=1\n";
        assert_eq!(tuned_isolated_cores(child).as_deref(), Some("1"));
        let vars = "# Examples:\n# isolated_cores=2,4-7\nisolated_cores=2-3\n";
        assert_eq!(tuned_isolated_cores(vars).as_deref(), Some("2-3"));
    }

    #[test]
    fn what_tuned_undoes() {
        let same = tuned_effect(true, Some(&set("1")), Some(&set("1")));
        assert!(same.agrees, "{same:?}");
        let other = tuned_effect(true, Some(&set("2")), Some(&set("1")));
        assert!(!other.agrees);
        assert!(
            other.why.contains("RT CPUs it does not isolate: 1"),
            "{other:?}"
        );
        assert!(tuned_effect(false, None, Some(&set("1"))).agrees);
        assert!(!tuned_effect(true, None, Some(&set("1"))).agrees);
    }
}
