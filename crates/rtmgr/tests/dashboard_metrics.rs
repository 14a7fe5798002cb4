//! The Grafana dashboard (deploy/grafana/) and the Prometheus alert rules
//! (deploy/prometheus/) name only series that a fresh `rtmgr serve --metrics`
//! exports before any event: every `rtmgr_…` name in their expressions, with
//! its `label="value"` matchers, must match a sample of the daemon's own
//! registry as it starts, so renaming a metric, or a family that appears only
//! with its first event (a panel or alert with no series), fails here. The
//! dashboard's JSON has the shape Grafana imports (panels, targets, datasource).

use rtmgr_core::CpuSet;
use rtmgr_linux::daemon::metrics::Metrics;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(file)
}

/// Label name → value of one sample.
type Labels = BTreeMap<String, String>;

/// Every sample of `text` (OpenMetrics) by name: the label sets it has.
fn samples(text: &str) -> BTreeMap<String, Vec<Labels>> {
    let mut out: BTreeMap<String, Vec<Labels>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, _value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, matchers(l.trim_end_matches('}'))),
            None => (series, Vec::new()),
        };
        out.entry(name.to_string())
            .or_default()
            .push(labels.into_iter().collect());
    }
    out
}

/// The series a daemon with one RT CPU exports at start, before any event.
fn fresh() -> BTreeMap<String, Vec<Labels>> {
    let text = Metrics::new(&CpuSet::parse_list("1").unwrap()).encode();
    let s = samples(&text);
    assert!(s.len() >= 8, "{text}");
    s
}

/// The `label="value"` pairs of a selector's or sample's braces; `=~`, `!=`
/// and `!~` matchers are left out (they select, they name no series).
fn matchers(braces: &str) -> Vec<(String, String)> {
    braces
        .split(',')
        .filter_map(|m| {
            let (k, v) = m.split_once('=')?;
            let v = v.strip_prefix('"')?.strip_suffix('"')?;
            let k = k.trim();
            (!k.ends_with('!') && !k.is_empty()).then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// Every `rtmgr_…` word of `text`, with the equality matchers of the braces
/// right after it (labels Prometheus adds, `instance` and `job`, aside).
fn selectors(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("rtmgr_") {
        let before = rest[..i].chars().next_back();
        let tail = &rest[i..];
        let end = tail.find(|c: char| !word(c)).unwrap_or(tail.len());
        if !before.is_some_and(word) {
            let braces = tail[end..]
                .strip_prefix('{')
                .and_then(|b| b.split_once('}'))
                .map(|(b, _)| matchers(b))
                .unwrap_or_default();
            let own = braces
                .into_iter()
                .filter(|(k, _)| k != "instance" && k != "job");
            out.push((tail[..end].to_string(), own.collect()));
        }
        rest = &tail[end..];
    }
    out
}

fn metric_names(text: &str) -> Vec<String> {
    selectors(text).into_iter().map(|(n, _)| n).collect()
}

/// Each selector of `text` matches a series of a fresh daemon.
fn check_present(what: &str, text: &str, fresh: &BTreeMap<String, Vec<Labels>>) {
    for (name, want) in selectors(text) {
        let series = fresh.get(&name).unwrap_or_else(|| {
            panic!("{what} uses {name}, which a fresh daemon does not export: {fresh:?}")
        });
        assert!(
            series
                .iter()
                .any(|l| want.iter().all(|(k, v)| l.get(k) == Some(v))),
            "{what}: no series of {name} matches {want:?} in a fresh daemon: {series:?}"
        );
    }
}

#[test]
fn metric_names_are_found_in_expressions() {
    let names = metric_names("sum(rate(rtmgr_a_total[5m])) / x_rtmgr_b + rtmgr_c{cpu=\"1\"}");
    assert_eq!(names, ["rtmgr_a_total", "rtmgr_c"]);
    let s = selectors("rtmgr_c{instance=~\"$i\", reason=\"rate\",cpu!=\"2\"} > 0");
    assert_eq!(
        s,
        [("rtmgr_c".into(), vec![("reason".into(), "rate".into())])]
    );
}

#[test]
fn the_dashboard_has_grafanas_shape_and_only_exported_metrics() {
    let fresh = fresh();
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
            check_present(title, expr, &fresh);
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
fn the_alert_rules_see_series_of_a_fresh_daemon() {
    let text = std::fs::read_to_string(deploy("prometheus/rtmgr-rules.yaml")).unwrap();
    let exprs: Vec<String> = metric_names(&text);
    assert!(exprs.len() >= 5, "{exprs:?}");
    check_present("deploy/prometheus/rtmgr-rules.yaml", &text, &fresh());
}

#[test]
fn a_series_that_appears_only_with_its_first_event_is_caught() {
    let fresh = samples("rtmgr_grants_total{cpu=\"1\"} 0\n# EOF\n");
    let absent = std::panic::catch_unwind(|| check_present("t", "rtmgr_refusals_total", &fresh));
    assert!(absent.is_err(), "a family absent before its first event");
    let other =
        std::panic::catch_unwind(|| check_present("t", "rtmgr_grants_total{cpu=\"2\"}", &fresh));
    assert!(
        other.is_err(),
        "a label value absent before its first event"
    );
    check_present("t", "rtmgr_grants_total{cpu=\"1\"}", &fresh);
}
