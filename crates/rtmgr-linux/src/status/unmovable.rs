//! Status items about what stays on the RT CPUs (McKenney §2.1; DROPS §4.2):
//! the kernel-managed interrupts with their rates and the boot option that
//! would move each, the disks whose completions land there, which CPUs
//! `--rt-cpus auto` would choose and why, the boot line that would finish the
//! isolation, and which run-time knobs this machine has.

use super::{item, Item, Verdict};
use crate::host::Host;
use crate::partition::{self, Applied};
use crate::{irq, unmovable};
use rtmgr_core::partition::placement::{self, Facts, IrqHit, IrqKind, RtChoice};
use rtmgr_core::partition::{boot, validate, PartitionConfig, PreemptMode};
use rtmgr_core::CpuSet;

/// Where the RT CPUs are (an applied partition) or would be (auto).
pub(super) struct RtCpus {
    pub rt: CpuSet,
    pub applied: bool,
    pub choice: Option<RtChoice>,
}

pub(super) fn rt_cpus(facts: &Facts, applied: Option<&Applied>) -> Option<RtCpus> {
    let choice = placement::choose(facts, 1).ok();
    match (applied, choice) {
        (Some(a), choice) => Some(RtCpus {
            rt: a.plan.rt.clone(),
            applied: true,
            choice,
        }),
        (None, Some(c)) => Some(RtCpus {
            rt: c.rt.clone(),
            applied: false,
            choice: Some(c),
        }),
        (None, None) => None,
    }
}

fn whose(rt: &RtCpus) -> String {
    if rt.applied {
        format!("the RT CPUs {}", rt.rt)
    } else {
        format!("CPU {} (what --rt-cpus auto would choose)", rt.rt)
    }
}

pub(super) fn managed_irqs_item(host: &Host, hits: &[IrqHit], rt: Option<&RtCpus>) -> Item {
    if !host.privileged() {
        return item(
            "unmovable_irqs",
            Verdict::Warn,
            "unknown: only root can tell kernel-managed interrupts",
            "run `rtmgr status` as root to see the interrupts no partition can move",
        );
    }
    let mut managed: Vec<&IrqHit> = hits.iter().filter(|h| h.kind == IrqKind::Managed).collect();
    managed.sort_by(|a, b| b.per_s.total_cmp(&a.per_s));
    if managed.is_empty() {
        return item(
            "unmovable_irqs",
            Verdict::Ok,
            "no kernel-managed interrupt",
            "a partition can steer every device interrupt",
        );
    }
    let on_rt = |h: &IrqHit| rt.is_some_and(|r| r.rt.contains(h.cpu));
    let value: Vec<String> = managed
        .iter()
        .map(|h| {
            let target = match rt {
                Some(r) if on_rt(h) => r.rt.clone(),
                _ => CpuSet::single(h.cpu),
            };
            format!(
                "IRQ {} {} on CPU {}: {:.0}/s, {} since boot ({} at boot moves it{})",
                h.irq,
                h.name,
                h.cpu,
                h.per_s,
                h.since_boot,
                h.boot_option(&target),
                if on_rt(h) {
                    "; it hits an RT CPU"
                } else {
                    " off that CPU if it is RT"
                }
            )
        })
        .collect();
    let hit = managed.iter().any(|h| on_rt(h));
    item(
        "unmovable_irqs",
        if hit { Verdict::Warn } else { Verdict::Ok },
        value.join("; "),
        match rt {
            Some(r) if hit => format!(
                "the kernel refuses to move these interrupts and they land on {}: each one runs its handler there; choose another RT CPU (--rt-cpus auto) or boot with the option shown",
                whose(r)
            ),
            _ => "the kernel refuses to move kernel-managed interrupts: keep them off the RT CPUs (--rt-cpus auto does)".into(),
        },
    )
}

pub(super) fn block_item(host: &Host, rt: Option<&RtCpus>) -> Item {
    let mut lines = Vec::new();
    let mut hit = false;
    for d in unmovable::block_devices(host) {
        for n in &d.irqs {
            if irq::movable(host, *n) != Some(false) {
                continue;
            }
            let Some(eff) = irq::effective(host, *n) else {
                continue;
            };
            let on_rt = rt.is_some_and(|r| !eff.is_disjoint(&r.rt));
            hit |= on_rt && d.rq_affinity.as_deref() != Some("2");
            lines.push(format!(
                "{}: completion IRQ {n} kernel-managed on CPU {eff}, rq_affinity {}{}",
                d.name,
                d.rq_affinity.as_deref().unwrap_or("?"),
                if on_rt { " (an RT CPU)" } else { "" }
            ));
        }
    }
    if lines.is_empty() {
        lines.push(if host.privileged() {
            "no disk completes through a kernel-managed interrupt".into()
        } else {
            "unknown: only root can tell kernel-managed interrupts".into()
        });
    }
    item(
        "block_completions",
        if hit { Verdict::Warn } else { Verdict::Ok },
        lines.join("; "),
        "a disk's completion interrupt runs its handler, and with rq_affinity 1 the completion work too, on the CPU it lands on: every disk completion of the NRT load hits that CPU; a partition sets rq_affinity 2 (completions on the submitting CPU), only isolcpus=managed_irq moves the interrupt",
    )
}

pub(super) fn choice_item(rt: Option<&RtCpus>) -> Item {
    match rt.and_then(|r| r.choice.as_ref().map(|c| (r, c))) {
        None => item(
            "rt_cpu_choice",
            Verdict::Ok,
            "needs at least 2 online CPUs",
            "",
        ),
        Some((r, c)) => item(
            "rt_cpu_choice",
            if r.applied && r.rt != c.rt {
                Verdict::Warn
            } else {
                Verdict::Ok
            },
            format!("--rt-cpus auto would choose CPU {}: {}", c.rt, c.reason),
            if r.applied && r.rt != c.rt {
                format!(
                    "the applied RT CPUs {} take more unmovable work than CPU {}",
                    r.rt, c.rt
                )
            } else {
                "the CPUs the kernel leaves most alone make the best RT CPUs".into()
            },
        ),
    }
}

pub(super) fn boot_item(host: &Host, rt: Option<&RtCpus>, online: &CpuSet) -> Item {
    let Some(r) = rt else {
        return item(
            "boot_cmdline",
            Verdict::Ok,
            "needs at least 2 online CPUs",
            "",
        );
    };
    let cmdline = host.read_opt("/proc/cmdline").unwrap_or_default();
    let opts = boot::boot_options(&r.rt, &online.difference(&r.rt), &cmdline);
    let present: Vec<&str> = opts
        .iter()
        .filter(|o| o.present)
        .map(|o| o.option.as_str())
        .collect();
    item(
        "boot_cmdline",
        Verdict::Ok,
        if present.len() == opts.len() {
            format!("for {}: every option is on the command line", whose(r))
        } else if present.is_empty() {
            format!("for {}: {}", whose(r), boot::cmdline(&opts))
        } else {
            format!(
                "for {}: {} (already there: {})",
                whose(r),
                boot::cmdline(&opts),
                present.join(" ")
            )
        },
        "what a run-time partition cannot do: keep managed interrupts, the tick and RCU callbacks off the RT CPUs from boot on",
    )
}

pub(super) fn knobs_item(host: &Host, rt: Option<&RtCpus>, online: &CpuSet) -> Item {
    let Some(plan) = rt.and_then(|r| {
        let cfg = PartitionConfig {
            preempt: Some(PreemptMode::Full),
            ..Default::default()
        };
        validate(&cfg, Some(&r.rt), online).ok()
    }) else {
        return item(
            "runtime_knobs",
            Verdict::Ok,
            "needs at least 2 online CPUs",
            "",
        );
    };
    let knobs = partition::explain(host, &plan);
    let (here, absent): (Vec<_>, Vec<_>) = knobs.iter().partition(|k| k.here.available);
    let names = |v: &[&partition::KnobExplained]| {
        v.iter()
            .map(|k| k.knob.name())
            .collect::<Vec<_>>()
            .join(" ")
    };
    item(
        "runtime_knobs",
        Verdict::Ok,
        format!(
            "available: {}; not here: {}",
            names(&here),
            if absent.is_empty() { "none".into() } else { names(&absent) }
        ),
        "what `rtmgr partition apply` sets for the partition's lifetime and reset restores; `apply --explain` says what each does here",
    )
}
