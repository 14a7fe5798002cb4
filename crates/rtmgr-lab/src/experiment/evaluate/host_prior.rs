//! The host-preemption test evaluate's balancer starts from (issue 20; ARTiS
//! §2.2: lending must not delay the RT tasks): the cached `rtmgr status
//! --host-test` result, else the test run here, kept in the report only.

use super::super::{Reporter, Result, Session};
use crate::host_test::{measure_host_preemption, HostTestConfig};
use rtmgr_core::host_preemption::HostPreemption;
use rtmgr_core::CpuSet;
use rtmgr_linux::Host;
use std::time::Duration;

/// The host-preemption test of this boot that covers `rt_cpu` (the cached
/// `rtmgr status --host-test` result), else run it now on `rt_cpu` (a few
/// seconds, every CPU busy). Only `rtmgr status --host-test` writes the
/// cache: evaluate leaves the machine as it found it. An interrupted test
/// gives None.
pub(super) fn host_preemption_for(
    host: &Host,
    rt_cpu: u32,
    rep: &mut dyn Reporter,
) -> Result<Option<HostPreemption>> {
    let max_age = Duration::from_secs(HOST_TEST_MAX_AGE_S);
    match rtmgr_linux::host_preemption::recent_host_preemption_on(host, max_age) {
        Ok(hp) if hp.setup.cpus.contains(rt_cpu) && !hp.inconclusive => {
            rep.note(&format!("host test (cached): {}", hp.verdict));
            return Ok(Some(hp));
        }
        _ => {}
    }
    rep.note(&format!(
        "host test on CPU {rt_cpu} (every other CPU busy for {} s, then 1…N spinners for {} s; \
         `rtmgr status --host-test` would cache it)",
        crate::host_test::DEFAULT_DURATION.as_secs(),
        crate::host_test::capacity::DEFAULT_CAPACITY_DURATION.as_secs()
    ));
    let s = Session::open(host.clone(), "rtmgr evaluate (host test)")?;
    let hp = measure_host_preemption(&s, &HostTestConfig::new(CpuSet::single(rt_cpu)))?;
    if hp.setup.partial.is_some() {
        return Ok(None);
    }
    rep.note(&format!("host test: {}", hp.verdict));
    Ok(Some(hp))
}

/// A cached host test older than this is measured again.
const HOST_TEST_MAX_AGE_S: u64 = 6 * 3600;
