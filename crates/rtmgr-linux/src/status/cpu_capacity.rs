//! The `cpu_capacity` status item (issue 28 item 3; ARTiS §2.1: lending an
//! RT CPU's idle time is worth it only where a further busy CPU adds work):
//! what 1…N busy vCPUs did, from the cached host test (`rtmgr status
//! --host-test`); how to get it when it is not there.

use super::{item, Item, Verdict};
use rtmgr_core::capacity::CpuCapacity;
use rtmgr_core::host_preemption::{HostPreemption, HOW_TO_MEASURE};

/// Below this many CPUs' worth of gain from the last busy vCPU, the item
/// warns (the lending rule's own threshold is `[lending]
/// min_marginal_capacity`).
const WARN_MARGINAL: f64 = 0.5;

/// The item, and the measurement it shows (for the JSON).
pub(super) fn cpu_capacity_item(cached: Option<&HostPreemption>) -> (Item, Option<CpuCapacity>) {
    let Some(hp) = cached else {
        return (
            item(
                "cpu_capacity",
                Verdict::Ok,
                format!("not measured: run `{HOW_TO_MEASURE}` (1…N spinners, one per CPU, a few seconds)"),
                "",
            ),
            None,
        );
    };
    let Some(c) = &hp.cpu_capacity else {
        return (
            item(
                "cpu_capacity",
                Verdict::Ok,
                format!(
                    "not measured: the cached host test has no capacity measurement (a single CPU, \
                     an older rtmgr, or skipped): run `{HOW_TO_MEASURE}` again"
                ),
                "",
            ),
            None,
        );
    };
    let it = if c.marginal < WARN_MARGINAL {
        item(
            "cpu_capacity",
            Verdict::Warn,
            c.finding.clone(),
            "a further busy vCPU adds little work here: lending an RT CPU's idle time to ordinary \
             work buys little throughput and still risks the RT tasks' latency; the lending \
             controller starts off below [lending] min_marginal_capacity",
        )
    } else {
        item(
            "cpu_capacity",
            Verdict::Ok,
            c.finding.clone(),
            "each busy vCPU adds work: lending an RT CPU's idle time can add throughput",
        )
    };
    (it, Some(c.clone()))
}
