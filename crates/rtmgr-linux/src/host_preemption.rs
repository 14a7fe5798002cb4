//! Where the host-preemption test's result is kept (issue 20; ARTiS §2.2:
//! lending is only free where the host lets a busy vCPU run): written
//! atomically to /run/rtmgr/host-preemption.json by `rtmgr status --host-test`,
//! read back by status, advise and the balancer through `recent_host_preemption`.

use crate::host::Host;
use rtmgr_core::host_preemption::{check_cached, CacheError, HostPreemption};
use std::path::Path;
use std::time::Duration;

/// The cached result (tmpfs: gone at reboot, and checked against the boot id anyway).
pub const CACHE_PATH: &str = "/run/rtmgr/host-preemption.json";
/// The kernel's id of this boot.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";
/// How old a result `rtmgr status` and `rtmgr advise` still show.
pub const SHOWN_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// This boot's id (empty when unreadable: then no cached result matches but an empty one).
pub fn boot_id(host: &Host) -> String {
    host.read_opt(BOOT_ID_PATH)
        .map(|t| t.trim().to_string())
        .unwrap_or_default()
}

/// The cached result of this machine, if it is from this boot and at most
/// `max_age` old: what the balancer and advise use.
pub fn recent_host_preemption(max_age: Duration) -> Result<HostPreemption, CacheError> {
    recent_host_preemption_on(&Host::real(), max_age)
}

/// `recent_host_preemption` on `host` (a fake tree in tests).
pub fn recent_host_preemption_on(
    host: &Host,
    max_age: Duration,
) -> Result<HostPreemption, CacheError> {
    let text = match std::fs::read_to_string(host.path(CACHE_PATH)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CacheError::Missing(CACHE_PATH.into()))
        }
        Err(e) => {
            return Err(CacheError::Malformed {
                path: CACHE_PATH.into(),
                why: e.to_string(),
            })
        }
    };
    check_cached(
        CACHE_PATH,
        &text,
        &boot_id(host),
        rtmgr_sys::time::unix_now_s(),
        max_age.as_secs(),
    )
}

/// Write `r` to the cache atomically (a temporary file renamed over it).
pub fn write_host_preemption(host: &Host, r: &HostPreemption) -> std::io::Result<()> {
    let path = host.path(CACHE_PATH);
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".host-preemption.json.{}", std::process::id()));
    let text = serde_json::to_string_pretty(r).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text + "\n")
        .and_then(|()| std::fs::rename(&tmp, &path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeMachine;
    use rtmgr_core::host_preemption::{assess, TestSetup};
    use rtmgr_core::CpuSet;

    fn result(boot: &str, at: u64) -> HostPreemption {
        let setup = TestSetup::new(CpuSet::single(0), CpuSet::single(1), boot, at);
        assess(setup, &[])
    }

    #[test]
    fn written_results_are_read_back_only_from_this_boot_and_fresh() {
        let m = FakeMachine::new(2).build();
        let host = m.host();
        let day = Duration::from_secs(24 * 3600);
        let e = recent_host_preemption_on(&host, day).unwrap_err();
        assert_eq!(e, CacheError::Missing(CACHE_PATH.into()));
        assert!(e.to_string().contains("rtmgr status --host-test"), "{e}");
        std::fs::create_dir_all(host.path("/proc/sys/kernel/random")).unwrap();
        std::fs::write(host.path(BOOT_ID_PATH), "boot-a\n").unwrap();
        write_host_preemption(&host, &result("boot-a", rtmgr_sys::time::unix_now_s())).unwrap();
        let back = recent_host_preemption_on(&host, day).unwrap();
        assert_eq!(back.setup.boot_id, "boot-a");
        assert!(!back.preempts);
        write_host_preemption(
            &host,
            &result("boot-a", rtmgr_sys::time::unix_now_s() - 7200),
        )
        .unwrap();
        let stale = recent_host_preemption_on(&host, Duration::from_secs(3600)).unwrap_err();
        assert!(matches!(stale, CacheError::Stale { .. }), "{stale}");
        write_host_preemption(&host, &result("boot-b", rtmgr_sys::time::unix_now_s())).unwrap();
        let other = recent_host_preemption_on(&host, day).unwrap_err();
        assert!(matches!(other, CacheError::OtherBoot { .. }), "{other}");
        std::fs::write(host.path(CACHE_PATH), "{\"schema\": 3").unwrap();
        let bad = recent_host_preemption_on(&host, day).unwrap_err();
        assert!(matches!(bad, CacheError::Malformed { .. }), "{bad}");
        let left: Vec<_> = std::fs::read_dir(host.path("/run/rtmgr"))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left, ["host-preemption.json"], "no temporary file left");
    }
}
