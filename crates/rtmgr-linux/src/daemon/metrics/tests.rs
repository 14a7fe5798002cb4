//! The metrics as a scraper sees them: fed through the same hooks the daemon
//! uses, scraped with a real HTTP request, and the text checked against the
//! OpenMetrics rules a parser relies on.

use super::*;
use rtmgr_core::protocol::{RefusalKind, ReservationInfo};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

fn granted(cpu: u32) -> Response {
    Response::new(Reply::Granted {
        reservation: Box::new(ReservationInfo {
            id: 1,
            pid: 10,
            uid: 0,
            name: None,
            cpu,
            class: "rt0".into(),
            policy: "SCHED_FIFO".into(),
            period_ns: 1_000_000,
            budget_ns: 100_000,
            deadline_ns: 1_000_000,
            threads: vec![10],
            irq: None,
            response_ns: None,
            rttime_us: 0,
            memlock_bytes: 0,
            memlock_reserved: None,
            io_class: None,
            cache: None,
            asleep: Vec::new(),
            stopped: Vec::new(),
            pending: Vec::new(),
        }),
    })
}

fn refused_on(cpu: u32) -> Response {
    Response::new(Reply::Refused {
        reason: RefusalKind::Admission,
        message: "full".into(),
        cpus: vec![CpuRefusal::Utilisation {
            cpu,
            would: 1.2,
            cap: 0.9,
        }],
        retry_after_ms: None,
    })
}

/// GET `path` with a real HTTP/1.1 request: (status line, headers, body).
fn get(addr: std::net::SocketAddr, method: &str, path: &str) -> (String, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: test\r\nAccept: application/openmetrics-text\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let (status, headers) = head.split_once("\r\n").unwrap();
    (status.into(), headers.into(), body.into())
}

/// Check the OpenMetrics text rules a parser relies on, and return each
/// sample (`name{labels}` → value).
fn parse_openmetrics(text: &str) -> BTreeMap<String, f64> {
    assert!(text.ends_with("# EOF\n"), "ends with # EOF: {text}");
    let mut families: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if *line == "# EOF" {
            assert_eq!(i, lines.len() - 1, "# EOF is the last line");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut w = rest.splitn(3, ' ');
            let (kw, name) = (w.next().unwrap(), w.next().unwrap());
            assert!(["TYPE", "HELP", "UNIT"].contains(&kw), "{line}");
            if kw == "TYPE" {
                let t = w.next().unwrap();
                assert!(["counter", "gauge", "histogram"].contains(&t), "{line}");
                assert!(
                    families.insert(name.into(), t.into()).is_none(),
                    "one TYPE per family"
                );
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value of {line}")),
        };
        let name = series.split('{').next().unwrap();
        let family = families
            .iter()
            .find(|(f, t)| {
                let suffixes: &[&str] = match t.as_str() {
                    "counter" => &["_total", "_created"],
                    "histogram" => &["_bucket", "_count", "_sum", "_created"],
                    _ => &[""],
                };
                suffixes.iter().any(|s| name == format!("{f}{s}"))
            })
            .unwrap_or_else(|| panic!("{name} has a TYPE of its family before it"));
        assert!(family.0.starts_with("rtmgr_"), "{line}");
        if let Some(labels) = series.split_once('{').map(|(_, l)| l) {
            assert!(labels.ends_with('}'), "{line}");
            for pair in labels.trim_end_matches('}').split(',') {
                let (k, v) = pair.split_once('=').unwrap();
                assert!(
                    k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                    "{line}"
                );
                assert!(v.starts_with('"') && v.ends_with('"'), "{line}");
            }
        }
        samples.insert(series.to_string(), value);
    }
    samples
}

#[test]
fn a_scrape_shows_every_rt_cpu_and_what_the_hooks_fed() {
    let m = Arc::new(Metrics::new(&CpuSet::parse_list("1-2").unwrap()));
    for late in [3_000, 40_000, 2_000_000] {
        m.guard_sample(1, late);
    }
    m.eviction(1, "guard", 2);
    m.eviction(2, "kernel_entry", 1);
    m.response(&granted(1));
    m.response(&granted(1));
    m.response(&refused_on(2));
    m.drift("irq_masks_restored", 3);
    m.drift("tasks_narrowed", 0);
    m.starvation_boost(2);
    m.stranded(1);
    m.pending_fallback(2, 3);
    m.loop_yield();
    m.answer_time(AnswerOp::Reserve, 2_000_000);
    m.answer_time(AnswerOp::Reserve, 40_000);
    m.answer_time(AnswerOp::Other, 15_000);
    let exporter = Exporter::start("127.0.0.1:0".parse().unwrap(), m.clone()).unwrap();
    let (status, headers, body) = get(exporter.local_addr(), "GET", "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        headers.contains(&format!("Content-Type: {}", http::CONTENT_TYPE)),
        "{headers}"
    );
    assert!(
        headers.contains(&format!("Content-Length: {}", body.len())),
        "{headers}"
    );
    let s = parse_openmetrics(&body);
    let v = |k: &str| *s.get(k).unwrap_or_else(|| panic!("{k} missing in\n{body}"));
    assert_eq!(v("rtmgr_guard_latency_seconds_count{cpu=\"1\"}"), 3.0);
    assert_eq!(v("rtmgr_guard_latency_seconds_count{cpu=\"2\"}"), 0.0);
    assert_eq!(
        v("rtmgr_guard_latency_seconds_bucket{le=\"+Inf\",cpu=\"1\"}"),
        3.0
    );
    assert!((v("rtmgr_guard_latency_seconds_sum{cpu=\"1\"}") - 0.002043).abs() < 1e-9);
    // Buckets are cumulative: up to 4 µs one sample, up to 64 µs two.
    assert_eq!(
        v("rtmgr_guard_latency_seconds_bucket{le=\"0.000004\",cpu=\"1\"}"),
        1.0
    );
    assert_eq!(
        v("rtmgr_guard_latency_seconds_bucket{le=\"0.000064\",cpu=\"1\"}"),
        2.0
    );
    let mut buckets: Vec<(f64, f64)> = s
        .iter()
        .filter(|(k, _)| {
            k.starts_with("rtmgr_guard_latency_seconds_bucket") && k.ends_with("cpu=\"1\"}")
        })
        .map(|(k, v)| {
            let le = k.split("le=\"").nth(1).unwrap().split('"').next().unwrap();
            (
                if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                },
                *v,
            )
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(buckets.len(), 22, "21 bounds and +Inf");
    assert!(
        buckets.windows(2).all(|w| w[0].1 <= w[1].1),
        "cumulative: {buckets:?}"
    );
    assert_eq!(v("rtmgr_grants_total{cpu=\"1\"}"), 2.0);
    assert_eq!(v("rtmgr_grants_total{cpu=\"2\"}"), 0.0);
    assert_eq!(v("rtmgr_cpu_refusals_total{cpu=\"2\"}"), 1.0);
    assert_eq!(v("rtmgr_refusals_total{reason=\"admission\"}"), 1.0);
    assert_eq!(v("rtmgr_requests_total"), 3.0);
    assert_eq!(v("rtmgr_evictions_total{cpu=\"1\",cause=\"guard\"}"), 2.0);
    assert_eq!(
        v("rtmgr_evictions_total{cpu=\"2\",cause=\"kernel_entry\"}"),
        1.0
    );
    assert_eq!(v("rtmgr_starvation_boosts_total{cpu=\"1\"}"), 0.0);
    assert_eq!(v("rtmgr_starvation_boosts_total{cpu=\"2\"}"), 1.0);
    assert_eq!(v("rtmgr_stranded_repairs_total{cpu=\"1\"}"), 1.0);
    assert_eq!(v("rtmgr_stranded_repairs_total{cpu=\"2\"}"), 0.0);
    assert_eq!(v("rtmgr_pending_fallbacks_total{cpu=\"1\"}"), 0.0);
    assert_eq!(v("rtmgr_pending_fallbacks_total{cpu=\"2\"}"), 3.0);
    assert_eq!(v("rtmgr_loop_yields_total"), 1.0);
    assert_eq!(
        v("rtmgr_drift_repairs_total{kind=\"irq_masks_restored\"}"),
        3.0
    );
    assert_eq!(
        v("rtmgr_drift_repairs_total{kind=\"tasks_narrowed\"}"),
        0.0,
        "there from the start, nothing added for nothing repaired"
    );
    assert!(
        body.contains("# UNIT rtmgr_guard_latency_seconds seconds"),
        "{body}"
    );
    assert_eq!(v("rtmgr_answer_seconds_count{op=\"reserve\"}"), 2.0);
    assert_eq!(v("rtmgr_answer_seconds_count{op=\"release\"}"), 0.0);
    assert_eq!(v("rtmgr_answer_seconds_count{op=\"other\"}"), 1.0);
    // 10 µs ×1.5: 40 µs is under the 50.625 µs bound, 2 ms is not.
    assert_eq!(
        v("rtmgr_answer_seconds_bucket{le=\"0.000050625\",op=\"reserve\"}"),
        1.0
    );
}

#[test]
fn a_fresh_scrape_has_every_known_series_at_zero() {
    let m = Metrics::new(&CpuSet::single(3));
    let body = m.encode();
    let s = parse_openmetrics(&body);
    let v = |k: &str| *s.get(k).unwrap_or_else(|| panic!("{k} missing in\n{body}"));
    for reason in [
        "admission",
        "policy",
        "rate",
        "not_served",
        "permission",
        "irq",
        "resource",
    ] {
        assert_eq!(
            v(&format!("rtmgr_refusals_total{{reason=\"{reason}\"}}")),
            0.0
        );
    }
    for kind in [
        "grants_reapplied",
        "rt_cpu_offline",
        "irq_masks_restored",
        "cgroups_restored",
        "cache_restored",
    ] {
        assert_eq!(
            v(&format!("rtmgr_drift_repairs_total{{kind=\"{kind}\"}}")),
            0.0
        );
    }
    assert_eq!(v("rtmgr_requests_total"), 0.0);
    assert_eq!(v("rtmgr_loop_yields_total"), 0.0);
    assert_eq!(v("rtmgr_cpu_refusals_total{cpu=\"3\"}"), 0.0);
    for op in ["reserve", "release", "other"] {
        assert_eq!(
            v(&format!("rtmgr_answer_seconds_count{{op=\"{op}\"}}")),
            0.0
        );
    }
    assert!(
        s.values().all(|&x| x == 0.0),
        "a fresh daemon counted nothing: {body}"
    );
}

#[test]
fn other_paths_and_methods_are_answered_and_the_thread_stops() {
    let m = Arc::new(Metrics::new(&CpuSet::single(1)));
    let exporter = Exporter::start("127.0.0.1:0".parse().unwrap(), m).unwrap();
    let addr = exporter.local_addr();
    assert_eq!(get(addr, "GET", "/").0, "HTTP/1.1 200 OK");
    assert_eq!(get(addr, "GET", "/nope").0, "HTTP/1.1 404 Not Found");
    assert_eq!(
        get(addr, "POST", "/metrics").0,
        "HTTP/1.1 405 Method Not Allowed"
    );
    let (status, _, body) = get(addr, "HEAD", "/metrics");
    assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 200 OK", ""));
    drop(exporter);
    assert!(
        TcpStream::connect(addr).is_err(),
        "the port is closed once dropped"
    );
}
