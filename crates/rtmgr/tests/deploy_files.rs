//! The example deployment files of docs/fleet.md (deploy/): every YAML file
//! parses (python3's yaml, skipped with the reason when it is missing), the
//! DaemonSet's ConfigMap is a config `rtmgr serve` accepts, and the pieces
//! agree — metrics port, scrape targets, the kubelet's reserved CPUs holding
//! the RT CPUs, the systemd drop-in opening IP for the metrics.

use rtmgr_core::CpuSet;
use rtmgr_linux::daemon::ServeConfig;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every document of a YAML file, as JSON; None when python3 cannot load yaml.
fn load(path: &Path) -> Option<Vec<Value>> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml\nprint(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
        ])
        .arg(path)
        .output()
        .ok()?;
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("No module named 'yaml'") {
        return None;
    }
    assert!(out.status.success(), "{}: {err}", path.display());
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            yaml_files(&p, out);
        } else if matches!(p.extension().and_then(|x| x.to_str()), Some("yaml" | "yml")) {
            out.push(p);
        }
    }
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter().find(|d| d["kind"] == kind).unwrap()
}

#[test]
fn the_deployment_examples_parse_and_agree() {
    let mut files = Vec::new();
    yaml_files(&deploy(), &mut files);
    assert!(files.len() >= 5, "{files:?}");
    if load(&files[0]).is_none() {
        eprintln!(
            "skip: python3 has no yaml module (pip install pyyaml or apt-get install python3-yaml)"
        );
        return;
    }
    for f in &files {
        let docs = load(f).unwrap();
        assert!(
            !docs.is_empty() && docs.iter().all(|d| !d.is_null()),
            "{}",
            f.display()
        );
    }
    let ds = load(&deploy().join("kubernetes/rtmgr-daemonset.yaml")).unwrap();
    let toml = kind(&ds, "ConfigMap")["data"]["rtmgr.toml"]
        .as_str()
        .unwrap();
    let cfg = ServeConfig::from_toml(toml).unwrap();
    let metrics = cfg.serve.metrics.clone().unwrap();
    assert!(metrics.ends_with(":9464"), "{metrics}");
    // A node that grants to pods: their cpuset moves do not wait for grace periods.
    assert_eq!(cfg.partition.favordynmods, Some(true));
    let pod = &kind(&ds, "DaemonSet")["spec"]["template"];
    assert_eq!(pod["metadata"]["annotations"]["prometheus.io/port"], "9464");
    assert_eq!(
        pod["spec"]["containers"][0]["ports"][0]["containerPort"],
        9464
    );
    assert_eq!(pod["spec"]["hostPID"], true);
    let rt = cfg.partition.rt_cpus.clone().unwrap();
    let kubelet = load(&deploy().join("kubernetes/kubelet-config.yaml")).unwrap();
    let reserved = kubelet[0]["reservedSystemCPUs"].as_str().unwrap();
    assert!(
        rt.is_subset(&CpuSet::parse_list(reserved).unwrap()),
        "RT CPUs {rt} must be among the kubelet's reserved CPUs {reserved}"
    );
    assert_eq!(kubelet[0]["cpuManagerPolicy"], "static");
    assert_eq!(
        kubelet[0]["cpuManagerPolicyOptions"]["strict-cpu-reservation"],
        "true"
    );
    let scrape = load(&deploy().join("prometheus/scrape.yaml")).unwrap();
    let targets = &scrape[0]["scrape_configs"][0]["static_configs"][0]["targets"];
    assert!(targets
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t.as_str().unwrap().ends_with(":9464")));
    let rules = load(&deploy().join("prometheus/rtmgr-rules.yaml")).unwrap();
    let exprs: Vec<&str> = rules[0]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["expr"].as_str().unwrap())
        .collect();
    for metric in [
        "rtmgr_guard_latency_seconds_bucket",
        "rtmgr_evictions_total",
        "rtmgr_drift_repairs_total",
        "rtmgr_refusals_total",
    ] {
        assert!(exprs.iter().any(|e| e.contains(metric)), "{metric}");
    }
}

#[test]
fn the_systemd_drop_in_opens_ip_for_the_metrics() {
    let text = std::fs::read_to_string(deploy().join("systemd/rtmgr-metrics.conf")).unwrap();
    assert!(text.contains("RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"));
    let exec: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("ExecStart="))
        .collect();
    assert_eq!(
        exec[0], "ExecStart=",
        "the unit's ExecStart is cleared first"
    );
    assert!(exec[1].contains("--metrics 0.0.0.0:9464"), "{exec:?}");
}

/// The container examples (docs/containers.md): the pod mounts the node's
/// socket (hostPath, type Socket) and runs as a uid the DaemonSet's config
/// has a `[[client]]` rule for; both container examples run the worker
/// with the standard-library client, from the repository's files.
#[test]
fn the_container_examples_reach_the_socket_as_a_user_the_daemon_knows() {
    let Some(pod) = load(&deploy().join("kubernetes/rt-worker-pod.yaml")) else {
        eprintln!("skip: python3 has no yaml module");
        return;
    };
    let spec = &kind(&pod, "Pod")["spec"];
    let uid = spec["securityContext"]["runAsUser"].as_u64().unwrap() as u32;
    let sock = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "rtmgr-socket")
        .unwrap();
    assert_eq!(sock["hostPath"]["type"], "Socket");
    assert_eq!(sock["hostPath"]["path"], "/run/rtmgr/rtmgr.sock");
    let ds = load(&deploy().join("kubernetes/rtmgr-daemonset.yaml")).unwrap();
    let toml = kind(&ds, "ConfigMap")["data"]["rtmgr.toml"]
        .as_str()
        .unwrap();
    let cfg = ServeConfig::from_toml(toml).unwrap();
    let peer = rtmgr_core::admission::policy::Peer {
        uid,
        user: None,
        groups: vec![(uid, None)],
    };
    let (_, rule) = cfg
        .policy
        .rule_for(&peer)
        .expect("a [[client]] rule for the pod's uid");
    assert!(!rule.hard, "the example pod asks for a soft reservation");
    let podman = std::fs::read_to_string(deploy().join("containers/podman-run.sh")).unwrap();
    for f in [
        "deploy/containers/rt_worker.py",
        "crates/rtmgr/tests/conformance/rtmgr_client.py",
        "/run/rtmgr/rtmgr.sock:/run/rtmgr/rtmgr.sock",
    ] {
        assert!(podman.contains(f), "podman-run.sh mounts {f}");
    }
    for f in [
        "containers/rt_worker.py",
        "../crates/rtmgr/tests/conformance/rtmgr_client.py",
    ] {
        assert!(deploy().join(f).exists(), "{f}");
    }
}
