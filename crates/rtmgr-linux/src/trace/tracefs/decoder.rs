//! Decoding a private tracefs instance's binary records (McKenney §2.1:
//! measure without changing the machine): the events' layouts and the page
//! header read through the `Host`, kernel symbols for workqueue functions,
//! and the names of tasks that raw records carry only as pids.

use super::{host_io, TraceError, TraceSpec};
use crate::Host;
use rtmgr_core::trace::format::{parse_format, parse_header_page, EventFormat};
use rtmgr_core::trace::raw::Decoder;
use rtmgr_core::trace::{Comm, Event};
use std::path::{Path, PathBuf};

/// Raw records carry only pids: name the tasks no switch named yet from /proc.
pub(super) fn name_tasks(host: &Host, decoder: &mut Decoder, batch: &mut [Event]) {
    let unnamed = decoder.unnamed(batch);
    if unnamed.is_empty() {
        return;
    }
    for pid in &unnamed {
        let comm = host
            .read(format!("/proc/{pid}/comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|_| format!("pid {pid}"));
        decoder.learn_comm(*pid, &comm);
    }
    let unknown = Comm::new("?");
    for e in batch.iter_mut().filter(|e| e.comm == unknown) {
        e.comm = decoder.comm_of(e.pid);
    }
}

/// The layouts of the enabled events (whole groups expanded) and the page
/// header; kernel symbols when workqueue functions must be named.
pub(super) fn decoder(
    host: &Host,
    root: &Path,
    inst: &Path,
    spec: &TraceSpec,
) -> Result<Decoder, TraceError> {
    let path = root.join("events/header_page");
    let text = host
        .read_in_one(&path)
        .map_err(host_io(format!("read {}", path.display())))?;
    let header = parse_header_page(&text).ok_or_else(|| {
        TraceError::Unavailable(format!("{}: unknown layout: {text:?}", path.display()))
    })?;
    let mut formats: Vec<EventFormat> = Vec::new();
    for ev in &spec.events {
        let dir = inst.join("events").join(ev);
        let one = dir.join("format");
        let files: Vec<PathBuf> = if host.exists(&one) {
            vec![one]
        } else {
            host.list_dir(&dir)
                .map(|names| {
                    names
                        .iter()
                        .map(|n| dir.join(n).join("format"))
                        .filter(|p| host.exists(p))
                        .collect()
                })
                .unwrap_or_default()
        };
        formats.extend(
            files
                .iter()
                .filter_map(|f| host.read_in_one(f).ok())
                .filter_map(|t| parse_format(&t)),
        );
    }
    let symbols = if spec.events.iter().any(|e| e.starts_with("workqueue")) {
        kernel_symbols(host)
    } else {
        Vec::new()
    };
    Ok(Decoder::new(header, &formats, symbols))
}

/// Text symbols of /proc/kallsyms (zeros when not root: then addresses show).
fn kernel_symbols(host: &Host) -> Vec<(u64, String)> {
    let text = host.read_opt("/proc/kallsyms").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let kind = f.next()?;
            let name = f.next()?;
            (addr != 0 && matches!(kind, "t" | "T")).then(|| (addr, name.to_string()))
        })
        .collect()
}
