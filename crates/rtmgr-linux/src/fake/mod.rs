//! A fake machine for tests: a temporary directory laid out like /proc, /sys
//! and a cgroup v1 or v2 tree, with tasks, IRQs and CPUs. `Host::fake` on it
//! emulates the kernel's side effects rtmgr depends on (host/fake.rs). Feature `fake`.
//! `knobs.rs` adds the files of the run-time partition knobs.

pub mod irqbalance;
mod knobs;

use crate::host::Host;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FakeCgroup {
    V1,
    /// v2 with the cpuset controller available at the root.
    V2,
    /// v2 without the cpuset controller, and no v1 cpuset: nowhere to partition.
    V2NoCpuset,
}

/// A fake task: (pid, comm, flags, affinity list).
#[derive(Debug, Clone)]
pub struct FakeTask {
    pub pid: u32,
    pub comm: String,
    pub kthread: bool,
    pub per_cpu: bool,
    pub affinity: String,
    pub cgroup: String,
}

pub struct FakeBuilder {
    ncpu: u32,
    smt: bool,
    cgroup: FakeCgroup,
    tasks: Vec<FakeTask>,
    irqs: Vec<(u32, &'static str)>,
    /// Kernel-managed IRQs: (irq, the CPU of its effective affinity, count there).
    managed: Vec<(u32, u32, u64)>,
    knob_files: knobs::KnobFiles,
}

pub struct FakeMachine {
    dir: tempfile::TempDir,
    pub cgroup: FakeCgroup,
}

impl FakeMachine {
    #[allow(clippy::new_ret_no_self)]
    pub fn new(ncpu: u32) -> FakeBuilder {
        FakeBuilder {
            ncpu,
            smt: false,
            cgroup: FakeCgroup::V1,
            tasks: Vec::new(),
            irqs: vec![(24, "ACPI:Ged"), (36, "virtio1-req.0"), (41, "virtio3-rx")],
            managed: Vec::new(),
            knob_files: knobs::KnobFiles::default(),
        }
    }

    pub fn host(&self) -> Host {
        Host::fake(self.dir.path())
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Where the cpuset hierarchy is mounted in this fake machine.
    pub fn cpuset_mount(&self) -> PathBuf {
        match self.cgroup {
            FakeCgroup::V1 => PathBuf::from("/sys/fs/cgroup/cpuset"),
            _ => PathBuf::from("/sys/fs/cgroup"),
        }
    }
}

impl FakeBuilder {
    pub fn smt_pairs(mut self) -> Self {
        self.smt = true;
        self
    }

    pub fn cgroup(mut self, c: FakeCgroup) -> Self {
        self.cgroup = c;
        self
    }

    pub fn task(mut self, pid: u32, comm: &str) -> Self {
        let all = format!("0-{}", self.ncpu - 1);
        self.tasks.push(FakeTask {
            pid,
            comm: comm.into(),
            kthread: false,
            per_cpu: false,
            affinity: all,
            cgroup: "/".into(),
        });
        self
    }

    /// Make an IRQ kernel-managed (writes to its affinity are refused), with
    /// its effective affinity on `cpu`, where it fired `count` times since boot.
    pub fn managed_irq(mut self, irq: u32, cpu: u32, count: u64) -> Self {
        self.managed.push((irq, cpu, count));
        self
    }

    /// Per-CPU cpuidle states POLL, C1 (2 µs) and C6 (170 µs).
    pub fn cpuidle(mut self) -> Self {
        self.knob_files.cpuidle = true;
        self
    }

    /// A cpufreq governor (powersave) on every CPU, performance available.
    pub fn cpufreq(mut self) -> Self {
        self.knob_files.cpufreq = true;
        self
    }

    /// A PREEMPT_DYNAMIC kernel's debugfs `sched/preempt` (mode voluntary);
    /// `writable = false` emulates a kernel that refuses it (EPERM).
    pub fn preempt_dynamic(mut self, writable: bool) -> Self {
        self.knob_files.preempt = Some(writable);
        self
    }

    /// Modify the last task added.
    pub fn with(mut self, f: impl FnOnce(&mut FakeTask)) -> Self {
        if let Some(t) = self.tasks.last_mut() {
            f(t);
        }
        self
    }

    /// A typical population: init, a shell, an unbound kthread, per-CPU kthreads.
    pub fn typical_tasks(self) -> Self {
        let n = self.ncpu;
        let mut b = self
            .task(1, "init")
            .with(|t| t.cgroup = "/init.scope".into())
            .task(300, "bash")
            .task(2, "kthreadd")
            .with(|t| t.kthread = true);
        for cpu in 0..n {
            b = b.task(10 + cpu, &format!("ksoftirqd/{cpu}")).with(|t| {
                t.kthread = true;
                t.per_cpu = true;
                t.affinity = cpu.to_string();
            });
        }
        b.task(400, "pinned-app")
            .with(|t| t.affinity = (n - 1).to_string())
    }

    pub fn build(self) -> FakeMachine {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = dir.path();
        let w = |p: &str, s: &str| {
            let path = r.join(p.trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, s).unwrap();
        };
        self.write_cpus(&w);
        self.write_irqs(&w);
        knobs::write(r, self.ncpu, &w, self.knob_files);
        let cgline = self.write_cgroups(r, &w);
        self.write_tasks(r, &w, cgline);
        FakeMachine {
            dir,
            cgroup: self.cgroup,
        }
    }

    /// The CPUs online, possible, isolated and their SMT siblings; the
    /// workqueue and default IRQ masks.
    fn write_cpus(&self, w: &dyn Fn(&str, &str)) {
        let all = format!("0-{}", self.ncpu - 1);
        w("/sys/devices/system/cpu/online", &format!("{all}\n"));
        w("/sys/devices/system/cpu/possible", &format!("{all}\n"));
        w("/sys/devices/system/cpu/isolated", "\n");
        w("/sys/devices/system/cpu/nohz_full", "(null)\n");
        for c in 0..self.ncpu {
            let sib = if self.smt {
                format!("{}-{}", c & !1, c | 1)
            } else {
                c.to_string()
            };
            w(
                &format!("/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list"),
                &format!("{sib}\n"),
            );
        }
        let mask = rtmgr_core::CpuSet::parse_list(&all).unwrap().to_mask(1);
        w(
            "/sys/devices/virtual/workqueue/cpumask",
            &format!("{mask}\n"),
        );
        w("/proc/irq/default_smp_affinity", &format!("{mask}\n"));
    }

    /// Each IRQ's affinity files (managed ones on their CPU) and /proc/interrupts.
    fn write_irqs(&self, w: &dyn Fn(&str, &str)) {
        let all = format!("0-{}", self.ncpu - 1);
        let mask = rtmgr_core::CpuSet::parse_list(&all).unwrap().to_mask(1);
        let mut interrupts = String::from("           ");
        for c in 0..self.ncpu {
            interrupts.push_str(&format!("CPU{c:<8}"));
        }
        interrupts.push('\n');
        for (n, name) in &self.irqs {
            w(&format!("/proc/irq/{n}/smp_affinity"), &format!("{mask}\n"));
            w(
                &format!("/proc/irq/{n}/smp_affinity_list"),
                &format!("{all}\n"),
            );
            let managed = self.managed.iter().find(|m| m.0 == *n);
            let counts: String = match managed {
                Some(&(_, cpu, count)) => {
                    w(
                        &format!("/proc/irq/{n}/{}", crate::host::FAKE_IRQ_MANAGED),
                        "",
                    );
                    w(
                        &format!("/proc/irq/{n}/effective_affinity_list"),
                        &format!("{cpu}\n"),
                    );
                    (0..self.ncpu)
                        .map(|c| format!(" {}", if c == cpu { count } else { 0 }))
                        .collect()
                }
                None => {
                    w(&format!("/proc/irq/{n}/effective_affinity_list"), "0\n");
                    " 5".repeat(self.ncpu as usize)
                }
            };
            interrupts.push_str(&format!("{n:>3}: {counts}  PCI-MSIX {name}\n"));
        }
        let loc: String = (0..self.ncpu).map(|_| " 1000").collect();
        interrupts.push_str(&format!("LOC: {loc}  Local timer interrupts\n"));
        w("/proc/interrupts", &interrupts);
    }

    /// The cgroup mounts and the root cgroup's files; how a task's
    /// /proc/PID/cgroup line reads.
    fn write_cgroups(&self, r: &Path, w: &dyn Fn(&str, &str)) -> fn(&str) -> String {
        let all = format!("0-{}", self.ncpu - 1);
        let (mountinfo, cgline): (String, fn(&str) -> String) = match self.cgroup {
            FakeCgroup::V1 => (
                "30 25 0:26 / /sys/fs/cgroup/cpuset rw,relatime shared:9 - cgroup cgroup rw,cpuset\n\
                 35 25 0:31 / /sys/fs/cgroup/unified rw,relatime shared:14 - cgroup2 cgroup2 rw\n"
                    .into(),
                |p| format!("5:cpuset:{p}\n0::/\n"),
            ),
            FakeCgroup::V2 | FakeCgroup::V2NoCpuset => (
                "35 25 0:31 / /sys/fs/cgroup rw,relatime shared:14 - cgroup2 cgroup2 rw\n".into(),
                |p| format!("0::{p}\n"),
            ),
        };
        w("/proc/self/mountinfo", &mountinfo);
        match self.cgroup {
            FakeCgroup::V1 => {
                let m = "/sys/fs/cgroup/cpuset";
                w(&format!("{m}/cpuset.cpus"), &format!("{all}\n"));
                w(&format!("{m}/cpuset.mems"), "0\n");
                w(&format!("{m}/cpuset.sched_load_balance"), "1\n");
                w(&format!("{m}/tasks"), "");
                w(&format!("{m}/cgroup.procs"), "");
                w("/sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n");
            }
            FakeCgroup::V2 | FakeCgroup::V2NoCpuset => {
                let ctl = if self.cgroup == FakeCgroup::V2 {
                    "cpuset cpu io memory pids\n"
                } else {
                    "cpu io memory pids\n"
                };
                w("/sys/fs/cgroup/cgroup.controllers", ctl);
                w("/sys/fs/cgroup/cgroup.subtree_control", "cpu memory\n");
                w("/sys/fs/cgroup/cpuset.cpus.effective", &format!("{all}\n"));
                w("/sys/fs/cgroup/cpuset.mems.effective", "0\n");
                w("/sys/fs/cgroup/cgroup.procs", "");
                w("/sys/fs/cgroup/init.scope/cgroup.procs", "");
            }
        }
        if self.cgroup == FakeCgroup::V1 {
            std::fs::create_dir_all(r.join("sys/fs/cgroup/cpuset/init.scope")).unwrap();
        }
        cgline
    }

    /// Each task's stat, status, cgroup and task directory.
    fn write_tasks(&self, r: &Path, w: &dyn Fn(&str, &str), cgline: fn(&str) -> String) {
        for t in &self.tasks {
            let flags: u64 = (if t.kthread { 0x0020_0000 } else { 0 })
                | (if t.per_cpu { 0x0400_0000 } else { 0 });
            let pid = t.pid;
            w(
                &format!("/proc/{pid}/stat"),
                &format!("{pid} ({}) S 1 {pid} {pid} 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n", t.comm, 1000 + pid),
            );
            let marker = if t.per_cpu {
                "rtmgr_fake_no_setaffinity:\t1\n"
            } else {
                ""
            };
            w(
                &format!("/proc/{pid}/status"),
                &format!("Name:\t{}\nPid:\t{pid}\n{marker}Cpus_allowed_list:\t{}\nvoluntary_ctxt_switches:\t3\nnonvoluntary_ctxt_switches:\t1\n", t.comm, t.affinity),
            );
            w(&format!("/proc/{pid}/cgroup"), &cgline(&t.cgroup));
            std::fs::create_dir_all(r.join(format!("proc/{pid}/task/{pid}"))).unwrap();
        }
    }
}
