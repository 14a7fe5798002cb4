//! What the daemon's live tests share: the machine lock, a private state
//! directory (socket, journals), a daemon started from the binary with
//! RTMGR_LOCK_HELD, clients as child processes (`rtmgr reserve -- CMD`), and
//! the machine snapshot every test compares at its end.
#![allow(dead_code)]

use rtmgr_linux::lock::{MachineLock, DEFAULT_LOCK_PATH};
use rtmgr_linux::snapshot::{self, MachineState};
use rtmgr_linux::{cpus, Host};
use rtmgr_rt::client::Client;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_rtmgr");

/// One test's hold on the machine: the lock, a private directory, the state before.
pub struct Live {
    _lock: MachineLock,
    pub dir: tempfile::TempDir,
    pub before: MachineState,
    pub rt_cpu: u32,
}

impl Live {
    /// None (with the reason printed) when the test cannot run here.
    pub fn new() -> Option<Self> {
        if !rtmgr_linux::sched::is_root() {
            eprintln!("skip: the daemon needs root");
            return None;
        }
        let host = Host::real();
        if rtmgr_linux::partition::layout(&host).is_err() {
            eprintln!("skip: no cpuset controller on this machine");
            return None;
        }
        let online = cpus::online(&host).unwrap_or_default();
        if online.len() < 2 {
            eprintln!("skip: needs 2 CPUs");
            return None;
        }
        let lock = MachineLock::acquire(Path::new(DEFAULT_LOCK_PATH)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        // Anyone may enter (unprivileged clients reach the socket in it).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Some(Live {
            _lock: lock,
            before: snapshot::capture(&host),
            rt_cpu: online.iter().last().unwrap(),
            dir,
        })
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn socket(&self) -> PathBuf {
        self.state().join("rtmgr.sock")
    }

    pub fn journal(&self) -> PathBuf {
        self.state().join("journal.jsonl")
    }

    /// What the daemon started by `start` logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    /// Write the daemon's config: RT CPU = the last CPU, private state, no
    /// balancer unless `extra` says so, plus `extra` TOML.
    pub fn config(&self, extra: &str) -> PathBuf {
        let p = self.dir.path().join("rtmgr.toml");
        let mut text = format!(
            "rt_cpus = \"{}\"\n[serve]\nstate_dir = \"{}\"\nreconcile_ms = 200\n",
            self.rt_cpu,
            self.state().display()
        );
        if !extra.contains("balancer") {
            text.push_str("balancer = false\n");
        }
        text.push_str(extra);
        std::fs::write(&p, text).unwrap();
        p
    }

    pub fn start(&self, extra: &str) -> Daemon {
        let cfg = self.config(extra);
        Daemon::start(&cfg, &self.socket(), self.dir.path())
    }

    pub fn client(&self) -> Client {
        Client::connect_to(&self.socket()).unwrap()
    }

    /// `rtmgr reserve ARGS -- CMD` as a child (its own process: the client).
    /// It dies with the thread that spawned it (a failed test leaves none).
    pub fn reserve_child(&self, args: &[&str], cmd: &[&str]) -> Child {
        let mut c = Command::new(BIN);
        c.arg("reserve")
            .args(args)
            .arg("--socket")
            .arg(self.socket())
            .arg("--")
            .args(cmd)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        rtmgr_sys::child::ChildSetup::new()
            .kill_with_parent()
            .install(&mut c);
        c.spawn().unwrap()
    }

    /// The machine must be as before the test (partition, IRQs, every task).
    pub fn assert_restored(&self, when: &str) {
        let diff = self.before.diff(&snapshot::capture(&Host::real()));
        assert!(diff.is_empty(), "{when}: machine not restored: {diff:#?}");
        // A tracer instance of an rtmgr that is gone (a daemon killed with
        // -9 leaves its balancer's; the next daemon takes it away).
        if let Ok(names) = rtmgr_linux::trace::list_instances() {
            let stale: Vec<&String> = names
                .iter()
                .filter(|n| {
                    let pid = n.split('-').nth(1).and_then(|p| p.parse::<i32>().ok());
                    pid.is_none_or(rtmgr_sys::process::is_gone)
                })
                .collect();
            assert!(stale.is_empty(), "{when}: tracer instances left: {stale:?}");
        }
        assert!(
            !self.state().exists(),
            "{when}: state directory left: {:?}",
            std::fs::read_dir(self.state()).map(|d| d.count())
        );
    }

    /// `rtmgr partition reset` on the private journal (after a kill -9).
    pub fn partition_reset(&self) -> std::process::Output {
        Command::new(BIN)
            .args(["partition", "reset", "--journal"])
            .arg(self.journal())
            .env("RTMGR_LOCK_HELD", "1")
            .output()
            .unwrap()
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // Whatever a failed test left: give the machine back.
        if self.journal().exists() || self.state().join("grants.jsonl").exists() {
            let o = self.partition_reset();
            eprintln!("cleanup reset: {}", String::from_utf8_lossy(&o.stderr));
        }
    }
}

/// Child processes killed when the test ends, also when it fails.
#[derive(Default)]
pub struct Children(pub Vec<Child>);

impl Children {
    pub fn add(&mut self, c: Child) -> u32 {
        let id = c.id();
        self.0.push(c);
        id
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A daemon process. A test that fails or panics stops it on the way out
/// (SIGTERM, then SIGKILL if it does not end; `Live` then resets what it
/// left), and a test process killed outright makes the kernel send it SIGTERM.
pub struct Daemon {
    child: Option<Child>,
}

impl Daemon {
    pub fn start(cfg: &Path, socket: &Path, dir: &Path) -> Daemon {
        Daemon::start_env(cfg, socket, dir, &[])
    }

    /// `start` with more environment variables (e.g. NOTIFY_SOCKET).
    pub fn start_env(cfg: &Path, socket: &Path, dir: &Path, env: &[(&str, &Path)]) -> Daemon {
        let log = std::fs::File::create(dir.join("serve.log")).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg("--config")
            .arg(cfg)
            .env("RTMGR_LOCK_HELD", "1")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log);
        // A test killed outright (timeout, SIGKILL) still stops its daemon.
        rtmgr_sys::child::ChildSetup::new()
            .term_with_parent()
            .install(&mut cmd);
        let child = cmd.spawn().unwrap();
        let mut d = Daemon { child: Some(child) };
        let t0 = Instant::now();
        while Client::connect_to(socket).is_err() {
            if let Ok(Some(st)) = d.child.as_mut().unwrap().try_wait() {
                panic!(
                    "daemon exited at start ({st}): {}",
                    std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
                );
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "daemon did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// SIGTERM; the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().unwrap();
        rtmgr_sys::process::kill(c.id() as i32, libc::SIGTERM).unwrap();
        c.wait().unwrap()
    }

    pub fn kill9(mut self) {
        let mut c = self.child.take().unwrap();
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let _ = rtmgr_sys::process::kill(c.id() as i32, libc::SIGTERM);
        let t0 = Instant::now();
        while matches!(c.try_wait(), Ok(None)) {
            if t0.elapsed() > Duration::from_secs(20) {
                eprintln!("daemon {} ignored SIGTERM: SIGKILL", c.id());
                let _ = c.kill();
                let _ = c.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A thread's policy number (SCHED_OTHER 0, FIFO 1, DEADLINE 6).
pub fn policy_of(tid: u32) -> Option<u32> {
    rtmgr_sys::sched::get_attr(tid).ok().map(|a| a.policy)
}

/// A granted thread is at `policy`: at once, or, when the reply listed it
/// as pending (SCHED_FIFO 1 until it first runs on its RT CPU, or its own
/// policy while held; docs/protocol.md "When the policy takes effect"),
/// within 2 s (polling: the thread must run meanwhile).
pub fn assert_policy(tid: u32, policy: u32, pending: &[u32], at: &str) {
    if !pending.contains(&tid) {
        assert_eq!(policy_of(tid), Some(policy), "{at}");
        return;
    }
    let t0 = Instant::now();
    loop {
        // One read a look: read twice, the thread could leave the
        // placeholder for `policy` in between, and be found at `policy`
        // where a waiting policy was asked for.
        let now = policy_of(tid);
        if now == Some(policy) {
            return;
        }
        // At the placeholder, or held at its own policy (these threads'
        // is SCHED_OTHER) until its last server's 0-lag time.
        let waiting = [rtmgr_sys::sched::SCHED_FIFO, rtmgr_sys::sched::SCHED_OTHER];
        assert!(
            now.is_some_and(|p| waiting.contains(&p)) && t0.elapsed() < Duration::from_secs(2),
            "{at}: pending thread {tid} at policy {now:?}, not {policy} after {:?}",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The reservations the daemon lists.
pub fn listed(c: &mut Client) -> Vec<rtmgr_rt::client::ReservationInfo> {
    c.list().unwrap()
}

/// Wait until `f` holds (up to 5 s).
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(5), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A thread of this process that exits `after` from now: its handle and tid.
pub fn thread_exiting_after(after: Duration) -> (std::thread::JoinHandle<()>, u32) {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        tx.send(rtmgr_sys::sched::gettid()).unwrap();
        std::thread::sleep(after);
    });
    (h, rx.recv().unwrap())
}

/// `rtmgr reserve --pid PID --period 10ms --budget 1ms EXTRA…` as `uid`
/// (None: root): exit code and stderr.
pub fn reserve_pid(
    live: &Live,
    uid: Option<u32>,
    pid: u32,
    extra: &[&str],
) -> (Option<i32>, String) {
    let o = command_as(uid, BIN)
        .args(["reserve", "--socket"])
        .arg(live.socket())
        .args([
            "--pid",
            &pid.to_string(),
            "--period",
            "10ms",
            "--budget",
            "1ms",
        ])
        .args(extra)
        .output()
        .unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into())
}

/// `program` run as `uid` through setpriv (its groups cleared), or as
/// this process's user (None).
pub fn command_as(uid: Option<u32>, program: &str) -> Command {
    match uid {
        None => Command::new(program),
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={u}"))
                .arg(format!("--regid={u}"))
                .args(["--clear-groups", program]);
            c
        }
    }
}

/// The busy `sh` under a `timeout 20` (bounded whatever happens). The caller
/// kills and waits for the returned child.
#[allow(clippy::zombie_processes)]
pub fn busy() -> (Child, u32) {
    let mut child = Command::new("timeout")
        .args(["20", "sh", "-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let pid = child.id();
    let t0 = Instant::now();
    loop {
        let kids =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(k) = kids.split_whitespace().next() {
            return (child, k.parse().unwrap());
        }
        if t0.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("busy child did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// End the busy tasks (their `timeout` and the `sh` under it).
pub fn end_busy(children: Vec<Child>, tids: &[u32]) {
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    for t in tids {
        let _ = Command::new("kill")
            .args(["-KILL", &t.to_string()])
            .status();
    }
}

/// `GET /metrics` of a daemon's exporter at `addr`: the body of a 200 answer.
pub fn scrape(addr: std::net::SocketAddr) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: rtmgr\r\n\r\n")
        .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200 OK")
        .then(|| body.to_string())
}

/// The value of `series` (name and labels, as written) in a scrape.
pub fn scraped_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}
