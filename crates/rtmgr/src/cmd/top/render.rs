//! Drawing `rtmgr top` with ratatui (issue 23; cargo feature `top`): the
//! daemon's counters on top, a table of RT CPUs (latency, steal, IRQs, kernel
//! threads, guests), NRT loads, reservations and their budgets, and a detail
//! box for the picked row. Fits 80×24; wider terminals get more columns.

use super::snapshot::{Reservation, RtCpu, Snapshot};
use super::view::{Pane, View};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;

const DASH: &str = "-";
/// Terminal widths from which the tables show every column.
const WIDE: u16 = 100;

/// "850ns", "12.3µs", "1.20ms", "1.5s".
pub fn duration(ns: u64) -> String {
    match ns {
        0..=999 => format!("{ns}ns"),
        1_000..=99_999 => format!("{:.1}µs", ns as f64 / 1e3),
        100_000..=999_999 => format!("{}µs", ns / 1_000),
        1_000_000..=999_999_999 => format!("{:.2}ms", ns as f64 / 1e6),
        _ => format!("{:.1}s", ns as f64 / 1e9),
    }
}

/// The last `width` windows as block characters scaled to their largest.
pub fn sparkline(history: &[u64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let tail = &history[history.len().saturating_sub(width)..];
    let top = tail.iter().copied().max().unwrap_or(0).max(1);
    tail.iter()
        .map(|&v| match v {
            0 => ' ',
            v => BARS[((v * 7 + top / 2) / top).min(7) as usize],
        })
        .collect()
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| DASH.to_string(), |v| v.to_string())
}

fn percent(v: Option<f64>) -> String {
    v.map_or_else(|| DASH.to_string(), |v| format!("{:.0}%", v * 100.0))
}

fn uptime(s: f64) -> String {
    let s = s as u64;
    match s {
        0..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

struct Theme {
    color: bool,
}

impl Theme {
    fn fg(&self, c: Color) -> Style {
        if self.color {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }
    fn title(&self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }
    fn picked(&self) -> Style {
        Style::default().add_modifier(Modifier::REVERSED)
    }
    /// Latency above 100 µs stands out.
    fn latency(&self, ns: Option<u64>) -> Style {
        match ns {
            Some(n) if n >= 100_000 => self.fg(Color::Red).add_modifier(Modifier::BOLD),
            Some(n) if n >= 20_000 => self.fg(Color::Yellow),
            _ => Style::default(),
        }
    }
}

/// The whole screen.
pub fn draw(f: &mut Frame, snap: &Snapshot, view: &View) {
    let theme = Theme { color: view.color };
    let area = f.area();
    let nrt_lines = (snap.nrt.len() as u16)
        .div_ceil(per_line(area.width))
        .max(1);
    let rt_rows = (snap.rt.len() as u16).max(1);
    // The RT table as tall as its rows, leaving the reservations 4 lines.
    let rt_height = (rt_rows + 3)
        .min(area.height.saturating_sub(3 + nrt_lines + 2 + 4 + 1))
        .max(4);
    let [head, rt, nrt, res, keys] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Length(rt_height),
        Constraint::Length(nrt_lines + 2),
        Constraint::Min(4),
        Constraint::Length(1),
    ])
    .areas(area);
    f.render_widget(Paragraph::new(header(snap, view, &theme)), head);
    draw_cpus(f, rt, snap, view, &theme);
    f.render_widget(nrt_loads(snap, nrt.width, &theme), nrt);
    draw_reservations(f, res, snap, view, &theme);
    let help = "q quit  p pause  s sort  tab CPUs/reservations  ↑↓ pick  enter detail";
    f.render_widget(Paragraph::new(help).style(theme.fg(Color::DarkGray)), keys);
    if view.detail {
        draw_detail(f, area, snap, view, &theme);
    }
}

fn header<'a>(snap: &'a Snapshot, view: &View, theme: &Theme) -> Vec<Line<'a>> {
    let mut first = vec![Span::styled("rtmgr top", theme.title())];
    first.push(Span::raw(match &snap.daemon {
        Some(d) => format!(
            " · daemon {} up {} · balancer {}",
            d.pid,
            uptime(d.uptime_s),
            d.balancer
        ),
        None => format!(" · {}", snap.source),
    }));
    first.push(Span::raw(match snap.interval_ms {
        0 => " · first reading".to_string(),
        ms => format!(" · Δ {:.1}s", ms as f64 / 1e3),
    }));
    if view.paused {
        first.push(Span::styled(
            " · PAUSED",
            Style::default().add_modifier(Modifier::BOLD),
        ));
    }
    let second = match &snap.daemon {
        Some(d) => format!(
            "req {} granted {} refused {} err {} · drift repairs {} · evictions {} · boosts {}",
            d.requests,
            d.granted,
            d.refused,
            d.errors,
            d.drift_total(),
            d.evictions,
            d.starvation_boosts
        ),
        None => snap.notes.join("; "),
    };
    let third = match (&snap.probe, &snap.daemon) {
        (Some(p), _) => Line::styled(
            format!("latency: our probe, {p} (the one change top makes)"),
            theme.fg(Color::Yellow),
        ),
        (None, Some(_)) => Line::raw("latency: the daemon's latency guard, last 1 s"),
        (None, None) => Line::raw("latency: - (no daemon; `rtmgr top --probe` measures it)"),
    };
    vec![Line::from(first), Line::raw(second), third]
}

fn block<'a>(title: String, focused: bool, theme: &Theme) -> Block<'a> {
    let style = if focused {
        theme.title()
    } else {
        Style::default()
    };
    Block::default()
        .borders(Borders::ALL)
        .title(Span::styled(title, style))
}

fn draw_cpus(f: &mut Frame, area: Rect, snap: &Snapshot, view: &View, theme: &Theme) {
    let wide = area.width >= WIDE;
    let spark = if wide { 24 } else { 10 };
    let mut head = vec![
        "CPU",
        "p50",
        "p99",
        "max",
        "recent max",
        "steal",
        "stall",
        "IRQs",
        "kthr",
        "guests",
        "lend",
    ];
    let mut widths = vec![3, 7, 7, 7, spark, 5, 5, 5, 4, 6, 4];
    if wide {
        head.extend(["load", "evict", "boost"]);
        widths.extend([5, 5, 5]);
    }
    let rows = view.sorted_cpus(snap).into_iter().map(|c| {
        let lat = |pick: fn(&rtmgr_core::protocol::LatencyWindow) -> u64| {
            let v = c.latency.as_ref().map(pick);
            (opt(v.map(duration)), theme.latency(v))
        };
        let (p50, s50) = lat(|l| l.p50_ns);
        let (p99, s99) = lat(|l| l.p99_ns);
        let (max, smax) = lat(|l| l.max_ns);
        let mut cells = vec![
            ratatui::widgets::Cell::from(c.cpu.to_string()),
            ratatui::widgets::Cell::from(p50).style(s50),
            ratatui::widgets::Cell::from(p99).style(s99),
            ratatui::widgets::Cell::from(max).style(smax),
            ratatui::widgets::Cell::from(sparkline(&c.history_ns, spark as usize)),
        ];
        let mut text = vec![
            opt(c.steal_ticks),
            opt(c.host_stalls),
            opt(c.irqs),
            c.kthreads.len().to_string(),
            opt(c.guests.as_ref().map(Vec::len)),
            opt(c.lending.as_ref().map(|l| if l.on { "on" } else { "off" })),
        ];
        if wide {
            text.extend([
                percent(c.load),
                opt(c.evictions_total()),
                opt(c.starvation_boosts),
            ]);
        }
        cells.extend(text.into_iter().map(ratatui::widgets::Cell::from));
        Row::new(cells)
    });
    let title = format!("RT CPUs · sort {}", sort_of(view, Pane::Cpus));
    let table = Table::new(rows, widths.into_iter().map(Constraint::Length))
        .header(Row::new(head).style(Style::default().add_modifier(Modifier::BOLD)))
        .block(block(title, view.pane == Pane::Cpus, theme))
        .row_highlight_style(theme.picked());
    let mut state = TableState::default();
    if view.pane == Pane::Cpus && !snap.rt.is_empty() {
        state.select(Some(view.cpu_row));
    }
    if snap.rt.is_empty() {
        let none = Paragraph::new("no RT CPUs (no partition applied)").block(block(
            "RT CPUs".into(),
            false,
            theme,
        ));
        f.render_widget(none, area);
    } else {
        f.render_stateful_widget(table, area, &mut state);
    }
}

fn sort_of(view: &View, pane: Pane) -> &'static str {
    let mut v = view.clone();
    v.pane = pane;
    v.sort_name()
}

/// NRT CPUs per line: "cpu0 ▕███░░░░░▏ 45%" is 18 columns.
fn per_line(width: u16) -> u16 {
    (width.saturating_sub(2) / 19).max(1)
}

fn nrt_loads<'a>(snap: &Snapshot, width: u16, theme: &Theme) -> Paragraph<'a> {
    let cells: Vec<String> = snap
        .nrt
        .iter()
        .map(|c| {
            let bar: String = match c.load {
                Some(l) => (0..8)
                    .map(|i| {
                        if (i as f64) < l * 8.0 - 0.5 {
                            '█'
                        } else {
                            '░'
                        }
                    })
                    .collect(),
                None => "        ".into(),
            };
            format!("cpu{:<3}▕{bar}▏{:>4}", c.cpu, percent(c.load))
        })
        .collect();
    let lines: Vec<Line> = cells
        .chunks(per_line(width) as usize)
        .map(|c| Line::raw(c.join(" ")))
        .collect();
    Paragraph::new(lines).block(block("NRT CPUs · load".into(), false, theme))
}

fn draw_reservations(f: &mut Frame, area: Rect, snap: &Snapshot, view: &View, theme: &Theme) {
    let wide = area.width >= WIDE;
    let mut head = vec!["ID", "NAME", "PID", "CPU", "CLASS", "BUDGET/PERIOD", "USED"];
    let mut widths = vec![4, 14, 7, 3, 8, 17, 6];
    if wide {
        head.extend(["POLICY", "THREADS"]);
        widths.extend([14, 8]);
    }
    let rows = view.sorted_reservations(snap).into_iter().map(|r| {
        let mut cells = vec![
            r.id.to_string(),
            r.name.clone().unwrap_or_else(|| DASH.into()),
            r.pid.to_string(),
            r.cpu.to_string(),
            r.class.clone(),
            format!("{}/{}", duration(r.budget_ns), duration(r.period_ns)),
            percent(r.budget_used),
        ];
        if wide {
            cells.extend([r.policy.clone(), r.threads.len().to_string()]);
        }
        Row::new(cells)
    });
    let title = format!(
        "Reservations ({}) · sort {}",
        snap.reservations.len(),
        sort_of(view, Pane::Reservations)
    );
    let table = Table::new(rows, widths.into_iter().map(Constraint::Length))
        .header(Row::new(head).style(Style::default().add_modifier(Modifier::BOLD)))
        .block(block(title, view.pane == Pane::Reservations, theme))
        .row_highlight_style(theme.picked());
    let mut state = TableState::default();
    if view.pane == Pane::Reservations && !snap.reservations.is_empty() {
        state.select(Some(view.reservation_row));
    }
    f.render_stateful_widget(table, area, &mut state);
}

fn draw_detail(f: &mut Frame, area: Rect, snap: &Snapshot, view: &View, theme: &Theme) {
    let (title, lines) = match view.pane {
        Pane::Cpus => match view.sorted_cpus(snap).get(view.cpu_row) {
            Some(c) => (format!("RT CPU {}", c.cpu), cpu_detail(c)),
            None => return,
        },
        Pane::Reservations => match view.sorted_reservations(snap).get(view.reservation_row) {
            Some(r) => (format!("Reservation {}", r.id), reservation_detail(r)),
            None => return,
        },
    };
    let [_, mid, _] = Layout::horizontal([
        Constraint::Percentage(10),
        Constraint::Percentage(80),
        Constraint::Percentage(10),
    ])
    .areas(area);
    let [_, box_area, _] = Layout::vertical([
        Constraint::Percentage(15),
        Constraint::Percentage(70),
        Constraint::Percentage(15),
    ])
    .areas(mid);
    f.render_widget(Clear, box_area);
    let p = Paragraph::new(lines.into_iter().map(Line::raw).collect::<Vec<_>>())
        .wrap(Wrap { trim: false })
        .block(block(format!("{title} · esc closes"), true, theme));
    f.render_widget(p, box_area);
}

fn cpu_detail(c: &RtCpu) -> Vec<String> {
    let mut out = vec![match &c.latency {
        Some(l) => format!(
            "latency: p50 {} p99 {} max {} ({} samples)",
            duration(l.p50_ns),
            duration(l.p99_ns),
            duration(l.max_ns),
            l.samples
        ),
        None => "latency: -".into(),
    }];
    out.push(format!(
        "load {} · steal {} ticks · host stalls {}",
        percent(c.load),
        opt(c.steal_ticks),
        opt(c.host_stalls)
    ));
    let irqs: Vec<String> = c
        .irq_sources
        .iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect();
    out.push(format!(
        "IRQs {}: {}",
        opt(c.irqs),
        if irqs.is_empty() {
            DASH.into()
        } else {
            irqs.join(", ")
        }
    ));
    out.push(format!(
        "kernel threads bound here: {}",
        if c.kthreads.is_empty() {
            DASH.into()
        } else {
            c.kthreads.join(" ")
        }
    ));
    out.push(match &c.lending {
        Some(l) => format!("lending {}: {}", if l.on { "on" } else { "off" }, l.why),
        None => "lending: -".into(),
    });
    out.push(match &c.guests {
        Some(g) if !g.is_empty() => format!(
            "guests: {}",
            g.iter()
                .map(|g| format!("{} {} ({} evictions)", g.pid, g.comm, g.evictions))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(_) => "guests: none".into(),
        None => "guests: -".into(),
    });
    out.push(match &c.evictions {
        Some(e) => format!(
            "evictions since start: {} · starvation boosts {}",
            e.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            opt(c.starvation_boosts)
        ),
        None => "evictions: -".into(),
    });
    out
}

fn reservation_detail(r: &Reservation) -> Vec<String> {
    vec![
        format!(
            "name {} · pid {} · RT CPU {}",
            r.name.as_deref().unwrap_or(DASH),
            r.pid,
            r.cpu
        ),
        format!("class {} · {}", r.class, r.policy),
        format!(
            "budget {} every {} · used {} of it",
            duration(r.budget_ns),
            duration(r.period_ns),
            percent(r.budget_used)
        ),
        format!(
            "threads: {}",
            r.threads
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        ),
    ]
}

/// The height that shows every row of `snap` at `width` (at least 24).
pub fn text_height(snap: &Snapshot, width: u16) -> u16 {
    let nrt_lines = (snap.nrt.len() as u16).div_ceil(per_line(width)).max(1);
    let rt = (snap.rt.len() as u16).max(1) + 3;
    let res = snap.reservations.len() as u16 + 3;
    (3 + rt + nrt_lines + 2 + res.max(4) + 1).max(24)
}

/// The screen as text, one line per row (trailing blanks trimmed): `--once`
/// and the README's capture.
pub fn to_text(snap: &Snapshot, view: &View, width: u16, height: u16) -> String {
    let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, height))
        .expect("a test backend never fails");
    term.draw(|f| draw(f, snap, view))
        .expect("a test backend never fails");
    let buf = term.backend().buffer();
    (0..height)
        .map(|y| {
            let line: String = (0..width).map(|x| buf[(x, y)].symbol()).collect();
            line.trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}
