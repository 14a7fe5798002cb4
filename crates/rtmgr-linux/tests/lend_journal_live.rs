//! Issue 29 item 3 (root only): a balancer killed with SIGKILL while a guest
//! is lent leaves the lend in the partition journal, and `partition reset`
//! gives the guest back its affinity, cpuset and policy (ARTiS §2.1's lend
//! undone as docs/architecture.md's journal rule asks). The lend is made by
//! the mover in a child process (this test binary run again), which then
//! kills itself with SIGKILL: the `kill -9` of `rtmgr balance`.

mod common;

use common::Lab;
use rtmgr_core::class::TaskClass;
use rtmgr_core::CpuSet;
use rtmgr_linux::balance::Mover;
use rtmgr_linux::sched::Policy;
use rtmgr_linux::{partition, tasks, Host};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command};

const CHILD: &str = "RTMGR_TEST_LEND_CHILD";

/// A `sleep` to lend, killed when dropped (whatever the test did).
struct Sleeper(Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The child's part (a no-op unless the test below runs it): lend the task
/// `pid` the RT CPU with the mover of the applied partition, then SIGKILL.
#[test]
fn lend_then_die_child() {
    let Ok(args) = std::env::var(CHILD) else {
        return;
    };
    let v: Vec<&str> = args.split(' ').collect();
    let (journal, pid, cpu): (PathBuf, u32, u32) =
        (v[0].into(), v[1].parse().unwrap(), v[2].parse().unwrap());
    let host = Host::real();
    let applied = partition::current(&host, &journal).unwrap().unwrap();
    let start = tasks::info(&host, pid, pid).unwrap().start_time;
    let mut mover = Mover::new(&host, &applied).unwrap();
    mover.to_rt(pid, cpu, start, TaskClass::Linux).unwrap();
    rtmgr_sys::process::kill_self();
    unreachable!("SIGKILL");
}

#[test]
fn reset_gives_back_what_a_killed_balancer_lent() {
    let host = Host::real();
    let sleeper = Sleeper(Command::new("sleep").arg("60").spawn().unwrap());
    let pid = sleeper.0.id();
    let (aff0, pol0) = (
        host.get_affinity(pid).unwrap(),
        host.get_policy(pid).unwrap(),
    );
    let Some(lab) = Lab::start() else {
        return;
    };
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "lend_then_die_child", "--nocapture"])
        .env(
            CHILD,
            format!("{} {pid} {}", lab.applied.journal.display(), lab.rt_cpu),
        )
        .status()
        .unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "the child did not die by SIGKILL: {status}"
    );
    // The lend outlived the balancer ...
    assert_eq!(host.get_affinity(pid).unwrap(), CpuSet::single(lab.rt_cpu));
    assert_eq!(host.get_policy(pid).unwrap(), Policy::Idle);
    // ... and `partition reset` gives it back.
    lab.finish();
    assert_eq!(host.get_policy(pid).unwrap(), pol0);
    assert_eq!(host.get_affinity(pid).unwrap(), aff0);
    drop(sleeper);
}
