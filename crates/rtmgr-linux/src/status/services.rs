//! Status items about the programs that change what a partition changes
//! (McKenney §2.1: IRQ steering, isolated CPUs; DROPS §4.1: one owner per
//! resource): a running irqbalance and an active tuned profile, each with
//! what it will undo of the partition. The judging is in
//! rtmgr_core::partition::coexist; this side reads.

use super::{item, Item, Verdict};
use crate::host::Host;
use crate::partition::irqbalance;
use crate::tasks;
use rtmgr_core::partition::coexist;
use rtmgr_core::CpuSet;

/// Where tuned keeps the active profile's name(s).
pub const TUNED_ACTIVE: &str = "/etc/tuned/active_profile";
/// Where tuned looks for a profile, user profiles first.
const TUNED_DIRS: &[&str] = &[
    "/etc/tuned/profiles",
    "/etc/tuned",
    "/usr/lib/tuned/profiles",
    "/usr/lib/tuned",
];
/// Boot options tuned's isolating profiles put on the kernel command line.
const ISOLATION_OPTIONS: &[&str] = &["isolcpus", "nohz_full", "rcu_nocbs", "tuned.non_isolcpus"];

pub(super) fn irqbalance_item(host: &Host, applied_rt: Option<&CpuSet>) -> Item {
    let Some(ib) = irqbalance::running(host) else {
        let (ban, file) = irqbalance::configured_ban(host, None);
        let value = match (file, ban) {
            (Some(f), Some(b)) => format!("not running ({f} bans CPUs {b})"),
            (Some(f), None) => format!("not running (config {f})"),
            _ => "not running".into(),
        };
        return item(
            "irqbalance",
            Verdict::Ok,
            value,
            "nothing rewrites IRQ affinities behind rtmgr",
        );
    };
    let (banned, how) = match irqbalance::banned_now(host, &ib) {
        Ok(b) => (b, format!("asked through {}", ib.socket.display())),
        Err(e) => (
            irqbalance::its_default(host, Some(ib.pid)),
            format!(
                "by its rules ({} or the boot isolation; socket {}: {e})",
                irqbalance::BANNED_VAR,
                ib.socket.display()
            ),
        ),
    };
    let value = format!(
        "running (pid {}), bans CPUs {} ({how})",
        ib.pid,
        if banned.is_empty() {
            "none".into()
        } else {
            banned.to_list()
        }
    );
    let Some(rt) = applied_rt else {
        return item(
            "irqbalance",
            Verdict::Warn,
            value,
            "it rewrites IRQ affinities at every rebalance (10 s): `rtmgr partition apply` refuses beside it unless told `--irqbalance ban` (bans the RT CPUs through its socket for the partition's lifetime)",
        );
    };
    let unbanned = rt.difference(&banned);
    if unbanned.is_empty() {
        item(
            "irqbalance",
            Verdict::Ok,
            value,
            "it bans the RT CPUs: it balances IRQs over the NRT CPUs only",
        )
    } else {
        item(
            "irqbalance",
            Verdict::Warn,
            value,
            format!(
                "at its next rebalance (every 10 s) it puts IRQs back on RT CPUs {}, undoing the partition's irqs knob: re-apply with `--irqbalance ban`, or set {}={} in its config and restart it, or stop it",
                unbanned.to_list(),
                irqbalance::BANNED_VAR,
                rt.to_list()
            ),
        )
    }
}

/// The tuned.conf texts of a profile and those it includes, most derived first.
fn profile_chain(host: &Host, names: &[String]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut todo: Vec<String> = names.to_vec();
    while let Some(name) = todo.pop() {
        if out.len() >= 16 || out.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let text = TUNED_DIRS
            .iter()
            .find_map(|d| host.read_opt(format!("{d}/{name}/tuned.conf")))
            .unwrap_or_default();
        todo.extend(coexist::tuned_includes(&text).into_iter().rev());
        out.push((name, text));
    }
    out
}

/// The profile's isolated_cores: set in a profile, else in the variables
/// file of an isolating profile it builds on; with where it was found.
fn isolated_cores(host: &Host, chain: &[(String, String)]) -> Option<(String, String)> {
    let in_profile = chain.iter().find_map(|(name, text)| {
        coexist::tuned_isolated_cores(text).map(|v| (v, format!("profile {name}")))
    });
    in_profile.or_else(|| {
        chain.iter().find_map(|(name, _)| {
            let file = format!("/etc/tuned/{name}-variables.conf");
            let text = host.read_opt(&file)?;
            coexist::tuned_isolated_cores(&text).map(|v| (v, file))
        })
    })
}

pub(super) fn tuned_item(host: &Host, applied_rt: Option<&CpuSet>) -> Item {
    let running = tasks::find_process(host, "tuned");
    let names: Vec<String> = host
        .read_opt(TUNED_ACTIVE)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let state = match &running {
        Some(t) => format!("tuned running (pid {})", t.pid),
        None => "tuned not running".to_string(),
    };
    if names.is_empty() {
        let verdict_value = format!("no active profile ({state})");
        return item(
            "tuned",
            Verdict::Ok,
            verdict_value,
            "tuned changes nothing here",
        );
    }
    let chain = profile_chain(host, &names);
    let cores = isolated_cores(host, &chain);
    let isolating = cores.is_some()
        || chain
            .iter()
            .any(|(n, _)| coexist::ISOLATING_PROFILES.contains(&n.as_str()));
    let parsed = cores.as_ref().and_then(|(v, _)| CpuSet::parse_list(v).ok());
    let cmdline = host.read_opt("/proc/cmdline").unwrap_or_default();
    let boot: Vec<&str> = cmdline
        .split_whitespace()
        .filter(|w| ISOLATION_OPTIONS.contains(&w.split('=').next().unwrap_or("")))
        .collect();
    let mut value = format!("profile {} ({state})", names.join(" "));
    if let Some((v, from)) = &cores {
        value.push_str(&format!(", isolated_cores {v} ({from})"));
    }
    if !boot.is_empty() {
        value.push_str(&format!("; kernel command line: {}", boot.join(" ")));
    }
    let effect = coexist::tuned_effect(isolating, parsed.as_ref(), applied_rt);
    let why = if running.is_none() {
        format!(
            "not running: it applies the profile when it starts; {}",
            effect.why
        )
    } else {
        effect.why
    };
    let verdict = if effect.agrees {
        Verdict::Ok
    } else {
        Verdict::Warn
    };
    item("tuned", verdict, value, why)
}

#[cfg(test)]
#[path = "services_tests.rs"]
mod tests;
