//! A tuned profile equivalent to a partition (ARTiS §2.1 partition; McKenney
//! §2.1 boot isolation): isolation that survives reboots, written for tuned's
//! own `cpu-partitioning` profile, which moves processes, IRQs and workqueues
//! off `isolated_cores`, bans them in irqbalance and puts nohz_full/rcu_nocbs
//! on the kernel command line. Pure: the CLI writes the files.

use super::{boot, KnobId, PartitionPlan};
use crate::CpuSet;

/// One file of the profile directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileFile {
    pub name: &'static str,
    pub text: String,
}

/// What cpu-partitioning and the profiles it includes (network-latency)
/// put on the kernel command line whatever the CPUs.
const TUNED_FIXED_CMDLINE: &str = "skew_tick=1 tsc=reliable rcupdate.rcu_normal_after_boot=1 rcutree.nohz_full_patience_delay=1000 nohz=on";
const TUNED_FIXED_TAIL: &str = "intel_pstate=disable nosoftlockup";

/// tuned's `cpulist2hex`: a hex mask in 8-digit words, comma-separated.
fn tuned_hex(set: &CpuSet) -> String {
    set.to_mask(1)
        .split(',')
        .map(|w| format!("{w:0>8}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The CPUs that are not RT, up to the highest CPU of the partition (tuned's
/// `cpulist_invert` of isolated_cores).
fn not_isolated(plan: &PartitionPlan) -> CpuSet {
    let all = plan.rt.union(&plan.nrt);
    let last = all.iter().last().unwrap_or(0);
    let mut out = CpuSet::new();
    for c in (0..=last).filter(|c| !plan.rt.contains(*c)) {
        out.insert(c);
    }
    out
}

/// rtmgr's own boot options that cpu-partitioning does not give: isolcpus
/// with managed_irq, where IRQs start, the preemption model.
fn rtmgr_cmdline(plan: &PartitionPlan) -> String {
    let mut opts = vec![
        boot::managed_irq_option(&plan.rt),
        format!("irqaffinity={}", plan.nrt.to_list()),
    ];
    if let Some(mode) = plan.preempt {
        opts.push(format!("preempt={mode}"));
    }
    opts.join(" ")
}

/// The whole kernel command line the profile implies.
pub fn implied_cmdline(plan: &PartitionPlan) -> String {
    let rt = plan.rt.to_list();
    format!(
        "{TUNED_FIXED_CMDLINE} nohz_full={rt} rcu_nocbs={rt} tuned.non_isolcpus={} {TUNED_FIXED_TAIL} {}",
        tuned_hex(&not_isolated(plan)),
        rtmgr_cmdline(plan)
    )
}

/// The profile directory's files: `tuned.conf` (include cpu-partitioning),
/// `cpu-partitioning-variables.conf` (for the stock profile instead) and
/// `cmdline` (the kernel command line it implies).
pub fn profile(plan: &PartitionPlan) -> Vec<ProfileFile> {
    let (rt, nrt) = (plan.rt.to_list(), plan.nrt.to_list());
    let mut conf = format!(
        "# tuned profile equivalent to the rtmgr partition RT CPUs {rt}, NRT CPUs {nrt},\n\
         # written by `rtmgr partition export --tuned`. Install: copy this directory to\n\
         # /etc/tuned/<name>/ (or /etc/tuned/profiles/<name>/ with tuned 2.23 and later) and run\n\
         # `tuned-adm profile <name>`; the kernel command line (see `cmdline`) takes effect at\n\
         # the next boot.\n\
         #\n\
         # Not expressed here (rtmgr does them at run time, `rtmgr partition apply`): the RT and\n\
         # NRT cpusets themselves (tuned sets affinities), RPS/XPS masks, block rq_affinity,\n\
         # idle states and governor of the RT CPUs only, lending idle RT capacity.\n\
         \n\
         [main]\n\
         summary=rtmgr partition: RT CPUs {rt} isolated, NRT CPUs {nrt} for everything else\n\
         include=cpu-partitioning\n\
         \n\
         [variables]\n\
         # The RT CPUs: cpu-partitioning moves processes, IRQs and workqueues off them, bans\n\
         # them in irqbalance, and adds nohz_full and rcu_nocbs for them at boot.\n\
         isolated_cores={rt}\n\
         # Empty on purpose: the isolcpus below (rtmgr's boot option) keeps the RT CPUs out of\n\
         # load balancing like no_balance_cores would, and also moves kernel-managed IRQs.\n\
         no_balance_cores=\n"
    );
    if plan.enabled(KnobId::Watchdog) {
        conf.push_str(&format!(
            "\n[sysctl]\n# rtmgr's watchdog knob: the lockup detector runs on the NRT CPUs only.\nkernel.watchdog_cpumask={nrt}\n"
        ));
    }
    conf.push_str(&format!(
        "\n[bootloader]\ncmdline_rtmgr=+{}\n",
        rtmgr_cmdline(plan)
    ));
    let variables = format!(
        "# For tuned's stock cpu-partitioning profile instead of this directory's tuned.conf:\n\
         # copy to /etc/tuned/cpu-partitioning-variables.conf, then\n\
         # `tuned-adm profile cpu-partitioning`. (Without rtmgr's managed_irq isolation.)\n\
         isolated_cores={rt}\n\
         no_balance_cores={rt}\n"
    );
    vec![
        ProfileFile {
            name: "tuned.conf",
            text: conf,
        },
        ProfileFile {
            name: "cpu-partitioning-variables.conf",
            text: variables,
        },
        ProfileFile {
            name: "cmdline",
            text: format!("{}\n", implied_cmdline(plan)),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::super::{validate, PartitionConfig};
    use super::*;
    use crate::partition::coexist;

    fn plan(rt: &str, online: &str, toml: &str) -> PartitionPlan {
        let cfg = PartitionConfig::from_toml(toml).unwrap();
        validate(
            &cfg,
            Some(&CpuSet::parse_list(rt).unwrap()),
            &CpuSet::parse_list(online).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn the_profile_includes_cpu_partitioning_with_the_rt_cpus() {
        let p = plan("2-3", "0-3", "");
        let files = profile(&p);
        let conf = &files[0].text;
        assert_eq!(coexist::tuned_includes(conf), vec!["cpu-partitioning"]);
        assert_eq!(coexist::tuned_isolated_cores(conf).as_deref(), Some("2-3"));
        assert!(conf.contains("\nno_balance_cores=\n"), "{conf}");
        assert!(conf.contains("kernel.watchdog_cpumask=0-1"), "{conf}");
        assert!(
            conf.contains("cmdline_rtmgr=+isolcpus=managed_irq,domain,2-3 irqaffinity=0-1\n"),
            "{conf}"
        );
        let vars = &files[1].text;
        assert_eq!(coexist::tuned_isolated_cores(vars).as_deref(), Some("2-3"));
        assert!(vars.contains("no_balance_cores=2-3"));
    }

    #[test]
    fn the_implied_command_line() {
        let p = plan(
            "1",
            "0-1",
            "preempt = \"full\"\nknobs = [\"cgroups\", \"preempt\"]",
        );
        assert_eq!(
            implied_cmdline(&p),
            "skew_tick=1 tsc=reliable rcupdate.rcu_normal_after_boot=1 rcutree.nohz_full_patience_delay=1000 nohz=on nohz_full=1 rcu_nocbs=1 tuned.non_isolcpus=00000001 intel_pstate=disable nosoftlockup isolcpus=managed_irq,domain,1 irqaffinity=0 preempt=full"
        );
        assert!(
            !profile(&p)[0].text.contains("[sysctl]"),
            "watchdog knob off"
        );
        assert_eq!(
            tuned_hex(&CpuSet::parse_list("0,33").unwrap()),
            "00000002,00000001"
        );
    }
}
