//! What the user of `rtmgr top` looks at (issue 23): the focused pane, the
//! sort of each table, the picked row, detail, pause, colour. Keys change it;
//! the renderer and `--once` read it. No terminal here, so it is tested plainly.

use super::snapshot::{Reservation, RtCpu, Snapshot};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Cpus,
    Reservations,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuSort {
    Cpu,
    P99,
    Max,
    Steal,
    Irqs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservationSort {
    Id,
    Cpu,
    Used,
    Name,
}

/// A key, as the terminal loop hands it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Quit,
    Pause,
    Sort,
    SwitchPane,
    Up,
    Down,
    Detail,
    Close,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub pane: Pane,
    pub cpu_sort: CpuSort,
    pub reservation_sort: ReservationSort,
    /// The picked row of each table (index in its sorted order).
    pub cpu_row: usize,
    pub reservation_row: usize,
    pub detail: bool,
    pub paused: bool,
    /// False under NO_COLOR: emphasis by bold and reverse video only.
    pub color: bool,
    pub quit: bool,
}

impl View {
    pub fn new(color: bool) -> View {
        View {
            pane: Pane::Cpus,
            cpu_sort: CpuSort::Cpu,
            reservation_sort: ReservationSort::Id,
            cpu_row: 0,
            reservation_row: 0,
            detail: false,
            paused: false,
            color,
            quit: false,
        }
    }

    /// Colour unless NO_COLOR is set (https://no-color.org: any non-empty value).
    pub fn color_from_env() -> bool {
        std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
    }

    pub fn key(&mut self, key: Key, snap: &Snapshot) {
        let rows = match self.pane {
            Pane::Cpus => snap.rt.len(),
            Pane::Reservations => snap.reservations.len(),
        };
        let row = match self.pane {
            Pane::Cpus => &mut self.cpu_row,
            Pane::Reservations => &mut self.reservation_row,
        };
        match key {
            Key::Quit => self.quit = true,
            Key::Pause => self.paused = !self.paused,
            Key::Detail => self.detail = rows > 0 && !self.detail,
            Key::Close => self.detail = false,
            Key::Up => *row = row.saturating_sub(1),
            Key::Down => *row = (*row + 1).min(rows.saturating_sub(1)),
            Key::SwitchPane => {
                self.pane = match self.pane {
                    Pane::Cpus => Pane::Reservations,
                    Pane::Reservations => Pane::Cpus,
                };
                self.detail = false;
            }
            Key::Sort => match self.pane {
                Pane::Cpus => {
                    self.cpu_sort = match self.cpu_sort {
                        CpuSort::Cpu => CpuSort::P99,
                        CpuSort::P99 => CpuSort::Max,
                        CpuSort::Max => CpuSort::Steal,
                        CpuSort::Steal => CpuSort::Irqs,
                        CpuSort::Irqs => CpuSort::Cpu,
                    }
                }
                Pane::Reservations => {
                    self.reservation_sort = match self.reservation_sort {
                        ReservationSort::Id => ReservationSort::Cpu,
                        ReservationSort::Cpu => ReservationSort::Used,
                        ReservationSort::Used => ReservationSort::Name,
                        ReservationSort::Name => ReservationSort::Id,
                    }
                }
            },
        }
    }

    /// The RT CPUs in display order (largest first for a figure).
    pub fn sorted_cpus<'a>(&self, snap: &'a Snapshot) -> Vec<&'a RtCpu> {
        let mut v: Vec<&RtCpu> = snap.rt.iter().collect();
        let figure = |c: &RtCpu| -> u64 {
            match self.cpu_sort {
                CpuSort::Cpu => 0,
                CpuSort::P99 => c.latency.map_or(0, |l| l.p99_ns),
                CpuSort::Max => c.latency.map_or(0, |l| l.max_ns),
                CpuSort::Steal => c.steal_ticks.unwrap_or(0),
                CpuSort::Irqs => c.irqs.unwrap_or(0),
            }
        };
        v.sort_by(|a, b| figure(b).cmp(&figure(a)).then(a.cpu.cmp(&b.cpu)));
        v
    }

    pub fn sorted_reservations<'a>(&self, snap: &'a Snapshot) -> Vec<&'a Reservation> {
        let mut v: Vec<&Reservation> = snap.reservations.iter().collect();
        match self.reservation_sort {
            ReservationSort::Id => v.sort_by_key(|r| r.id),
            ReservationSort::Cpu => v.sort_by_key(|r| (r.cpu, r.id)),
            ReservationSort::Name => v.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id))),
            ReservationSort::Used => v.sort_by(|a, b| {
                let used = |r: &Reservation| r.budget_used.unwrap_or(-1.0);
                used(b).total_cmp(&used(a)).then(a.id.cmp(&b.id))
            }),
        }
        v
    }

    pub fn sort_name(&self) -> &'static str {
        match self.pane {
            Pane::Cpus => match self.cpu_sort {
                CpuSort::Cpu => "cpu",
                CpuSort::P99 => "p99",
                CpuSort::Max => "max",
                CpuSort::Steal => "steal",
                CpuSort::Irqs => "irqs",
            },
            Pane::Reservations => match self.reservation_sort {
                ReservationSort::Id => "id",
                ReservationSort::Cpu => "cpu",
                ReservationSort::Used => "used",
                ReservationSort::Name => "name",
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtmgr_core::protocol::LatencyWindow;

    fn snap() -> Snapshot {
        let cpu = |cpu, p99| RtCpu {
            cpu,
            latency: Some(LatencyWindow {
                samples: 1,
                p50_ns: 1,
                p99_ns: p99,
                max_ns: p99,
            }),
            ..RtCpu::default()
        };
        Snapshot {
            rt: vec![cpu(1, 10), cpu(2, 30), cpu(3, 20)],
            reservations: vec![Reservation {
                id: 1,
                ..Reservation::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn keys_sort_pick_and_stay_in_range() {
        let s = snap();
        let mut v = View::new(false);
        let order = |v: &View| v.sorted_cpus(&s).iter().map(|c| c.cpu).collect::<Vec<_>>();
        assert_eq!(order(&v), [1, 2, 3]);
        v.key(Key::Sort, &s);
        assert_eq!((v.sort_name(), order(&v)), ("p99", vec![2, 3, 1]));
        for _ in 0..5 {
            v.key(Key::Down, &s);
        }
        assert_eq!(v.cpu_row, 2);
        v.key(Key::Detail, &s);
        assert!(v.detail);
        v.key(Key::SwitchPane, &s);
        assert_eq!((v.pane, v.detail), (Pane::Reservations, false));
        v.key(Key::Down, &s);
        assert_eq!(v.reservation_row, 0);
        v.key(Key::Pause, &s);
        v.key(Key::Quit, &s);
        assert!(v.paused && v.quit);
        let empty = Snapshot::default();
        v.key(Key::Detail, &empty);
        assert!(!v.detail, "no row, no detail");
    }
}
