//! `rtmgr serve --metrics`, live (root, 2 CPUs; skipped with the reason
//! otherwise): a daemon with its balancer and latency guard, one grant and one
//! admission refusal, scraped over real HTTP until the guard's histogram and
//! the counters show them; then SIGTERM gives the machine back. The text
//! format itself is checked in rtmgr-linux's daemon/metrics tests.

mod serve_common;

use serve_common::{eventually, scrape, scraped_value as value, Live};
use std::net::{SocketAddr, TcpListener};

#[test]
fn a_scrape_of_a_live_daemon_shows_the_guard_and_the_grants() {
    let Some(live) = Live::new() else { return };
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let daemon = live.start(&format!("balancer = true\nmetrics = \"{addr}\"\n"));
    let cpu = live.rt_cpu;
    let mut granted =
        live.reserve_child(&["--period", "10ms", "--budget", "1ms"], &["sleep", "30"]);
    let refused = live
        .reserve_child(&["--period", "10ms", "--budget", "9500us"], &["true"])
        .wait_with_output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "9.5 ms of 10 ms is over the 0.9 cap"
    );
    let mut last = String::new();
    eventually("the guard's samples and the grant in a scrape", || {
        last = scrape(addr).unwrap_or_default();
        value(
            &last,
            &format!("rtmgr_guard_latency_seconds_count{{cpu=\"{cpu}\"}}"),
        )
        .is_some_and(|n| n > 0.0)
            && value(&last, &format!("rtmgr_grants_total{{cpu=\"{cpu}\"}}")) == Some(1.0)
    });
    assert!(last.ends_with("# EOF\n"), "{last}");
    assert_eq!(
        value(&last, "rtmgr_refusals_total{reason=\"admission\"}"),
        Some(1.0),
        "{last}"
    );
    assert_eq!(
        value(&last, &format!("rtmgr_cpu_refusals_total{{cpu=\"{cpu}\"}}")),
        Some(1.0),
        "{last}"
    );
    assert!(
        value(
            &last,
            &format!("rtmgr_starvation_boosts_total{{cpu=\"{cpu}\"}}")
        )
        .is_some(),
        "{last}"
    );
    let _ = granted.kill();
    let _ = granted.wait();
    assert!(daemon.stop().success());
    assert!(scrape(addr).is_none(), "the endpoint stops with the daemon");
    live.assert_restored("after SIGTERM");
}
