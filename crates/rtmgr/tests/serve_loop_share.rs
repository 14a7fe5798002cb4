//! The request loop under a flood of requests (root): clients that reserve
//! and release in a closed loop, each blocked in `read` for its answers,
//! keep the loop busy; it yields its SCHED_FIFO for the rest of each window
//! once past its budget (`status` counts it, and so does the metric
//! `rtmgr_loop_yields_total` with the feature `metrics`), every request is still
//! answered, and the loop is back at SCHED_FIFO once the flood is over.
//! What the bound does for the NRT CPU's other tasks is measured in
//! docs/protocol.md, not asserted here.

mod serve_common;

use rtmgr_sys::sched::SCHED_FIFO;
use serve_common::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// One raw client: reserve rt0 and release it, again and again, for `run`;
/// how many round trips it made, or the first answer that was not one.
fn closed_loop(socket: &std::path::Path, run: Duration) -> Result<u32, String> {
    let s = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(s.try_clone().map_err(|e| e.to_string())?);
    let mut ask = |line: String| -> Result<serde_json::Value, String> {
        (&s).write_all(line.as_bytes()).map_err(|e| e.to_string())?;
        let mut answer = String::new();
        lines.read_line(&mut answer).map_err(|e| e.to_string())?;
        serde_json::from_str(&answer).map_err(|e| format!("{e}: {answer}"))
    };
    let tid = rtmgr_sys::sched::gettid();
    let t0 = Instant::now();
    let mut trips = 0;
    while t0.elapsed() < run {
        let r = ask(format!(
            "{{\"v\":1,\"op\":\"reserve\",\"class\":\"rt0\",\"period_ns\":10000000,\"budget_ns\":500000,\"threads\":[{tid}]}}\n"
        ))?;
        let Some(id) = r["reservation"]["id"].as_u64() else {
            return Err(r.to_string());
        };
        let r = ask(format!("{{\"v\":1,\"op\":\"release\",\"id\":{id}}}\n"))?;
        if r["result"] != "released" {
            return Err(r.to_string());
        }
        trips += 1;
    }
    Ok(trips)
}

#[test]
fn a_flood_of_requests_makes_the_loop_yield_and_every_one_is_answered() {
    let Some(live) = Live::new() else { return };
    // With the feature, the yields are scraped too.
    #[cfg(feature = "metrics")]
    let metrics = Some(
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap(),
    );
    #[cfg(not(feature = "metrics"))]
    let metrics: Option<std::net::SocketAddr> = None;
    let exporter = metrics.map_or(String::new(), |a| format!("metrics = \"{a}\"\n"));
    // Root without the default rule's rate limit, as the bench runs it.
    let d = live.start(&format!(
        "{exporter}[[client]]\nusers = [\"root\"]\nmax_priority = 98\nmax_reservations = 64\nrequests_per_burst = 1000000\nburst_s = 1\n"
    ));
    let mut c = live.client();
    assert_eq!(c.status().unwrap().loop_yields, 0, "an idle loop");
    let flood: Vec<_> = (0..8)
        .map(|_| {
            let socket = live.socket();
            std::thread::spawn(move || closed_loop(&socket, Duration::from_secs(2)))
        })
        .collect();
    let trips: Vec<u32> = flood
        .into_iter()
        .map(|t| t.join().unwrap().unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert!(
        trips.iter().all(|&n| n > 0),
        "round trips per client: {trips:?}"
    );
    let st = c.status().unwrap();
    assert!(
        st.loop_yields > 0,
        "8 clients in a closed loop for 2 s and the loop never past its budget? {} requests answered; log:\n{}",
        st.requests,
        live.log()
    );
    if let Some(addr) = metrics {
        let text = scrape(addr).expect("a scrape");
        assert_eq!(
            scraped_value(&text, "rtmgr_loop_yields_total"),
            Some(c.status().unwrap().loop_yields as f64),
            "the metric counts what status says"
        );
    }
    // Quiet again: SCHED_FIFO from the next window on.
    eventually("the loop back at SCHED_FIFO", || {
        policy_of(d.pid()) == Some(SCHED_FIFO)
    });
    assert!(listed(&mut c).is_empty());
    let st = d.stop();
    assert!(st.success(), "daemon exit {st}");
    live.assert_restored("after the flood");
}
