//! `rtmgr serve` under systemd's Type=notify protocol (root, live), without
//! systemd: NOTIFY_SOCKET names a Unix datagram socket this test listens on,
//! as PID 1 would. READY=1 must come once the socket accepts clients, and
//! STOPPING=1 on SIGTERM, before the daemon gives the machine back.

mod serve_common;

use serve_common::*;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Every datagram waiting (up to `wait` for the first).
fn drain(sock: &UnixDatagram, wait: Duration) -> Vec<String> {
    sock.set_read_timeout(Some(wait)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = sock.recv(&mut buf) {
        out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
    }
    out
}

#[test]
fn ready_after_the_socket_listens_and_stopping_on_sigterm() {
    let Some(live) = Live::new() else { return };
    let notify = live.dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&notify).unwrap();
    let cfg = live.config("");
    // Listen for READY=1 ourselves, before Daemon::start_env's own wait for the socket.
    let daemon = std::thread::scope(|s| {
        let ready = s.spawn(|| {
            sock.set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            let mut buf = [0u8; 4096];
            loop {
                let n = sock.recv(&mut buf).expect("a READY=1 within 20 s");
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                if msg.lines().any(|l| l == "READY=1") {
                    // The socket must already accept a client and answer.
                    let mut c = live.client();
                    let status = c.status().expect("status right after READY=1");
                    return (msg, status.granted);
                }
            }
        });
        let d = Daemon::start_env(
            &cfg,
            &live.socket(),
            live.dir.path(),
            &[("NOTIFY_SOCKET", notify.as_path())],
        );
        let (msg, granted) = ready.join().unwrap();
        eprintln!("notify: {msg:?} (granted so far {granted})");
        assert!(
            msg.contains("STATUS="),
            "a status line with READY=1: {msg:?}"
        );
        d
    });
    let status = daemon.stop();
    assert!(status.success(), "{status}");
    let after = drain(&sock, Duration::from_secs(2));
    eprintln!("notify after SIGTERM: {after:?}");
    assert!(
        after.iter().any(|m| m.lines().any(|l| l == "STOPPING=1")),
        "STOPPING=1 on SIGTERM: {after:?}"
    );
    live.assert_restored("after SIGTERM");
}
