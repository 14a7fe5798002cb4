//! Raw pages built by hand the way the kernel writes them: short and long
//! records, time extends, padding, lost-event flags, truncated pages.

use super::*;
use crate::trace::format::{parse_format, parse_header_page};

const HEADER: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n";

fn formats() -> Vec<EventFormat> {
    let common = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n";
    [
        format!("name: sys_enter\nID: 443\nformat:\n{common}\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;\n"),
        format!("name: sched_switch\nID: 372\nformat:\n{common}\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n"),
        format!("name: irq_handler_entry\nID: 225\nformat:\n{common}\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:0;\n"),
        format!("name: local_timer_entry\nID: 165\nformat:\n{common}\tfield:int vector;\toffset:8;\tsize:4;\tsigned:1;\n"),
    ]
    .iter()
    .map(|t| parse_format(t).unwrap())
    .collect()
}

fn rec(id: u16, pid: i32, body: &[u8]) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(&id.to_ne_bytes());
    r.extend_from_slice(&[0, 0]);
    r.extend_from_slice(&pid.to_ne_bytes());
    r.extend_from_slice(body);
    while r.len() % 4 != 0 {
        r.push(0);
    }
    r
}

/// A page with events (time delta, record); records over 112 bytes use the
/// length word (type_len 0), like the kernel.
fn page(ts: u64, events: &[(u32, Vec<u8>)], flags: u64) -> Vec<u8> {
    let mut data = Vec::new();
    for (delta, r) in events {
        if r.len() <= 112 {
            data.extend_from_slice(&((r.len() as u32 / 4) | delta << 5).to_ne_bytes());
        } else {
            data.extend_from_slice(&(delta << 5).to_ne_bytes());
            data.extend_from_slice(&(r.len() as u32 + 4).to_ne_bytes());
        }
        data.extend_from_slice(r);
    }
    let mut p = vec![0u8; 4096];
    p[0..8].copy_from_slice(&ts.to_ne_bytes());
    p[8..16].copy_from_slice(&(data.len() as u64 | flags).to_ne_bytes());
    p[16..16 + data.len()].copy_from_slice(&data);
    p
}

fn comm16(s: &str) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..s.len()].copy_from_slice(s.as_bytes());
    b
}

#[test]
fn records_time_extends_and_names() {
    let header = parse_header_page(HEADER).unwrap();
    let mut d = Decoder::new(header, &formats(), vec![]);
    let mut sys = 202i64.to_ne_bytes().to_vec();
    sys.extend_from_slice(&[0u8; 48]);
    let mut sw = Vec::new();
    sw.extend_from_slice(&comm16("stress-ng"));
    sw.extend_from_slice(&50i32.to_ne_bytes());
    sw.extend_from_slice(&120i32.to_ne_bytes());
    sw.extend_from_slice(&0i64.to_ne_bytes());
    sw.extend_from_slice(&comm16("rtmgr-probe1.0"));
    sw.extend_from_slice(&77i32.to_ne_bytes());
    sw.extend_from_slice(&0i32.to_ne_bytes());
    let mut irq = 36i32.to_ne_bytes().to_vec();
    irq.extend_from_slice(&((13u32 << 16) | 16).to_ne_bytes());
    irq.extend_from_slice(b"virtio1-req.0\0");
    let mut p = page(
        1_000_000,
        &[
            (10, rec(443, 50, &sys)),
            (20, rec(372, 50, &sw)),
            (5, rec(225, 77, &irq)),
        ],
        0,
    );
    // A time extend between the first two records: +1 << 27 ns.
    let mut out = Vec::new();
    let info = d.page(1, &p, &mut out);
    assert_eq!(info.events, 3);
    assert_eq!(out[0].ts_ns, 1_000_010);
    assert_eq!(out[0].kind, Kind::SysEnter { nr: 202 });
    assert_eq!(out[1].ts_ns, 1_000_030);
    match out[1].kind {
        Kind::Switch {
            prev_pid,
            next_comm,
            prev_runnable,
            ..
        } => {
            assert_eq!(
                (prev_pid, next_comm.as_str(), prev_runnable),
                (50, "rtmgr-probe1.0", true)
            );
        }
        k => panic!("{k:?}"),
    }
    assert_eq!(
        out[2].comm.as_str(),
        "rtmgr-probe1.0",
        "named from the switch"
    );
    assert_eq!(
        out[2].kind,
        Kind::IrqEntry {
            irq: 36,
            name: Comm::new("virtio1-req.0")
        }
    );
    // time extend + padding + a truncated page
    let mut data = Vec::new();
    data.extend_from_slice(&(30u32 | 3 << 5).to_ne_bytes());
    data.extend_from_slice(&1u32.to_ne_bytes());
    data.extend_from_slice(&(29u32 | 1 << 5).to_ne_bytes());
    data.extend_from_slice(&8u32.to_ne_bytes());
    data.extend_from_slice(&[0u8; 4]);
    let r = rec(165, 0, &236i32.to_ne_bytes());
    data.extend_from_slice(&((r.len() as u32 / 4) | 2 << 5).to_ne_bytes());
    data.extend_from_slice(&r);
    p = vec![0u8; 4096];
    p[0..8].copy_from_slice(&5u64.to_ne_bytes());
    p[8..16].copy_from_slice(&(data.len() as u64 | MISSED_EVENTS).to_ne_bytes());
    p[16..16 + data.len()].copy_from_slice(&data);
    out.clear();
    let info = d.page(0, &p, &mut out);
    assert!(info.missed_before);
    assert_eq!(out.len(), 2);
    assert_eq!((out[0].kind, out[0].ts_ns), (Kind::Lost, 5));
    assert_eq!(out[1].ts_ns, 5 + 3 + (1 << 27) + 1 + 2);
    assert_eq!(
        out[1].kind,
        Kind::VectorEntry {
            name: Comm::new("local_timer")
        }
    );
    assert_eq!(out[1].comm.as_str(), "<idle>");
    // Truncated: the commit says more than the page holds.
    out.clear();
    let cut = &p[..20];
    assert_eq!(d.page(0, cut, &mut out).events, 0);
}
