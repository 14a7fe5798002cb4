//! Helpers shared by the RT-FIFO multi-process test and benchmark: run this
//! same binary as a child in a given role, pin threads, and run a thread at
//! SCHED_FIFO with the previous policy restored on drop (also on panic).
#![allow(dead_code, unused_imports)]

pub use rtmgr_sys::process::is_root;
pub use rtmgr_sys::sched::online_cpus;
use rtmgr_sys::sched::{self, pin_to, Policy};
use std::process::{Child, Command, Stdio};

/// Environment variable carrying a child's role.
pub const ROLE_ENV: &str = "RTMGR_FIFO_CHILD_ROLE";

/// Pin the calling thread to `cpu` (modulo the CPU count).
pub fn pin(cpu: u32) {
    let cpu = cpu % online_cpus();
    pin_to(cpu).expect("sched_setaffinity");
}

/// Pin the calling thread to `cpu` (modulo the CPU count) if the process's
/// cpuset allows it; false if not (e.g. a partition confines us to fewer CPUs).
pub fn try_pin(cpu: u32) -> bool {
    let cpu = cpu % online_cpus();
    pin_to(cpu).is_ok()
}

/// The calling thread runs at SCHED_FIFO `priority` while this lives.
pub struct FifoPolicy {
    prev: Policy,
}

impl FifoPolicy {
    pub fn enter(priority: u8) -> std::io::Result<Self> {
        let prev = sched::get_policy(0)?;
        sched::set_policy(0, Policy::Fifo { priority })?;
        Ok(FifoPolicy { prev })
    }
}

impl Drop for FifoPolicy {
    fn drop(&mut self) {
        let _ = sched::set_policy(0, self.prev);
    }
}

/// Start this test binary again, running only `test_name`, with `role` and
/// extra variables in its environment; stdout is piped.
pub fn spawn_child(test_name: &str, role: &str, env: &[(&str, String)]) -> Child {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, role)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn child")
}

/// Kills and reaps the child if the test fails before it does.
pub struct ChildGuard(pub Option<Child>);

impl ChildGuard {
    /// Wait for the child and return its stdout; panics if it failed.
    pub fn finish(&mut self) -> String {
        let child = self.0.take().expect("child already finished");
        let out = child.wait_with_output().expect("wait child");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "child failed ({}):\n{text}",
            out.status
        );
        text
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The JSON object a child printed on its `RESULT ` line.
pub fn child_result(stdout: &str) -> serde_json::Value {
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no RESULT line in child output:\n{stdout}"));
    serde_json::from_str(line).expect("child RESULT is JSON")
}
