//! `rtmgr serve --rtkit` end to end (root): a private dbus-daemon with the
//! packaged bus policy, real clients (`gdbus call`, `busctl`) as root and as
//! the unprivileged user nobody; grants become SCHED_FIFO with
//! SCHED_RESET_ON_FORK on the RT CPU, rtkit's refusals, admission, nice
//! levels, ResetKnown/ResetAll, a client's exit, SIGTERM, Exit and kill -9;
//! and, where PipeWire is installed, a real audio server's module-rt.

mod serve_common;

use rtmgr_sys::sched::{SCHED_FIFO, SCHED_FLAG_RESET_ON_FORK, SCHED_OTHER};
use serve_common::*;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;
const DEST: &str = "org.freedesktop.RealtimeKit1";
const OBJ: &str = "/org/freedesktop/RealtimeKit1";

/// A private bus with rtkit's policy (the file rtmgr ships), stopped at the end.
struct Bus {
    child: Child,
    address: String,
}

impl Bus {
    fn start(dir: &Path) -> Option<Bus> {
        if Command::new("dbus-daemon")
            .arg("--version")
            .output()
            .is_err()
            || Command::new("gdbus").arg("help").output().is_err()
        {
            eprintln!("skip: dbus-daemon or gdbus is not installed");
            return None;
        }
        let policy = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../packaging/dbus/org.freedesktop.RealtimeKit1.conf")
            .canonicalize()
            .unwrap();
        let sock = dir.join("bus");
        let conf = dir.join("bus.conf");
        std::fs::write(
            &conf,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
  </policy>
  <include>{}</include>
</busconfig>
"#,
                sock.display(),
                policy.display()
            ),
        )
        .unwrap();
        let mut cmd = Command::new("dbus-daemon");
        cmd.arg(format!("--config-file={}", conf.display()))
            .arg("--nofork")
            .arg("--nopidfile")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        rtmgr_sys::child::ChildSetup::new()
            .kill_with_parent()
            .install(&mut cmd);
        let child = cmd.spawn().unwrap();
        let t0 = Instant::now();
        while !sock.exists() {
            assert!(t0.elapsed() < Duration::from_secs(10), "no bus socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        // nobody reaches the socket (the test's directory is 0755).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
        Some(Bus {
            child,
            address: format!("unix:path={}", sock.display()),
        })
    }

    /// `gdbus call` of an rtkit method as `uid` (with RLIMIT_RTTIME `rttime`
    /// µs when given): Ok(stdout) or Err(stderr, which names the D-Bus error).
    fn call(
        &self,
        uid: u32,
        rttime: Option<u64>,
        method: &str,
        args: &[String],
    ) -> Result<String, String> {
        let mut c = as_user(uid, rttime, "gdbus");
        c.args([
            "call",
            "--address",
            &self.address,
            "--dest",
            DEST,
            "--object-path",
            OBJ,
        ])
        .arg("--method")
        .arg(format!("{DEST}.{method}"))
        .args(args);
        result(c.output().unwrap())
    }

    /// MakeThreadRealtimeWithPID as nobody.
    fn rt(&self, pid: u32, tid: u32, prio: u32) -> Result<String, String> {
        let mut a = u64s(pid, tid);
        a.push(format!("uint32 {prio}"));
        self.call(NOBODY, None, "MakeThreadRealtimeWithPID", &a)
    }

    /// MakeThreadHighPriorityWithPID as nobody.
    fn nice(&self, pid: u32, tid: u32, nice: i32) -> Result<String, String> {
        let mut a = u64s(pid, tid);
        a.push(format!("int32 {nice}"));
        self.call(NOBODY, None, "MakeThreadHighPriorityWithPID", &a)
    }

    fn property(&self, name: &str) -> String {
        let o = Command::new("busctl")
            .arg(format!("--address={}", self.address))
            .args(["get-property", DEST, OBJ, DEST, name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    fn wait_owned(&self) {
        let t0 = Instant::now();
        while self.property("MaxRealtimePriority").is_empty() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "rtkit name not owned"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn result(o: Output) -> Result<String, String> {
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}

/// A command run as `uid` (setpriv), under `prlimit --rttime` when asked.
fn as_user(uid: u32, rttime: Option<u64>, prog: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups");
    if let Some(us) = rttime {
        c.arg("prlimit").arg(format!("--rttime={us}"));
    }
    c.arg(prog);
    c
}

/// A sleeping process of `uid`: the thread rtkit is asked about.
fn sleeper(kids: &mut Children, uid: u32, rttime: Option<u64>) -> u32 {
    let mut c = as_user(uid, rttime, "sleep");
    c.arg("60").stdout(Stdio::null());
    rtmgr_sys::child::ChildSetup::new()
        .kill_with_parent()
        .install(&mut c);
    let pid = kids.add(c.spawn().unwrap());
    // setpriv and prlimit exec: wait until the pid is sleep itself.
    eventually("sleeper started", || {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|s| s.trim() == "sleep")
    });
    pid
}

fn u64s(pid: u32, tid: u32) -> Vec<String> {
    vec![format!("uint64 {pid}"), format!("uint64 {tid}")]
}

/// A refusal names its D-Bus error and says why.
fn refused(e: &str, error: &str, why: &str) {
    assert!(e.contains(error) && e.contains(why), "{e}");
}

fn attr(tid: u32) -> rtmgr_sys::sched::SchedAttr {
    rtmgr_sys::sched::get_attr(tid).unwrap()
}

/// The CPUs a thread may run on.
fn affinity(tid: u32) -> Vec<u32> {
    rtmgr_sys::sched::get_affinity(tid)
        .unwrap()
        .cpus()
        .collect()
}

fn rtkit_config(bus: &Bus, extra: &str) -> String {
    format!(
        "[rtkit]\nenabled = true\nbus = \"{}\"\n{extra}",
        bus.address
    )
}

fn setup() -> Option<(Live, Bus)> {
    let live = Live::new()?;
    let bus = Bus::start(live.dir.path())?;
    Some((live, bus))
}

#[test]
fn rtkit_grants_refusals_resets_and_stop() {
    let Some((live, bus)) = setup() else { return };
    // Each thread counts as 5 ms every 10 ms: the second one does not fit (cap 0.9).
    let d = live.start(&rtkit_config(&bus, "budget_us = 5000\n"));
    bus.wait_owned();
    assert_eq!(bus.property("MaxRealtimePriority"), "i 20");
    assert_eq!(bus.property("MinNiceLevel"), "i -15");
    assert_eq!(bus.property("RTTimeUSecMax"), "x 200000");
    let mut kids = Children::default();
    let p = sleeper(&mut kids, NOBODY, Some(100_000));

    // Refusals first: nothing changes.
    let e = bus.rt(p, p, 21).unwrap_err();
    refused(
        &e,
        "org.freedesktop.DBus.Error.AccessDenied",
        "MaxRealtimePriority 20",
    );
    let me = std::process::id();
    let e = bus.rt(p, me, 10).unwrap_err();
    refused(&e, "AccessDenied", "not a thread of process");
    let e = bus.rt(me, me, 10).unwrap_err();
    refused(&e, "AccessDenied", "belongs to uid 0");
    let unlimited = sleeper(&mut kids, NOBODY, None);
    let e = bus.rt(unlimited, 0, 10).unwrap_err();
    refused(&e, "AccessDenied", "RLIMIT_RTTIME is not set");
    assert_eq!(attr(p).policy, SCHED_OTHER);

    // The grant: SCHED_FIFO, reset-on-fork, on the RT CPU, listed as rtkit's.
    bus.rt(p, 0, 10).unwrap();
    let a = attr(p);
    assert_eq!((a.policy, a.priority), (SCHED_FIFO, 10));
    assert_ne!(a.flags & SCHED_FLAG_RESET_ON_FORK, 0, "SCHED_RESET_ON_FORK");
    assert_eq!(affinity(p), vec![live.rt_cpu]);
    let mut c = live.client();
    let rs = listed(&mut c);
    assert_eq!(rs.len(), 1);
    assert_eq!((rs[0].pid, rs[0].name.as_deref()), (p, Some("rtkit")));

    // Capacity: a second thread does not fit on the RT CPU.
    let p2 = sleeper(&mut kids, NOBODY, Some(100_000));
    let e = bus.rt(p2, 0, 10).unwrap_err();
    refused(
        &e,
        "org.freedesktop.DBus.Error.Failed",
        "no RT CPU has room",
    );
    assert_eq!(attr(p2).policy, SCHED_OTHER);

    // Nice levels: at most MinNiceLevel, SCHED_OTHER with reset-on-fork.
    let e = bus.nice(p2, 0, -16).unwrap_err();
    refused(&e, "AccessDenied", "MinNiceLevel");
    bus.nice(p2, 0, -10).unwrap();
    let a = attr(p2);
    assert_eq!((a.policy, a.nice), (SCHED_OTHER, -10));
    assert_ne!(a.flags & SCHED_FLAG_RESET_ON_FORK, 0);

    // ResetKnown: only root (the bus policy refuses nobody), then both go back.
    let e = bus.call(NOBODY, None, "ResetKnown", &[]).unwrap_err();
    assert!(e.contains("AccessDenied"), "{e}");
    bus.call(0, None, "ResetKnown", &[]).unwrap();
    assert_eq!((attr(p).policy, attr(p2).nice), (SCHED_OTHER, 0));
    assert!(listed(&mut c).is_empty());

    // The client's own thread (MakeThreadRealtime: the sender's process);
    // its exit gives the grant back.
    let out = Command::new("prlimit")
        .arg("--rttime=100000")
        .args([
            "busctl",
            &format!("--address={}", bus.address),
            "call",
            DEST,
            OBJ,
            DEST,
        ])
        .args(["MakeThreadRealtime", "tu", "0", "5"])
        .output()
        .unwrap();
    result(out).unwrap();
    eventually("the exited client's grant is gone", || {
        listed(&mut c).is_empty()
    });

    // ResetAll: rtkit's grants and other users' unknown RT threads.
    bus.rt(p, 0, 10).unwrap();
    let chrt = Command::new("chrt")
        .args(["-f", "-p", "3", &p2.to_string()])
        .status()
        .unwrap();
    assert!(chrt.success());
    assert_eq!(attr(p2).policy, SCHED_FIFO);
    bus.call(0, None, "ResetAll", &[]).unwrap();
    assert_eq!(
        (attr(p).policy, attr(p2).policy),
        (SCHED_OTHER, SCHED_OTHER)
    );

    // SIGTERM gives back what is held (an RT grant, a nice level).
    bus.rt(p, 0, 10).unwrap();
    bus.nice(p2, 0, -5).unwrap();
    assert_eq!(attr(p2).nice, -5);
    let st = d.stop();
    assert!(st.success(), "daemon exit {st}");
    assert_eq!(attr(p).policy, SCHED_OTHER);
    assert_eq!(attr(p2).nice, 0);
    drop(kids);
    drop(bus);
    live.assert_restored("after SIGTERM");
}

#[test]
fn rtkit_exit_and_kill9_recovery() {
    let Some((live, bus)) = setup() else { return };
    let mut kids = Children::default();
    let p = sleeper(&mut kids, NOBODY, Some(200_000));
    // kill -9: the journalled grant is given back by `partition reset`.
    let d = live.start(&rtkit_config(&bus, ""));
    bus.wait_owned();
    bus.rt(p, 0, 20).unwrap();
    assert_eq!(attr(p).policy, SCHED_FIFO);
    d.kill9();
    let o = live.partition_reset();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(attr(p).policy, SCHED_OTHER);
    assert_ne!(affinity(p), vec![live.rt_cpu]);
    // Exit (root only) stops the daemon, which gives everything back.
    let d = live.start(&rtkit_config(&bus, ""));
    bus.wait_owned();
    bus.rt(p, 0, 20).unwrap();
    let e = bus.call(NOBODY, None, "Exit", &[]).unwrap_err();
    assert!(e.contains("AccessDenied"), "{e}");
    bus.call(0, None, "Exit", &[]).unwrap();
    eventually("Exit stops the daemon", || attr(p).policy == SCHED_OTHER);
    let st = d.stop();
    assert!(st.success(), "daemon exit {st}");
    drop(kids);
    drop(bus);
    live.assert_restored("after Exit");
}

/// PipeWire's module-rt with its default priority (88, clamped by the client
/// to MaxRealtimePriority) as nobody on the private bus: its main thread gets
/// a nice level, its data loop an RT1+ grant on the RT CPU, given back when
/// PipeWire exits. Skips where PipeWire is not installed.
#[test]
fn pipewire_module_rt_gets_real_time_through_rtmgr() {
    let module = "/usr/lib/x86_64-linux-gnu/pipewire-0.3/libpipewire-module-rt.so";
    if Command::new("pipewire").arg("--version").output().is_err() || !Path::new(module).exists() {
        eprintln!("skip: PipeWire (pipewire-bin, libpipewire-0.3-modules) is not installed");
        return;
    }
    let Some((live, bus)) = setup() else { return };
    let d = live.start(&rtkit_config(&bus, ""));
    bus.wait_owned();
    let dir = live.dir.path();
    let conf = dir.join("pipewire.conf");
    std::fs::write(
        &conf,
        "context.spa-libs = { support.* = support/libspa-support }\n\
         context.modules = [\n\
           { name = libpipewire-module-rt args = { nice.level = -11 rlimits.enabled = false rtportal.enabled = false rtkit.enabled = true } }\n\
           { name = libpipewire-module-protocol-native }\n\
         ]\n",
    )
    .unwrap();
    let xdg = dir.join("xdg");
    std::fs::create_dir(&xdg).unwrap();
    std::os::unix::fs::chown(&xdg, Some(NOBODY), Some(NOBODY)).unwrap();
    let mut c = as_user(NOBODY, None, "env");
    c.arg("-i")
        .arg(format!("XDG_RUNTIME_DIR={}", xdg.display()))
        .arg(format!("HOME={}", xdg.display()))
        .arg(format!("DBUS_SYSTEM_BUS_ADDRESS={}", bus.address))
        .arg("pipewire")
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    rtmgr_sys::child::ChildSetup::new()
        .kill_with_parent()
        .install(&mut c);
    let mut kids = Children::default();
    let pw = kids.add(c.spawn().unwrap());
    let mut client = live.client();
    eventually("PipeWire's data loop granted", || {
        listed(&mut client).len() == 1
    });
    let r = listed(&mut client).remove(0);
    assert_eq!((r.pid, r.name.as_deref()), (pw, Some("rtkit")));
    let data_loop = r.threads[0];
    let a = attr(data_loop);
    assert_eq!(
        (a.policy, a.priority),
        (SCHED_FIFO, 20),
        "clamped to MaxRealtimePriority"
    );
    assert_ne!(a.flags & SCHED_FLAG_RESET_ON_FORK, 0);
    assert_eq!(affinity(data_loop), vec![live.rt_cpu]);
    assert_eq!(
        attr(pw).nice,
        -11,
        "MakeThreadHighPriority for the main thread"
    );
    drop(kids);
    eventually("PipeWire's exit gives the grant back", || {
        listed(&mut client).is_empty()
    });
    let st = d.stop();
    assert!(st.success(), "daemon exit {st}");
    drop(bus);
    live.assert_restored("after PipeWire and SIGTERM");
}
