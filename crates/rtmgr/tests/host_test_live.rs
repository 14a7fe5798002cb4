//! `rtmgr status --host-test` on the real machine (root only, a few seconds;
//! issue 20): the cached result's shape and the status JSON that shows it,
//! an interrupted test cached nowhere, and bad input refused. No latency
//! figure is asserted. The machine's own cached result is put back afterwards.

mod measure_common;
use measure_common::*;
use std::path::Path;
use std::time::Duration;

const CACHE: &str = rtmgr_linux::host_preemption::CACHE_PATH;

/// The machine's cached result, put back when dropped (and the cache's
/// directory removed again when the test created it).
struct KeepCache(Option<Vec<u8>>, bool);

impl KeepCache {
    fn now() -> KeepCache {
        let dir = Path::new(CACHE).parent().expect("a directory");
        KeepCache(std::fs::read(CACHE).ok(), dir.exists())
    }
}

impl Drop for KeepCache {
    fn drop(&mut self) {
        match &self.0 {
            Some(old) => std::fs::write(CACHE, old).expect("restore the cached host test"),
            None => {
                let _ = std::fs::remove_file(CACHE);
                if !self.1 {
                    let _ = std::fs::remove_dir(Path::new(CACHE).parent().expect("a directory"));
                }
            }
        }
    }
}

#[test]
fn host_test_caches_a_result_status_shows_and_restores() {
    let Some(_live) = live_ready("host_test_caches_a_result_status_shows_and_restores") else {
        return;
    };
    if !two_cpus("the host test") {
        return;
    }
    let _keep = KeepCache::now();
    let tmp = tempdir();
    let out = run(
        tmp.path(),
        &[
            "status",
            "--host-test",
            "--host-test-cpus",
            "0",
            "--host-test-duration",
            "1s",
            "--json",
        ],
    );
    assert_succeeded(&out);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let item = status["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "host_preemption")
        .expect("host_preemption item");
    let r = &status["host_preemption"];
    assert_eq!(item["value"], r["verdict"]);
    assert_eq!(r["schema"], "rtmgr.host-preemption/1");
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(r["boot_id"], boot.trim());
    assert_eq!(
        (r["cpus"].as_str(), r["busy_cpus"].as_str()),
        (Some("0"), Some("1"))
    );
    assert!(r["measured_at_unix_s"].as_u64().unwrap() > 0);
    let cpu = &r["per_cpu"][0];
    for side in ["with_spinner", "without_spinner"] {
        assert_eq!(cpu[side]["phases"], 2, "{cpu}");
        assert!(cpu[side]["samples"].as_u64().unwrap() > 0, "{cpu}");
        assert!(cpu[side]["max_ns"].as_i64().is_some(), "{cpu}");
    }
    let verdict = r["verdict"].as_str().unwrap();
    assert!(
        [
            "this host preempts busy vCPUs",
            "no host preemption seen",
            "inconclusive:"
        ]
        .iter()
        .any(|v| verdict.starts_with(v)),
        "{verdict}"
    );
    assert_eq!(r["preempts"].as_bool(), Some(r["stall_max_ns"].is_i64()));
    // The capacity part (issue 28): 1…N spinners, the tested CPU added last.
    let cap = &status["cpu_capacity"];
    assert_eq!(cap, &r["cpu_capacity"]);
    assert_eq!(
        cap["cpus"].as_array().unwrap().last(),
        Some(&0.into()),
        "{cap}"
    );
    let levels = cap["levels"].as_array().unwrap();
    assert!(levels.len() >= 2, "{cap}");
    assert!(
        levels
            .iter()
            .all(|l| l["total_rate"].as_f64().unwrap() > 0.0),
        "{cap}"
    );
    let item = status["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "cpu_capacity")
        .expect("cpu_capacity item");
    assert_eq!(item["value"], cap["finding"]);
    let cached = json(Path::new(CACHE));
    assert_eq!(&cached, r);
    // The spinners are threads of rtmgr: gone with it.
    assert!(processes_mentioning(tmp.path()).is_empty());

    // Interrupted: exit 130, nothing cached, nothing left running.
    let mut child = spawn(
        tmp.path(),
        &["status", "--host-test", "--host-test-duration", "60s"],
    );
    std::thread::sleep(Duration::from_millis(2500));
    sigint(&child);
    assert_eq!(wait(&mut child, Duration::from_secs(20)), 130);
    let err = String::from_utf8_lossy(&child.wait_with_output().unwrap().stderr).to_string();
    assert!(err.contains("not cached"), "{err}");
    assert_eq!(
        json(Path::new(CACHE)),
        cached,
        "the interrupted test cached nothing"
    );

    // Bad input: one clear error, exit 2, the cache untouched.
    for (args, says) in [
        (["--host-test-cpus", "4096"], "not online"),
        (["--host-test-duration", "100ms"], "at least two phases"),
    ] {
        let mut all = vec!["status", "--host-test"];
        all.extend(args);
        let out = run(tmp.path(), &all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
    }
    assert_eq!(json(Path::new(CACHE)), cached);
}
