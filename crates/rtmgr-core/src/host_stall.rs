//! Which late wake-ups the hypervisor caused, on evidence only (issue 21;
//! McKenney "Real Time vs Real Fast" §2.1: a virtual CPU is only as real-time
//! as the host lets it be). Pure: late wake-ups and a series of the CPU's
//! steal counter come in, one label per wake-up goes out. Used by the lab's
//! probe (measure, evaluate, ablate) and callable by the live balancer's guard.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Late wake-ups at or above this are kept one by one (below it, only in a
/// histogram): the floor of "late" for host labelling.
pub const LATE_FLOOR_NS: u64 = 1_000_000;

/// One late wake-up of a periodic task: released at `release_ns`, ran at
/// `wake_ns`, and served on that wake-up `missed` further releases that
/// passed while it was late (each recorded against its own release, every
/// `interval` after `release_ns`: no coordinated omission).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateWake {
    pub release_ns: u64,
    pub wake_ns: u64,
    pub missed: u32,
}

impl LateWake {
    /// Samples this wake-up stands for: itself and the releases it missed.
    pub fn samples(&self) -> u64 {
        1 + u64::from(self.missed)
    }

    /// The wake-up's own latency.
    pub fn latency_ns(&self) -> u64 {
        self.wake_ns.saturating_sub(self.release_ns)
    }

    /// Every sample's latency: the wake-up's, then each missed release's.
    pub fn latencies(&self, interval_ns: u64) -> impl Iterator<Item = i64> + '_ {
        (0..self.samples()).map(move |k| {
            let release = self.release_ns + k * interval_ns;
            self.wake_ns.saturating_sub(release) as i64
        })
    }
}

/// One reading of a CPU's cumulative steal counter (`/proc/stat`, in clock
/// ticks of 10 ms at USER_HZ=100): read between `start_ns` and `end_ns`
/// (CLOCK_MONOTONIC), so its value is from no earlier than the one and no
/// later than the other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StealReading {
    pub start_ns: u64,
    pub end_ns: u64,
    pub steal_ticks: u64,
    /// The same CPU's steal in ns where the kernel shows it (issue 28: the
    /// run queue's `.clock − .clock_task` of debugfs `sched/debug`, updated
    /// whenever the CPU's scheduler clock is, e.g. at a wake-up there: no
    /// tick to wait for). None where only /proc/stat was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_ns: Option<u64>,
}

/// With steal in ns, a late wake-up is the host's when the steal across it
/// is at least this share of its lateness (the host took most of the delay).
pub const STEAL_SHARE_OF_LATENESS: f64 = 0.5;

/// Each CPU's `.clock − .clock_task` in ns from debugfs `sched/debug` (or the
/// part of it read: the CPUs whose `.clock_task` line is in `text`). The
/// run queue's task clock leaves out steal (CONFIG_PARAVIRT_TIME_ACCOUNTING)
/// and interrupt time (CONFIG_IRQ_TIME_ACCOUNTING): see `ns_steal_usable`.
/// The values are ms with six decimals ("262584.709516").
pub fn sched_debug_steal_ns(text: &str) -> BTreeMap<u32, u64> {
    let ns = |v: &str| -> Option<u64> {
        let (ms, frac) = v.trim().split_once('.').unwrap_or((v.trim(), "0"));
        let frac = format!("{frac:0<6}");
        Some(ms.parse::<u64>().ok()? * 1_000_000 + frac.get(..6)?.parse::<u64>().ok()?)
    };
    let mut out = BTreeMap::new();
    let (mut cpu, mut clock) = (None, None);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("cpu#") {
            cpu = rest
                .split(',')
                .next()
                .and_then(|c| c.trim().parse::<u32>().ok());
            clock = None;
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match (key.trim(), cpu) {
            (".clock", Some(_)) => clock = ns(value),
            (".clock_task", Some(c)) => {
                if let (Some(all), Some(task)) = (clock, ns(value)) {
                    out.insert(c, all.saturating_sub(task));
                }
                cpu = None;
            }
            _ => {}
        }
    }
    out
}

/// Mend the torn readings of a CPU's steal in ns (in time order), and say how
/// many were changed. `sched/debug` prints a run queue's `.clock` and
/// `.clock_task` one after the other without its lock, so a reader preempted
/// between the two (under load, or by the host) pairs an old `.clock` with a
/// newer `.clock_task`: a dip, even to 0; a writer stopped between its two
/// stores gives the opposite, a spike. The true value only grows, so a
/// reading outside two neighbours that agree is brought between them (a
/// growing series stays as it is; a lone dip or spike goes), and each reading
/// is then at least the one before it. Readings without ns are left alone.
pub fn mend_torn_steal_ns(readings: &mut [StealReading]) -> usize {
    let read: Vec<Option<u64>> = readings.iter().map(|r| r.steal_ns).collect();
    let mut mended = 0;
    let mut floor = 0;
    for i in 0..readings.len() {
        let Some(own) = read[i] else { continue };
        let before = i.checked_sub(1).and_then(|j| read[j]);
        let after = read.get(i + 1).copied().flatten();
        let middle = match (before, after) {
            // Outside neighbours that agree with each other: torn.
            (Some(a), Some(b)) if a <= b => own.clamp(a, b),
            // The first reading: a spike above the next one is cut to it.
            (None, Some(b)) => own.min(b),
            _ => own,
        };
        let value = middle.max(floor);
        floor = value;
        if value != own {
            readings[i].steal_ns = Some(value);
            mended += 1;
        }
    }
    mended
}

/// Whether `.clock − .clock_task` is this kernel's steal, from its build
/// configuration (None: unreadable): Ok, or why not (then /proc/stat's
/// 10 ms ticks are the only steal evidence).
pub fn ns_steal_usable(config: Option<&str>) -> Result<(), String> {
    let Some(config) = config else {
        return Err(
            "the kernel configuration is unreadable (no /proc/config.gz or /boot/config-*): \
             sched/debug's clocks cannot be told to be steal"
                .into(),
        );
    };
    let on = |k: &str| config.lines().any(|l| l.trim() == format!("{k}=y"));
    if !on("CONFIG_PARAVIRT_TIME_ACCOUNTING") {
        return Err(
            "CONFIG_PARAVIRT_TIME_ACCOUNTING is off: the scheduler clock does not leave steal out"
                .into(),
        );
    }
    if on("CONFIG_IRQ_TIME_ACCOUNTING") {
        return Err(
            "CONFIG_IRQ_TIME_ACCOUNTING=y: sched/debug's .clock − .clock_task mixes interrupt time (the guest's) into steal"
                .into(),
        );
    }
    Ok(())
}

/// Why a late wake-up is counted as the host's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostLabel {
    /// No evidence: the wake-up stays in the guest's tail.
    Guest,
    /// The CPU's steal counter advanced across the wake-up.
    Steal,
    /// The CPU was busy yet no event came for longer than a tick (tracing).
    Silence,
    /// The CPU was idle, nothing ran and no interrupt came before the
    /// timer's own, yet the wake-up was late (tracing, issue 28): the
    /// halted vCPU was not woken on time.
    IdleLate,
}

impl HostLabel {
    pub fn is_host(self) -> bool {
        self != HostLabel::Guest
    }
}

/// Label each late wake-up `Steal` on the evidence of the CPU's steal
/// readings (in time order), else `Guest`; a wake-up with no reading on
/// either side stays `Guest`: host is never the default.
///
/// - With steal in ns (`StealReading::steal_ns`) on both sides: the steal
///   between the last reading finished before its release and the first
///   started after its wake-up is at least `STEAL_SHARE_OF_LATENESS` of its
///   lateness.
/// - Else (/proc/stat ticks): the counter advanced between the last reading
///   finished before its release and the first reading started at least
///   `tick_ns` after its wake-up (ticks are accounted at the CPU's next
///   scheduler tick).
pub fn label_host(events: &[LateWake], steal: &[StealReading], tick_ns: u64) -> Vec<HostLabel> {
    events
        .iter()
        .map(|e| {
            let before = steal.partition_point(|r| r.end_ns <= e.release_ns);
            let Some(b) = before.checked_sub(1).map(|i| steal[i]) else {
                return HostLabel::Guest;
            };
            let after_wake = steal.partition_point(|r| r.start_ns < e.wake_ns);
            if let (Some(x), Some(y)) = (b.steal_ns, steal.get(after_wake).and_then(|a| a.steal_ns))
            {
                let share = y.saturating_sub(x) as f64 / e.latency_ns().max(1) as f64;
                return if share >= STEAL_SHARE_OF_LATENESS {
                    HostLabel::Steal
                } else {
                    HostLabel::Guest
                };
            }
            let after_from = e.wake_ns.saturating_add(tick_ns);
            let after = steal.partition_point(|r| r.start_ns < after_from);
            match steal.get(after) {
                Some(a) if a.steal_ticks > b.steal_ticks => HostLabel::Steal,
                _ => HostLabel::Guest,
            }
        })
        .collect()
}

/// The samples and time of the wake-ups labelled host: (samples, Σ wake − release).
pub fn host_totals(events: &[LateWake], labels: &[HostLabel]) -> (u64, u64) {
    events
        .iter()
        .zip(labels)
        .filter(|(_, l)| l.is_host())
        .fold((0, 0), |(n, ns), (e, _)| {
            (n + e.samples(), ns + e.latency_ns())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const TICK: u64 = 4 * MS;

    fn wake(release_ms: u64, wake_ms: u64) -> LateWake {
        LateWake {
            release_ns: release_ms * MS,
            wake_ns: wake_ms * MS,
            missed: 0,
        }
    }

    /// Readings every 5 ms from 0, each taking 100 µs, with the counter given per reading.
    fn series(ticks: &[u64]) -> Vec<StealReading> {
        ticks
            .iter()
            .enumerate()
            .map(|(i, &t)| StealReading {
                start_ns: i as u64 * 5 * MS,
                end_ns: i as u64 * 5 * MS + 100_000,
                steal_ticks: t,
                steal_ns: None,
            })
            .collect()
    }

    #[test]
    fn steal_advancing_across_the_wake_up_is_host() {
        // Release at 11 ms (reading 2 at 10 ms before it), wake at 14 ms:
        // the first reading ≥ 14 + 4 ms is at 20 ms (index 4).
        let s = series(&[0, 0, 0, 0, 1, 1]);
        assert_eq!(label_host(&[wake(11, 14)], &s, TICK), [HostLabel::Steal]);
    }

    #[test]
    fn flat_steal_is_guest() {
        let s = series(&[3, 3, 3, 3, 3, 3]);
        assert_eq!(label_host(&[wake(11, 14)], &s, TICK), [HostLabel::Guest]);
    }

    #[test]
    fn steal_before_the_release_or_after_the_window_is_guest() {
        // Advance between readings 1 and 2 (5–10 ms), before the release at 11 ms.
        let early = series(&[0, 0, 1, 1, 1, 1]);
        assert_eq!(
            label_host(&[wake(11, 14)], &early, TICK),
            [HostLabel::Guest]
        );
        // Advance only after the first reading past wake + tick (20 ms).
        let late = series(&[0, 0, 0, 0, 0, 1]);
        assert_eq!(label_host(&[wake(11, 14)], &late, TICK), [HostLabel::Guest]);
    }

    #[test]
    fn the_tick_delay_is_waited_for() {
        // Wake at 14 ms; the reading at 15 ms is before the tick that accounts
        // the steal, so it is not the "after" reading even if it already shows it.
        let s = series(&[0, 0, 0, 1, 1, 1]);
        assert_eq!(label_host(&[wake(11, 14)], &s, TICK), [HostLabel::Steal]);
        // With no reading at or after wake + tick: no evidence.
        let short = series(&[0, 0, 0, 1]);
        assert_eq!(
            label_host(&[wake(11, 14)], &short, TICK),
            [HostLabel::Guest]
        );
    }

    #[test]
    fn boundaries_of_the_readings() {
        // A reading ending exactly at the release counts as before it.
        let s = vec![
            StealReading {
                start_ns: 9 * MS,
                end_ns: 10 * MS,
                steal_ticks: 0,
                steal_ns: None,
            },
            StealReading {
                start_ns: 16 * MS,
                end_ns: 17 * MS,
                steal_ticks: 1,
                steal_ns: None,
            },
        ];
        assert_eq!(label_host(&[wake(10, 12)], &s, TICK), [HostLabel::Steal]);
        // A reading starting 1 ns before wake + tick is not after it.
        assert_eq!(
            label_host(
                &[LateWake {
                    release_ns: 10 * MS,
                    wake_ns: 12 * MS + 1,
                    missed: 0
                }],
                &s,
                TICK
            ),
            [HostLabel::Guest]
        );
        // A release before the first reading has no "before": guest.
        assert_eq!(label_host(&[wake(5, 8)], &s, TICK), [HostLabel::Guest]);
        assert_eq!(label_host(&[wake(5, 8)], &[], TICK), [HostLabel::Guest]);
    }

    /// Readings every 5 ms with steal in ns (and ticks that never move).
    fn ns_series(ns: &[u64]) -> Vec<StealReading> {
        series(&vec![0; ns.len()])
            .into_iter()
            .zip(ns)
            .map(|(r, &v)| StealReading {
                steal_ns: Some(v),
                ..r
            })
            .collect()
    }

    #[test]
    fn steal_in_ns_labels_a_short_stall_ticks_cannot_see() {
        // Release at 11 ms, wake at 12.2 ms (1.2 ms late); 1 ms of steal
        // between the readings at 10 and 15 ms: no tick moved, the ns did.
        let e = LateWake {
            release_ns: 11 * MS,
            wake_ns: 12 * MS + 200_000,
            missed: 4,
        };
        let s = ns_series(&[0, 0, 0, MS, MS, MS]);
        assert_eq!(label_host(&[e], &s, TICK), [HostLabel::Steal]);
        // No tick wait with ns: the reading at 15 ms is the "after" one.
        let s = ns_series(&[0, 0, 0, MS, 2 * MS, 2 * MS]);
        assert_eq!(label_host(&[e], &s, TICK), [HostLabel::Steal]);
        // Steal under half the lateness: guest (e.g. a guest delay with a
        // little steal around it); steal only after the "after" reading: guest.
        let little = ns_series(&[0, 0, 0, 500_000, MS, MS]);
        assert_eq!(label_host(&[e], &little, TICK), [HostLabel::Guest]);
        let later = ns_series(&[0, 0, 0, 0, MS, MS]);
        assert_eq!(label_host(&[e], &later, TICK), [HostLabel::Guest]);
        // Steal before the release is not this wake-up's.
        let before = ns_series(&[0, 0, MS, MS, MS, MS]);
        assert_eq!(label_host(&[e], &before, TICK), [HostLabel::Guest]);
    }

    #[test]
    fn without_ns_on_both_sides_the_ticks_decide() {
        let e = wake(11, 14);
        let mut s = ns_series(&[0, 0, 0, 0, 0, 0]);
        s[4].steal_ticks = 1;
        s[5].steal_ticks = 1;
        // ns flat on both sides: guest, even though a tick moved later.
        assert_eq!(label_host(&[e], &s, TICK), [HostLabel::Guest]);
        // The "after" reading without ns: the tick rule, which sees it.
        s[3].steal_ns = None;
        assert_eq!(label_host(&[e], &s, TICK), [HostLabel::Steal]);
        // Old readings without the field still parse.
        let old: StealReading =
            serde_json::from_str(r#"{"start_ns":1,"end_ns":2,"steal_ticks":3}"#).unwrap();
        assert_eq!(old.steal_ns, None);
    }

    fn ns_of(s: &[StealReading]) -> Vec<u64> {
        s.iter().map(|r| r.steal_ns.unwrap()).collect()
    }

    #[test]
    fn a_growing_steal_series_is_left_as_it_is() {
        let mut s = ns_series(&[5, 5, 7, 20, 20, 31]);
        assert_eq!(mend_torn_steal_ns(&mut s), 0);
        assert_eq!(ns_of(&s), [5, 5, 7, 20, 20, 31]);
    }

    #[test]
    fn a_torn_dip_or_spike_is_mended_and_counted() {
        // A reader preempted between .clock and .clock_task: a dip to 0.
        let mut dip = ns_series(&[5, 6, 0, 8, 9]);
        assert_eq!(mend_torn_steal_ns(&mut dip), 1);
        assert_eq!(ns_of(&dip), [5, 6, 6, 8, 9]);
        // A writer stopped between its two stores: a spike.
        let mut spike = ns_series(&[5, 6, 90, 8, 9]);
        assert_eq!(mend_torn_steal_ns(&mut spike), 1);
        assert_eq!(ns_of(&spike), [5, 6, 8, 8, 9]);
        // At the ends.
        let mut ends = ns_series(&[90, 6, 7, 1]);
        assert_eq!(mend_torn_steal_ns(&mut ends), 2);
        assert_eq!(ns_of(&ends), [6, 6, 7, 7]);
        // Without the mending a spike would label a guest wake-up host
        // (release at 6 ms, wake at 8 ms: readings at 5 and 10 ms).
        let spiky = ns_series(&[5 * MS, 6 * MS, 90 * MS, 6 * MS, 7 * MS]);
        let mut mended = spiky.clone();
        mend_torn_steal_ns(&mut mended);
        assert_eq!(label_host(&[wake(6, 8)], &spiky, TICK), [HostLabel::Steal]);
        assert_eq!(label_host(&[wake(6, 8)], &mended, TICK), [HostLabel::Guest]);
    }

    #[test]
    fn readings_without_ns_are_left_alone() {
        let mut s = ns_series(&[5, 0, 9]);
        s[1].steal_ns = None;
        assert_eq!(mend_torn_steal_ns(&mut s), 0);
        assert_eq!(s[1].steal_ns, None);
    }

    #[test]
    fn sched_debug_clocks_give_steal_per_cpu() {
        let text = "Sched Debug Version: v0.11, 6.18.44\nktime : 262585.1\n\n\
                    cpu#0, 2100.000 MHz\n  .nr_running : 2\n  .clock : 262584.709516\n  \
                    .clock_task : 262439.984135\n  .avg_idle : 913875\n\ncfs_rq[0]:/\n  \
                    .clock_task : 1.0\n\ncpu#1, 2100.000 MHz\n  .clock : 262585.85\n  \
                    .clock_task : 262423.322762\n";
        let s = sched_debug_steal_ns(text);
        assert_eq!(s.get(&0), Some(&144_725_381));
        assert_eq!(s.get(&1), Some(&162_527_238));
        assert_eq!(s.len(), 2);
        // A cut-off read: only the CPUs whose clock_task line came.
        assert_eq!(
            sched_debug_steal_ns(&text[..text.find("cpu#1").unwrap() + 30]).len(),
            1
        );
        assert!(sched_debug_steal_ns("").is_empty());
        assert!(sched_debug_steal_ns("cpu#x, 1 MHz\n  .clock : a\n  .clock_task : b\n").is_empty());
    }

    #[test]
    fn ns_steal_only_where_the_task_clock_leaves_out_steal_alone() {
        let ok = "CONFIG_PARAVIRT_TIME_ACCOUNTING=y\n# CONFIG_IRQ_TIME_ACCOUNTING is not set\n";
        assert_eq!(ns_steal_usable(Some(ok)), Ok(()));
        let irq = "CONFIG_PARAVIRT_TIME_ACCOUNTING=y\nCONFIG_IRQ_TIME_ACCOUNTING=y\n";
        assert!(ns_steal_usable(Some(irq))
            .unwrap_err()
            .contains("interrupt time"));
        let off = "# CONFIG_PARAVIRT_TIME_ACCOUNTING is not set\n";
        assert!(ns_steal_usable(Some(off)).unwrap_err().contains("PARAVIRT"));
        assert!(ns_steal_usable(None).unwrap_err().contains("unreadable"));
    }

    #[test]
    fn samples_latencies_and_totals() {
        let e = LateWake {
            release_ns: 0,
            wake_ns: 3 * MS,
            missed: 2,
        };
        assert_eq!(e.samples(), 3);
        let l: Vec<i64> = e.latencies(MS).collect();
        assert_eq!(l, [3 * MS as i64, 2 * MS as i64, MS as i64]);
        let events = [e, wake(10, 12)];
        let labels = [HostLabel::Steal, HostLabel::Guest];
        assert_eq!(host_totals(&events, &labels), (3, 3 * MS));
        let labels = [HostLabel::Guest, HostLabel::Silence];
        assert_eq!(host_totals(&events, &labels), (1, 2 * MS));
    }
}
