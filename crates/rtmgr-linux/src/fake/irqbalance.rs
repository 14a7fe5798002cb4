//! A fake irqbalance for tests: a thread listening on the socket irqbalance
//! would have in a fake machine tree, answering `setup` and taking `settings
//! cpus` as irqbalance 1.9 does (issue 15: living beside irqbalance).

use super::FakeMachine;
use rtmgr_core::CpuSet;
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::sync::{Arc, Mutex};

/// What the fake irqbalance was told, and the ban it holds (None: its own rules).
#[derive(Debug, Default)]
pub struct Heard {
    pub commands: Vec<String>,
    pub ban: Option<CpuSet>,
}

impl Heard {
    /// Wait (at most 10 s) until the fake irqbalance has heard `n` commands:
    /// `settings` commands are given without waiting for irqbalance.
    pub fn wait_for(heard: &Mutex<Heard>, n: usize) -> std::sync::MutexGuard<'_, Heard> {
        for _ in 0..1000 {
            if heard.lock().expect("lock").commands.len() >= n {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        heard.lock().expect("lock")
    }
}

/// Start a fake irqbalance of process `pid` on `m`'s socket path, banning
/// `ban` (a CPU list) at first. Add the process with `.task(pid, "irqbalance")`.
pub fn serve(m: &FakeMachine, pid: u32, ban: Option<&str>) -> Arc<Mutex<Heard>> {
    let dir = m.root().join("run/irqbalance");
    std::fs::create_dir_all(&dir).expect("socket dir");
    let listener =
        UnixListener::bind(dir.join(format!("irqbalance{pid}.sock"))).expect("bind fake socket");
    let heard = Arc::new(Mutex::new(Heard {
        commands: Vec::new(),
        ban: ban.map(|b| CpuSet::parse_list(b).expect("CPU list")),
    }));
    let shared = heard.clone();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(|c| c.ok()) {
            let mut msg = String::new();
            let _ = conn.read_to_string(&mut msg);
            let mut h = shared.lock().expect("lock");
            if msg.starts_with("setup") {
                let mask = h.ban.clone().unwrap_or_default().to_mask(1);
                let _ = conn.write_all(format!("SLEEP 10 BANNED {mask}").as_bytes());
            } else if let Some(list) = msg.strip_prefix("settings cpus ") {
                h.ban = CpuSet::parse_list(list).ok();
            }
            h.commands.push(msg);
        }
    });
    heard
}
