//! The Grafana dashboard (deploy/grafana/) and the Prometheus alert rules
//! (deploy/prometheus/) name only metrics that `rtmgr serve --metrics`
//! exports: every `rtmgr_…` name in their expressions is checked against the
//! series of the daemon's own registry, so renaming a metric fails here. The
//! dashboard's JSON has the shape Grafana imports (panels, targets, datasource).

use rtmgr_core::protocol::{RefusalKind, Response};
use rtmgr_core::CpuSet;
use rtmgr_linux::daemon::metrics::Metrics;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(file)
}

/// The sample names the daemon exports (OpenMetrics: a counter `x` is
/// `x_total`, a histogram `x_bucket`, `x_sum`, `x_count`), from the `# TYPE`
/// lines, once a refusal and a drift repair made their families appear.
fn exported() -> BTreeSet<String> {
    let m = Metrics::new(&CpuSet::parse_list("1").unwrap());
    m.response(&Response::refused(RefusalKind::Admission, "full"));
    m.drift("affinity", 1);
    let text = m.encode();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    assert!(names.len() >= 8, "{text}");
    names
}

/// Every `rtmgr_…` word of `text`.
fn metric_names(text: &str) -> Vec<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("rtmgr_") {
        let before = rest[..i].chars().next_back();
        let tail = &rest[i..];
        let end = tail.find(|c: char| !word(c)).unwrap_or(tail.len());
        if !before.is_some_and(word) {
            out.push(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

fn check_known(what: &str, names: &[String], known: &BTreeSet<String>) {
    for n in names {
        assert!(
            known.contains(n),
            "{what} uses {n}, which the daemon does not export: {known:?}"
        );
    }
}

#[test]
fn metric_names_are_found_in_expressions() {
    let names = metric_names("sum(rate(rtmgr_a_total[5m])) / x_rtmgr_b + rtmgr_c{cpu=\"1\"}");
    assert_eq!(names, ["rtmgr_a_total", "rtmgr_c"]);
}

#[test]
fn the_dashboard_has_grafanas_shape_and_only_exported_metrics() {
    let known = exported();
    let text = std::fs::read_to_string(deploy("grafana/rtmgr-dashboard.json")).unwrap();
    let d: Value = serde_json::from_str(&text).unwrap();
    for key in ["title", "uid"] {
        assert!(
            d[key].as_str().is_some_and(|s| !s.is_empty()),
            "dashboard {key}"
        );
    }
    assert!(
        d["schemaVersion"].as_u64().is_some_and(|v| v >= 30),
        "schemaVersion"
    );
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let ds_var = vars
        .iter()
        .find(|v| v["type"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(ds_var["query"], "prometheus");
    let ds_uid = format!("${{{}}}", ds_var["name"].as_str().unwrap());
    let panels = d["panels"].as_array().expect("panels");
    let mut used = BTreeSet::new();
    let mut ids = BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().expect("panel title");
        assert!(
            ["timeseries", "heatmap", "stat", "bargauge", "table"]
                .contains(&p["type"].as_str().unwrap_or("")),
            "{title}: type"
        );
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "{title}: id repeated"
        );
        for k in ["h", "w", "x", "y"] {
            assert!(p["gridPos"][k].as_u64().is_some(), "{title}: gridPos.{k}");
        }
        assert!(
            p["gridPos"]["x"].as_u64().unwrap() + p["gridPos"]["w"].as_u64().unwrap() <= 24,
            "{title}: wider than the grid"
        );
        assert_eq!(p["datasource"]["type"], "prometheus", "{title}");
        assert_eq!(p["datasource"]["uid"], ds_uid.as_str(), "{title}");
        let targets = p["targets"]
            .as_array()
            .filter(|t| !t.is_empty())
            .expect("targets");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(
                refs.insert(t["refId"].as_str().expect("refId")),
                "{title}: refId repeated"
            );
            let expr = t["expr"].as_str().expect("expr");
            let names = metric_names(expr);
            assert!(!names.is_empty(), "{title}: {expr} names no rtmgr metric");
            check_known(title, &names, &known);
            used.extend(names);
        }
    }
    // What issue 23 asks the dashboard to show.
    for m in [
        "rtmgr_guard_latency_seconds_bucket",
        "rtmgr_grants_total",
        "rtmgr_refusals_total",
        "rtmgr_evictions_total",
        "rtmgr_starvation_boosts_total",
        "rtmgr_drift_repairs_total",
    ] {
        assert!(used.contains(m), "no panel shows {m}");
    }
}

#[test]
fn the_alert_rules_use_only_exported_metrics() {
    let known = exported();
    let text = std::fs::read_to_string(deploy("prometheus/rtmgr-rules.yaml")).unwrap();
    let exprs: Vec<String> = metric_names(&text);
    assert!(exprs.len() >= 5, "{exprs:?}");
    check_known("deploy/prometheus/rtmgr-rules.yaml", &exprs, &known);
}
