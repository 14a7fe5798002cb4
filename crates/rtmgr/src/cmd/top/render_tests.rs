//! The screen of `rtmgr top` for a fake daemon state, rendered by ratatui's
//! TestBackend and compared with the text captures in `snapshots/` (80×24 and
//! 120×40, no colour). `RTMGR_UPDATE_SNAPSHOTS=1` rewrites them after a
//! deliberate change of the screen (then read the diff).

use super::render::{duration, sparkline, to_text};
use super::snapshot::{DaemonLine, NrtCpu, Reservation, RtCpu, Snapshot, SCHEMA};
use super::view::{Key, View};
use ratatui::style::Color;
use rtmgr_core::protocol::{Guest, LatencyWindow, Lending};
use std::collections::BTreeMap;

/// A daemon with two RT CPUs (one lent, one with a late window), two NRT
/// CPUs and three reservations.
pub fn fake_daemon_state() -> Snapshot {
    let latency = |p50, p99, max| {
        Some(LatencyWindow {
            samples: 100,
            p50_ns: p50,
            p99_ns: p99,
            max_ns: max,
        })
    };
    Snapshot {
        schema: SCHEMA.into(),
        source: "daemon".into(),
        interval_ms: 1000,
        daemon: Some(DaemonLine {
            pid: 4242,
            uptime_s: 3725.0,
            requests: 17,
            granted: 12,
            refused: 3,
            errors: 1,
            drift: BTreeMap::from([("affinity".into(), 2), ("policy".into(), 1)]),
            evictions: 5,
            starvation_boosts: 1,
            balancer: "running".into(),
        }),
        rt: vec![
            RtCpu {
                cpu: 2,
                latency: latency(2_100, 5_300, 12_400),
                history_ns: vec![9_000, 12_000, 4_000, 0, 30_000, 12_400],
                load: Some(0.25),
                steal_ticks: Some(0),
                irqs: Some(3),
                irq_sources: vec![("LOC".into(), 3)],
                kthreads: vec!["ksoftirqd/2".into(), "migration/2".into()],
                guests: Some(vec![Guest {
                    pid: 900,
                    comm: "make".into(),
                    evictions: 4,
                }]),
                lending: Some(Lending {
                    on: true,
                    why: "guard quiet".into(),
                }),
                evictions: Some(BTreeMap::from([("guard".into(), 4)])),
                starvation_boosts: Some(0),
                ..RtCpu::default()
            },
            RtCpu {
                cpu: 3,
                latency: latency(3_000, 180_000, 1_250_000),
                history_ns: vec![1_250_000, 40_000],
                load: Some(0.9),
                steal_ticks: Some(7),
                irqs: Some(120),
                kthreads: vec!["ksoftirqd/3".into()],
                evictions: Some(BTreeMap::from([("kernel_entry".into(), 1)])),
                starvation_boosts: Some(1),
                ..RtCpu::default()
            },
        ],
        nrt: vec![
            NrtCpu {
                cpu: 0,
                load: Some(0.5),
                steal_ticks: Some(1),
            },
            NrtCpu {
                cpu: 1,
                load: None,
                steal_ticks: None,
            },
        ],
        reservations: (1..=3)
            .map(|id| Reservation {
                id,
                name: (id != 2).then(|| format!("audio{id}")),
                pid: 1000 + id as u32,
                cpu: 2 + (id as u32 % 2),
                class: "rt0".into(),
                policy: "SCHED_DEADLINE".into(),
                budget_ns: 500_000 * id,
                period_ns: 4_000_000,
                threads: vec![1000 + id as u32],
                budget_used: (id != 3).then_some(0.4 * id as f64),
            })
            .collect(),
        ..Snapshot::default()
    }
}

fn check(name: &str, screen: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/cmd/top/snapshots")
        .join(name);
    if std::env::var_os("RTMGR_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("{screen}\n")).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (RTMGR_UPDATE_SNAPSHOTS=1 writes it)",
            path.display()
        )
    });
    assert_eq!(
        screen,
        want.trim_end_matches('\n'),
        "the screen differs from {}",
        path.display()
    );
}

#[test]
fn the_screen_of_a_fake_daemon_at_80x24_and_120x40() {
    let s = fake_daemon_state();
    let view = View::new(false);
    check("daemon-80x24.txt", &to_text(&s, &view, 80, 24));
    check("daemon-120x40.txt", &to_text(&s, &view, 120, 40));
}

#[test]
fn picking_a_cpu_sorted_by_p99_shows_its_detail() {
    let s = fake_daemon_state();
    let mut view = View::new(false);
    view.key(Key::Sort, &s);
    view.key(Key::Detail, &s);
    let screen = to_text(&s, &view, 80, 24);
    check("detail-cpu3-80x24.txt", &screen);
    assert!(screen.contains("RT CPU 3 · esc closes"), "{screen}");
    view.key(Key::Close, &s);
    view.key(Key::SwitchPane, &s);
    view.key(Key::Down, &s);
    view.key(Key::Detail, &s);
    let screen = to_text(&s, &view, 80, 24);
    assert!(
        screen.contains("Reservation 2") && screen.contains("budget 1.00ms every 4.00ms"),
        "{screen}"
    );
}

#[test]
fn no_daemon_shows_dashes_and_how_to_probe() {
    let mut s = fake_daemon_state();
    s.daemon = None;
    s.source = "partition in place".into();
    s.notes = vec!["no daemon (no rtmgr daemon at /run/rtmgr/rtmgr.sock)".into()];
    s.reservations.clear();
    for c in &mut s.rt {
        *c = RtCpu {
            cpu: c.cpu,
            kthreads: c.kthreads.clone(),
            ..RtCpu::default()
        };
    }
    let screen = to_text(&s, &View::new(false), 80, 24);
    check("partition-80x24.txt", &screen);
    assert!(
        screen.contains("`rtmgr top --probe` measures it"),
        "{screen}"
    );
    s.probe = Some("SCHED_FIFO 99, every 10 ms".into());
    let screen = to_text(&s, &View::new(false), 80, 24);
    assert!(
        screen.contains("latency: our probe, SCHED_FIFO 99"),
        "{screen}"
    );
}

/// Colours of every cell but the defaults.
fn colours(view: &View) -> usize {
    let s = fake_daemon_state();
    let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(120, 40)).unwrap();
    term.draw(|f| super::render::draw(f, &s, view)).unwrap();
    term.backend()
        .buffer()
        .content()
        .iter()
        .filter(|c| c.fg != Color::Reset)
        .count()
}

#[test]
fn no_color_draws_without_colour() {
    assert!(colours(&View::new(true)) > 0);
    assert_eq!(colours(&View::new(false)), 0);
}

#[test]
fn durations_and_sparklines_read_at_a_glance() {
    let d: Vec<String> = [850, 12_345, 250_000, 1_200_000, 2_500_000_000]
        .map(duration)
        .into();
    assert_eq!(d, ["850ns", "12.3µs", "250µs", "1.20ms", "2.5s"]);
    assert_eq!(sparkline(&[0, 1, 4, 8], 3), "▂▅█");
    assert_eq!(sparkline(&[0, 8], 8), " █");
    assert_eq!(sparkline(&[], 8), "");
}

#[test]
fn the_readme_shows_the_80x24_capture() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let screen = to_text(&fake_daemon_state(), &View::new(false), 80, 24);
    assert!(
        readme.contains(&screen),
        "README's capture of rtmgr top differs from:\n{screen}"
    );
}
