//! `rtmgr run`: the ARTiS helper program (ARTiS §2.4). Runs an unmodified
//! program, or reclassifies a running one (`--pid`), as an RT0, RT1+ or Linux
//! task: SCHED_FIFO priority, CPU binding, cpuset, and `--mlock` through an
//! LD_PRELOAD library (McKenney §2.1: mlockall).

use super::{bad_input, host, require_root, Outcome};
use anyhow::Context;
use rtmgr_core::class::{place, PartitionView, TaskClass};
use rtmgr_core::CpuSet;
use rtmgr_linux::classify;
use rtmgr_linux::journal::DEFAULT_JOURNAL;
use rtmgr_linux::launch::{self, Launch};
use rtmgr_linux::partition::{self, Applied, Role};
use rtmgr_linux::preload::{self, MlockPreload};
use rtmgr_linux::sched::Policy;
use rtmgr_linux::{cpus, Host};
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(trailing_var_arg = true)]
pub struct RunArgs {
    /// rt0 (SCHED_FIFO 99, one RT CPU), rt1[:PRIO] (SCHED_FIFO 1..98, default 50) or linux (NRT CPUs).
    #[arg(long)]
    pub class: String,
    /// The CPU to bind to (required for rt0).
    #[arg(long)]
    pub cpu: Option<u32>,
    /// Allow a second RT0 task on the same CPU (its schedulability is then yours to check).
    #[arg(long)]
    pub share: bool,
    /// Lock all the program's memory (mlockall through an LD_PRELOAD library).
    #[arg(long)]
    pub mlock: bool,
    /// Reclassify this running process (all its threads) instead of starting one.
    #[arg(long, conflicts_with = "command")]
    pub pid: Option<u32>,
    /// The partition journal (where the RT and NRT CPUs are read from).
    #[arg(long, default_value = DEFAULT_JOURNAL, value_name = "PATH")]
    pub journal: PathBuf,
    /// The program and its arguments, after `--`.
    #[arg(value_name = "CMD", required_unless_present = "pid")]
    pub command: Vec<String>,
}

pub fn run(a: RunArgs) -> anyhow::Result<Outcome> {
    let host = host()?;
    let class: TaskClass = match a.class.parse() {
        Ok(c) => c,
        Err(e) => return bad_input(e.to_string()),
    };
    if a.mlock && a.pid.is_some() {
        return bad_input("--mlock cannot lock a running process's memory (mlockall acts on the caller only); start it with `rtmgr run --mlock -- CMD`");
    }
    let online = cpus::online(&host).context("reading online CPUs")?;
    let applied = partition::current(&host, &a.journal)?;
    if let Some(p) = &applied {
        if !p.complete {
            return bad_input("the partition is incomplete (an apply was interrupted): run `rtmgr partition reset`");
        }
    }
    let view = applied.as_ref().map(|p| PartitionView {
        rt: p.plan.rt.clone(),
        nrt: p.plan.nrt.clone(),
    });
    let busy = match (class, a.cpu) {
        (TaskClass::Rt0, Some(cpu)) => classify::rt0_tasks_on(&host, cpu, a.pid),
        _ => Vec::new(),
    };
    let cpus = match place(class, a.cpu, a.share, &online, view.as_ref(), &busy) {
        Ok(c) => c,
        Err(e) => return bad_input(e.to_string()),
    };
    let policy = match class.fifo_priority() {
        Some(priority) => Policy::Fifo { priority },
        None => Policy::Other { nice: 0 },
    };
    if class.fifo_priority().is_some() {
        require_root(&host, "a SCHED_FIFO class")?;
    }
    match a.pid {
        Some(pid) => reclassify(&host, applied.as_ref(), pid, &cpus, policy),
        None => start(&host, applied.as_ref(), &a, &cpus, policy),
    }
}

fn start(
    host: &Host,
    applied: Option<&Applied>,
    a: &RunArgs,
    cpus: &CpuSet,
    policy: Policy,
) -> anyhow::Result<Outcome> {
    let program = a.command[0].clone();
    let resolved = if program.contains('/') {
        Some(PathBuf::from(&program))
    } else {
        rtmgr_lab::measure::which(&program)
    };
    let mut env = Vec::new();
    let preload = if a.mlock {
        if let Some(path) = &resolved {
            if preload::is_static_elf(path).unwrap_or(None) == Some(true) {
                eprintln!(
                    "rtmgr: warning: {} is statically linked: LD_PRELOAD does not apply, its memory will NOT be locked (it must call mlockall itself)",
                    path.display()
                );
            }
        }
        let p = MlockPreload::create().context("creating the mlock preload library")?;
        env.push((
            "LD_PRELOAD".to_string(),
            p.ld_preload(std::env::var("LD_PRELOAD").ok().as_deref()),
        ));
        Some(p)
    } else {
        None
    };
    let cgroup_file = applied.and_then(|ap| partition::membership_file(ap, cpus));
    let launch = Launch {
        program: program.clone(),
        args: a.command[1..].to_vec(),
        cpus: cpus.clone(),
        policy,
        cgroup_file: cgroup_file.map(|f| host.path(f)),
        env,
    };
    let mut child = match launch::spawn(&launch) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return bad_input(format!("{program}: command not found"))
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("starting {program} as {} on CPUs {cpus}", a.class))
        }
    };
    if let Some(ap) = applied {
        if partition::role_of(ap, cpus) == Some(Role::Rt) {
            // Journal it so `partition reset` returns it to where rtmgr runs.
            let _ = partition::record_entered(host, ap, child.id(), std::process::id());
        }
    }
    let status = launch::wait_forwarding(&mut child).context("waiting for the program")?;
    drop(preload);
    Ok(Outcome::Code(launch::exit_like(status)))
}

fn reclassify(
    host: &Host,
    applied: Option<&Applied>,
    pid: u32,
    cpus: &CpuSet,
    policy: Policy,
) -> anyhow::Result<Outcome> {
    let done = match classify::reclassify(host, applied, pid, cpus, policy) {
        Ok(n) => n,
        Err(e) if e.is_input() => return bad_input(e.to_string()),
        Err(e) => return Err(e.into()),
    };
    println!("process {pid}: {done} thread(s) now {policy:?} on CPUs {cpus}");
    Ok(Outcome::Ok)
}
