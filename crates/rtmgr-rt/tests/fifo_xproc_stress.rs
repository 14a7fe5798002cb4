//! Multi-process stress test of the shared-memory RT-FIFO (issue 5): a
//! producer process at SCHED_FIFO (when root) pushes 2 000 000 sequence-numbered
//! records to ordinary consumer processes. The first consumer is killed
//! (SIGKILL) in the middle of a pop; a second one reopens the segment and must
//! continue exactly there. Checks: nothing lost, duplicated, reordered or torn;
//! the producer met a full FIFO and woke a sleeping consumer.

mod fifo_common;

use fifo_common::*;
use rtmgr_rt::fifo::shm::{self, ShmConsumer, ShmProducer};
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

const N: u64 = 2_000_000;
const KILL_AT: u64 = N / 3;
const PAUSE_AT: u64 = 2 * N / 3;
const RECORD: u32 = 16;
const CAPACITY: u32 = 1024;
const TEST: &str = "fifo_multiprocess_stress";

fn encode(seq: u64) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[..8].copy_from_slice(&seq.to_ne_bytes());
    r[8..].copy_from_slice(&(seq ^ 0x9e37_79b9_7f4a_7c15).to_ne_bytes());
    r
}

fn decode(r: &[u8]) -> Option<u64> {
    let seq = u64::from_ne_bytes(r[..8].try_into().ok()?);
    let check = u64::from_ne_bytes(r[8..16].try_into().ok()?);
    (check == seq ^ 0x9e37_79b9_7f4a_7c15).then_some(seq)
}

fn env_u64(k: &str) -> u64 {
    std::env::var(k).unwrap().parse().unwrap()
}

fn producer_child(name: &str) {
    // Best effort: under a cpuset partition both ends may share a CPU, which
    // works because the producer sleeps when the FIFO is full.
    try_pin(1);
    let rt = std::env::var("RT").as_deref() == Ok("1");
    let guard = rt.then(|| FifoPolicy::enter(10).expect("SCHED_FIFO"));
    let mut p = ShmProducer::open(name, RECORD).expect("open producer");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut full = 0u64;
    for seq in 0..N {
        if seq == PAUSE_AT {
            // Let the consumer drain the FIFO and go to sleep on it.
            std::thread::sleep(Duration::from_millis(30));
        }
        let rec = encode(seq);
        while !p.try_push(&rec).expect("push") {
            full += 1;
            assert!(Instant::now() < deadline, "producer stuck at {seq}");
            // An RT task would drop the record; here we back off and retry.
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    drop(guard);
    println!(
        "RESULT {}",
        serde_json::json!({"pushed": N, "full": full, "wakeups": p.wakeups(), "sched_fifo": rt})
    );
}

fn consumer_child(name: &str) {
    try_pin(0);
    let mut expect = env_u64("START");
    let kill_at = std::env::var("KILL_AT")
        .ok()
        .map(|v| v.parse::<u64>().unwrap());
    let mut c = ShmConsumer::open(name, RECORD).expect("open consumer");
    let first = expect;
    while expect < N {
        assert!(
            c.wait(Some(Duration::from_secs(10))).unwrap(),
            "timed out waiting for {expect}"
        );
        let seq = c
            .try_pop_with(|rec| {
                let seq = decode(rec).expect("torn or corrupt record");
                if Some(seq) == kill_at {
                    // Die in the middle of the pop: the record is not released.
                    rtmgr_sys::process::kill_self();
                }
                seq
            })
            .unwrap()
            .expect("wait said a record is there");
        assert_eq!(seq, expect, "lost, duplicated or reordered record");
        expect += 1;
    }
    let mut buf = [0u8; RECORD as usize];
    assert!(!c.try_pop(&mut buf).unwrap(), "record after the last one");
    assert!(!c
        .pop_timeout(&mut buf, Some(Duration::from_millis(10)))
        .unwrap());
    println!(
        "RESULT {}",
        serde_json::json!({"first": first, "last": expect - 1})
    );
}

/// Removes the segment when the test ends, however it ends.
struct Unlink(String);
impl Drop for Unlink {
    fn drop(&mut self) {
        let _ = shm::unlink(&self.0);
    }
}

#[test]
fn fifo_multiprocess_stress() {
    if let Ok(role) = std::env::var(ROLE_ENV) {
        let name = std::env::var("FIFO_NAME").unwrap();
        match role.as_str() {
            "producer" => producer_child(&name),
            "consumer" => consumer_child(&name),
            other => panic!("unknown role {other}"),
        }
        return;
    }
    let root = is_root();
    let _lock = root.then(|| {
        rtmgr_sys::lock::MachineLock::acquire(std::path::Path::new(
            rtmgr_sys::lock::DEFAULT_LOCK_PATH,
        ))
        .expect("machine lock")
    });
    if !root {
        println!("not root: the producer runs at SCHED_OTHER instead of SCHED_FIFO");
    }
    let name = format!("rtmgr-fifo-stress-{}", std::process::id());
    let _unlink = Unlink(name.clone());
    drop(ShmConsumer::create(&name, RECORD, CAPACITY).expect("create segment"));
    let t0 = Instant::now();
    let env = |extra: &[(&'static str, String)]| -> Vec<(&'static str, String)> {
        let mut v = vec![("FIFO_NAME", name.clone())];
        v.extend(extra.iter().cloned());
        v
    };

    let mut producer = ChildGuard(Some(spawn_child(
        TEST,
        "producer",
        &env(&[("RT", if root { "1" } else { "0" }.into())]),
    )));
    let mut first = ChildGuard(Some(spawn_child(
        TEST,
        "consumer",
        &env(&[("START", "0".into()), ("KILL_AT", KILL_AT.to_string())]),
    )));
    let status = first.0.take().unwrap().wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "first consumer: {status}"
    );
    // The producer keeps going meanwhile and fills the FIFO.
    std::thread::sleep(Duration::from_millis(30));
    let mut second = ChildGuard(Some(spawn_child(
        TEST,
        "consumer",
        &env(&[("START", KILL_AT.to_string())]),
    )));
    let c = child_result(&second.finish());
    let p = child_result(&producer.finish());
    println!(
        "stress: {N} records in {:?}; producer {p}; second consumer {c}",
        t0.elapsed()
    );
    assert_eq!(
        c["first"], KILL_AT,
        "the record being popped at the kill is delivered again"
    );
    assert_eq!(c["last"], N - 1);
    assert!(p["full"].as_u64().unwrap() > 0, "the FIFO was never full");
    assert!(
        p["wakeups"].as_u64().unwrap() > 0,
        "the consumer never slept"
    );
    assert_eq!(p["sched_fifo"], root);
}
