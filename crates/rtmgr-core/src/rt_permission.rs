//! Why the kernel says EPERM to `sched_setscheduler(SCHED_FIFO)` (McKenney
//! §2.1: RT tasks run SCHED_FIFO; budget-based RTAI §3: the budget a group
//! may use). Pure: the linux side reads /proc/self/{status,limits,cgroup},
//! the cgroup files and the kernel config into `RtPermissionFacts`; this says
//! which of the kernel's reasons apply, each with its fix.
//!
//! The kernel's reasons (kernel/sched/syscalls.c, `__sched_setscheduler`): no
//! CAP_SYS_NICE and a priority above RLIMIT_RTPRIO; with
//! CONFIG_RT_GROUP_SCHED and RT throttling on, a task group whose RT runtime
//! is 0 (a v1 cpu cgroup with `cpu.rt_runtime_us` 0, or any non-root v2
//! cgroup with the cpu controller, since v2 has no RT budget file).

/// What the linux side read about the calling process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RtPermissionFacts {
    /// CAP_SYS_NICE in the effective set (`CapEff` of /proc/self/status).
    pub cap_sys_nice: Option<bool>,
    /// RLIMIT_RTPRIO soft limit (None inside: unlimited).
    pub rtprio_limit: Option<Option<u64>>,
    /// The kernel has RT group scheduling (CONFIG_RT_GROUP_SCHED).
    pub rt_group_sched: Option<bool>,
    /// `kernel.sched_rt_runtime_us` (-1: RT throttling off, group budgets unchecked).
    pub global_rt_runtime_us: Option<i64>,
    /// The caller's cgroup in a v1 cpu hierarchy and its `cpu.rt_runtime_us`.
    pub v1_cpu_cgroup: Option<(String, Option<i64>)>,
    /// The caller's non-root v2 cgroup, when the cpu controller is enabled for it.
    pub v2_cpu_cgroup: Option<String>,
}

/// One reason the kernel refuses, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub name: &'static str,
    pub why: String,
    pub fix: String,
}

/// CAP_SYS_NICE is capability 23.
const CAP_SYS_NICE: u32 = 23;

/// CAP_SYS_NICE in the `CapEff:` line of a /proc/PID/status text.
pub fn cap_sys_nice(status: &str) -> Option<bool> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    let bits = u64::from_str_radix(hex.trim(), 16).ok()?;
    Some(bits & (1 << CAP_SYS_NICE) != 0)
}

/// The soft RLIMIT_RTPRIO of a /proc/PID/limits text (None inside: unlimited).
pub fn rtprio_limit(limits: &str) -> Option<Option<u64>> {
    let rest = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max realtime priority"))?;
    let soft = rest.split_whitespace().next()?;
    match soft {
        "unlimited" => Some(None),
        n => n.parse().ok().map(Some),
    }
}

/// The caller's cgroup path in the v1 hierarchy that has `controller`
/// (`4:cpu,cpuacct:/user.slice` → `/user.slice`), from /proc/PID/cgroup.
pub fn v1_cgroup_of(cgroup: &str, controller: &str) -> Option<String> {
    cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
        ctl.split(',')
            .any(|c| c == controller)
            .then(|| path.to_string())
    })
}

/// The mount point of the v1 hierarchy that has `controller`, from
/// /proc/self/mountinfo.
pub fn v1_mount_of(mountinfo: &str, controller: &str) -> Option<String> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut r = right.split_whitespace();
        let (fstype, options) = (r.next()?, r.nth(1)?);
        (fstype == "cgroup" && options.split(',').any(|o| o == controller))
            .then(|| left.split_whitespace().nth(4).map(str::to_string))?
    })
}

/// Whether the kernel has RT group scheduling on, from its build
/// configuration and command line (kernels with
/// CONFIG_RT_GROUP_SCHED_DEFAULT_DISABLED turn it on with `rt_group_sched=1`).
pub fn rt_group_sched(config: &str, cmdline: &str) -> Option<bool> {
    let has = |opt: &str| config.lines().any(|l| l == format!("{opt}=y"));
    if config
        .lines()
        .any(|l| l == "# CONFIG_RT_GROUP_SCHED is not set")
    {
        return Some(false);
    }
    if !has("CONFIG_RT_GROUP_SCHED") {
        return None;
    }
    let boot = cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix("rt_group_sched="));
    Some(match boot {
        Some(v) => v == "1",
        None => !has("CONFIG_RT_GROUP_SCHED_DEFAULT_DISABLED"),
    })
}

/// The caller's v2 cgroup path (`0::/user.slice/…`).
pub fn v2_cgroup_of(cgroup: &str) -> Option<String> {
    cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_string))
}

/// The kernel's reasons that apply, most likely first; empty when none does.
pub fn diagnose(f: &RtPermissionFacts) -> Vec<Cause> {
    let mut out = Vec::new();
    if f.cap_sys_nice == Some(false) && f.rtprio_limit == Some(Some(0)) {
        out.push(Cause {
            name: "no_cap_sys_nice",
            why: "the process lacks CAP_SYS_NICE and its RLIMIT_RTPRIO is 0: it may not use any real-time priority".into(),
            fix: "run it as root or with CAP_SYS_NICE (systemd AmbientCapabilities=CAP_SYS_NICE, setcap cap_sys_nice+ep), or raise RLIMIT_RTPRIO (systemd LimitRTPRIO=, `@audio - rtprio 95` in /etc/security/limits.d), or ask `rtmgr serve` for a reservation".into(),
        });
    }
    let groups_checked = f.rt_group_sched != Some(false) && f.global_rt_runtime_us != Some(-1);
    if groups_checked {
        if let Some((path, Some(0))) = &f.v1_cpu_cgroup {
            if path != "/" {
                out.push(Cause {
                    name: "rt_group_no_budget",
                    why: format!("RT group scheduling (CONFIG_RT_GROUP_SCHED) gives this process's cpu cgroup {path} no RT budget (cpu.rt_runtime_us = 0): the kernel refuses every RT policy in it"),
                    fix: format!("give the cgroup a budget (write a runtime to cpu.rt_runtime_us of {path} and of each parent, e.g. 950000 of a 1000000 µs period), or run the process in the root cpu cgroup"),
                });
            }
        }
        if let Some(path) = &f.v2_cpu_cgroup {
            if f.rt_group_sched == Some(true) && path != "/" {
                out.push(Cause {
                    name: "v2_cpu_controller",
                    why: format!("the cgroup v2 cpu controller is enabled for this process's cgroup {path} and the kernel has RT group scheduling: v2 has no RT budget file, so the group's RT runtime is 0 and the kernel refuses every RT policy in it"),
                    fix: "run RT processes in a cgroup without the cpu controller (e.g. a systemd unit whose slice does not enable it), boot with rt_group_sched=0 where the kernel offers it, or use a kernel without CONFIG_RT_GROUP_SCHED".into(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_limits_and_cgroups_are_read() {
        assert_eq!(
            cap_sys_nice("Name:\tx\nCapEff:\t0000000000800000\n"),
            Some(true)
        );
        assert_eq!(cap_sys_nice("CapEff:\t0000000000000000\n"), Some(false));
        assert_eq!(cap_sys_nice("Name:\tx\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax realtime priority     0                    0\nMax realtime timeout      unlimited            unlimited            us\n";
        assert_eq!(rtprio_limit(limits), Some(Some(0)));
        assert_eq!(
            rtprio_limit("Max realtime priority     unlimited            unlimited\n"),
            Some(None)
        );
        let cg = "5:cpuset:/\n4:cpu,cpuacct:/user.slice\n0::/user.slice/session-1.scope\n";
        assert_eq!(v1_cgroup_of(cg, "cpu").as_deref(), Some("/user.slice"));
        assert_eq!(v1_cgroup_of(cg, "cpuacct").as_deref(), Some("/user.slice"));
        assert_eq!(v1_cgroup_of(cg, "memory"), None);
        assert_eq!(
            v2_cgroup_of(cg).as_deref(),
            Some("/user.slice/session-1.scope")
        );
    }

    #[test]
    fn mounts_and_the_kernel_config() {
        let mi = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            v1_mount_of(mi, "cpu").as_deref(),
            Some("/sys/fs/cgroup/cpu,cpuacct")
        );
        assert_eq!(v1_mount_of(mi, "cpuset"), None);
        let on = "CONFIG_RT_GROUP_SCHED=y\n# CONFIG_RT_GROUP_SCHED_DEFAULT_DISABLED is not set\n";
        assert_eq!(rt_group_sched(on, "quiet"), Some(true));
        assert_eq!(rt_group_sched(on, "rt_group_sched=0"), Some(false));
        let off_default = "CONFIG_RT_GROUP_SCHED=y\nCONFIG_RT_GROUP_SCHED_DEFAULT_DISABLED=y\n";
        assert_eq!(rt_group_sched(off_default, ""), Some(false));
        assert_eq!(rt_group_sched(off_default, "rt_group_sched=1"), Some(true));
        assert_eq!(
            rt_group_sched("# CONFIG_RT_GROUP_SCHED is not set\n", ""),
            Some(false)
        );
        assert_eq!(rt_group_sched("", ""), None);
    }

    fn names(f: &RtPermissionFacts) -> Vec<&'static str> {
        diagnose(f).iter().map(|c| c.name).collect()
    }

    #[test]
    fn each_kernel_reason_is_named_and_only_when_it_applies() {
        let unprivileged = RtPermissionFacts {
            cap_sys_nice: Some(false),
            rtprio_limit: Some(Some(0)),
            ..Default::default()
        };
        assert_eq!(names(&unprivileged), ["no_cap_sys_nice"]);
        let with_limit = RtPermissionFacts {
            rtprio_limit: Some(Some(50)),
            ..unprivileged.clone()
        };
        assert!(names(&with_limit).is_empty());
        let v1 = RtPermissionFacts {
            rt_group_sched: Some(true),
            global_rt_runtime_us: Some(950_000),
            v1_cpu_cgroup: Some(("/user.slice".into(), Some(0))),
            ..Default::default()
        };
        assert_eq!(names(&v1), ["rt_group_no_budget"]);
        assert!(diagnose(&v1)[0].why.contains("/user.slice"));
        let root = RtPermissionFacts {
            v1_cpu_cgroup: Some(("/".into(), Some(950_000))),
            ..v1.clone()
        };
        assert!(names(&root).is_empty());
        let unthrottled = RtPermissionFacts {
            global_rt_runtime_us: Some(-1),
            ..v1.clone()
        };
        assert!(names(&unthrottled).is_empty(), "budgets unchecked");
        let v2 = RtPermissionFacts {
            rt_group_sched: Some(true),
            v2_cpu_cgroup: Some("/system.slice/app.service".into()),
            ..Default::default()
        };
        assert_eq!(names(&v2), ["v2_cpu_controller"]);
        let v2_no_group = RtPermissionFacts {
            rt_group_sched: Some(false),
            ..v2
        };
        assert!(names(&v2_no_group).is_empty());
    }
}
