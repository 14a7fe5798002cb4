//! The `host_preemption` status item (issue 20; ARTiS §2.2): does the host
//! stop a busy vCPU, so that lending an RT CPU's idle time costs its RT tasks a
//! host slice? Shows the cached test result; `rtmgr status --host-test` makes one.

use super::{item, Item, Verdict};
use crate::host::Host;
use crate::host_preemption::{recent_host_preemption_on, SHOWN_MAX_AGE};
use rtmgr_core::host_preemption::{CacheError, HostPreemption};

/// The item, and the cached result it shows (for the JSON).
pub(super) fn host_preemption_item(host: &Host) -> (Item, Option<HostPreemption>) {
    match recent_host_preemption_on(host, SHOWN_MAX_AGE) {
        Ok(r) => (result_item(&r), Some(r)),
        Err(e) => (missing_item(host, &e), None),
    }
}

fn result_item(r: &HostPreemption) -> Item {
    let value = match &r.setup.partial {
        Some(why) => format!("{} [partial: {why}]", r.verdict),
        None => r.verdict.clone(),
    };
    if r.inconclusive {
        item(
            "host_preemption",
            Verdict::Warn,
            value,
            "unknown whether lending the RT CPUs' idle time costs a host slice: measure when the machine is quiet",
        )
    } else if r.preempts {
        item(
            "host_preemption",
            Verdict::Warn,
            value,
            "the host takes a busy vCPU away for a host slice: a guest lent an RT CPU's idle time keeps it busy, so an RT task waking there waits for the host; keep the shield (no lending) on this host",
        )
    } else {
        item(
            "host_preemption",
            Verdict::Ok,
            value,
            "a busy vCPU kept running: lending the RT CPUs' idle time costs no host slice",
        )
    }
}

fn missing_item(host: &Host, e: &CacheError) -> Item {
    let vm = host
        .read_opt("/proc/cpuinfo")
        .is_some_and(|c| c.contains(" hypervisor"));
    let verdict = if vm { Verdict::Warn } else { Verdict::Ok };
    item(
        "host_preemption",
        verdict,
        format!("not measured: {e}"),
        "under a hypervisor, lending an RT CPU's idle time may cost its RT tasks a host slice (~10 ms); the test measures it",
    )
}
