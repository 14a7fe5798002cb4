//! The two tails of a run (issue 21; McKenney "Real Time vs Real Fast" §2.1
//! and §3): the probe's late wake-ups labelled host on evidence — the steal
//! series, and with tracing a busy CPU that saw no event for longer than a
//! tick — and the samples the host did not stall, kept apart from all samples.

use super::probe::ThreadOutcome;
use super::steal::StealSeries;
use crate::trace::{Attribution, Cause};
use rtmgr_core::host_stall::{host_totals, label_host, HostLabel};
use rtmgr_core::stats::Hist;

/// The samples the host did not stall, and what the host took.
#[derive(Debug, Clone, Default)]
pub struct HostSplit {
    /// Every sample but those of wake-ups labelled host.
    pub guest: Hist,
    /// Missed releases among `guest`.
    pub guest_missed: u64,
    pub host_samples: u64,
    pub host_ns: u64,
}

impl HostSplit {
    /// From labelled thread outcomes (a thread not labelled counts as guest).
    pub fn of<'a>(outs: impl IntoIterator<Item = &'a ThreadOutcome>) -> HostSplit {
        let mut s = HostSplit::default();
        for o in outs {
            s.guest.merge(&o.base);
            let mut host_missed = 0;
            for (i, w) in o.late.iter().enumerate() {
                let label = o.labels.get(i).copied().unwrap_or(HostLabel::Guest);
                if label.is_host() {
                    host_missed += u64::from(w.missed);
                } else {
                    for l in w.latencies(o.interval_ns) {
                        s.guest.record(l);
                    }
                }
            }
            let labels = &o.labels[..o.labels.len().min(o.late.len())];
            let (n, ns) = host_totals(&o.late[..labels.len()], labels);
            s.host_samples += n;
            s.host_ns += ns;
            s.guest_missed += o.missed.saturating_sub(host_missed);
        }
        s
    }

    pub fn merge(&mut self, o: &HostSplit) {
        self.guest.merge(&o.guest);
        self.guest_missed += o.guest_missed;
        self.host_samples += o.host_samples;
        self.host_ns += o.host_ns;
    }
}

/// Did the trace see the busy CPU silent for longer than a tick in this
/// wake-up (`attribute` names that time `Cause::Host`)?
fn silent(a: &Attribution) -> bool {
    a.parts.iter().any(|(c, ns)| *c == Cause::Host && *ns > 0)
}

/// Was the CPU idle until the late wake-up with nothing in between but the
/// timer's own interrupt and the switch to the probe (issue 28)? Then the
/// halted vCPU was woken late: the host's, whether it accounted steal or not.
fn idle_late(a: &Attribution) -> bool {
    let idle = a
        .parts
        .iter()
        .any(|(c, ns)| *c == Cause::IdleWakeup && *ns > 0);
    let only_timer = a.parts.iter().all(|(c, _)| match c {
        Cause::IdleWakeup | Cause::Switch => true,
        Cause::Vector { name } => name == "local_timer",
        _ => false,
    });
    idle && only_timer
}

/// Label every thread's late wake-ups: steal evidence from `steal`, silence
/// evidence from the trace's `attributions` (matched by CPU, release and
/// wake-up). Then the trace's "no event" time of a wake-up labelled host is
/// named host too; without evidence it stays unexplained.
pub fn label_threads(
    threads: &mut [ThreadOutcome],
    steal: &StealSeries,
    attributions: &mut [Attribution],
    tick_ns: u64,
) {
    for t in threads.iter_mut() {
        t.labels = label_host(&t.late, steal.of(t.cpu), tick_ns);
        for (w, label) in t.late.iter().zip(t.labels.iter_mut()) {
            let traced = attributions.iter_mut().find(|a| {
                a.sample.cpu == t.cpu
                    && a.sample.release_ns == w.release_ns
                    && a.sample.wake_ns == w.wake_ns
            });
            let Some(a) = traced else { continue };
            if *label == HostLabel::Guest && silent(a) {
                *label = HostLabel::Silence;
            } else if *label == HostLabel::Guest && idle_late(a) {
                *label = HostLabel::IdleLate;
            }
            if label.is_host() {
                a.name_silence_host();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Sample;
    use rtmgr_core::host_stall::{LateWake, StealReading};

    const MS: u64 = 1_000_000;

    fn outcome(late: Vec<LateWake>, base: &[i64], missed: u64) -> ThreadOutcome {
        let mut h = Hist::new();
        for &v in base {
            h.record(v);
        }
        ThreadOutcome {
            cpu: 1,
            index: 0,
            hist: Hist::new(),
            wakeups: Hist::new(),
            missed,
            voluntary_ctxt_switches: 0,
            involuntary_ctxt_switches: 0,
            cpu_time_ns: 0,
            interval_ns: MS,
            late,
            base: h,
            labels: Vec::new(),
        }
    }

    fn steal(points: &[(u64, u64)]) -> StealSeries {
        let mut s = StealSeries::default();
        s.per_cpu.insert(
            1,
            points
                .iter()
                .map(|&(t, v)| StealReading {
                    start_ns: t * MS,
                    end_ns: t * MS,
                    steal_ticks: v,
                    steal_ns: None,
                })
                .collect(),
        );
        s
    }

    fn attribution(release_ns: u64, wake_ns: u64, parts: Vec<(Cause, u64)>) -> Attribution {
        Attribution {
            sample: Sample {
                cpu: 1,
                tid: 7,
                release_ns,
                wake_ns,
            },
            parts,
        }
    }

    #[test]
    fn host_wake_ups_leave_the_guest_tail() {
        // Two late wake-ups: 10→13 ms (2 missed) during steal, 40→42 ms without.
        let late = vec![
            LateWake {
                release_ns: 10 * MS,
                wake_ns: 13 * MS,
                missed: 2,
            },
            LateWake {
                release_ns: 40 * MS,
                wake_ns: 42 * MS,
                missed: 0,
            },
        ];
        let mut t = [outcome(late, &[1000, 2000, 3000], 2)];
        let s = steal(&[(5, 0), (20, 1), (35, 1), (50, 1)]);
        label_threads(&mut t, &s, &mut [], 4 * MS);
        assert_eq!(t[0].labels, [HostLabel::Steal, HostLabel::Guest]);
        let split = HostSplit::of(&t);
        assert_eq!((split.host_samples, split.host_ns), (3, 3 * MS));
        assert_eq!(
            split.guest.len(),
            4,
            "3 base + the guest's own 2 ms wake-up"
        );
        assert_eq!(split.guest.max(), Some(2 * MS as i64));
        assert_eq!(split.guest_missed, 0);
    }

    #[test]
    fn unlabelled_threads_are_all_guest() {
        let late = vec![LateWake {
            release_ns: 10 * MS,
            wake_ns: 12 * MS,
            missed: 1,
        }];
        let split = HostSplit::of(&[outcome(late, &[5], 1)]);
        assert_eq!((split.host_samples, split.host_ns), (0, 0));
        assert_eq!(split.guest.len(), 3);
        assert_eq!(split.guest_missed, 1);
    }

    #[test]
    fn trace_silence_is_evidence_and_names_the_no_event_time() {
        let late = vec![
            LateWake {
                release_ns: 10 * MS,
                wake_ns: 20 * MS,
                missed: 0,
            },
            LateWake {
                release_ns: 40 * MS,
                wake_ns: 45 * MS,
                missed: 0,
            },
        ];
        let mut t = [outcome(late, &[], 0)];
        let stalled = Cause::Stalled {
            comm: "spin".into(),
        };
        let mut attrs = [
            attribution(
                10 * MS,
                20 * MS,
                vec![(Cause::Host, 6 * MS), (stalled.clone(), 4 * MS)],
            ),
            attribution(40 * MS, 45 * MS, vec![(stalled.clone(), 5 * MS)]),
        ];
        label_threads(&mut t, &StealSeries::default(), &mut attrs, 4 * MS);
        assert_eq!(t[0].labels, [HostLabel::Silence, HostLabel::Guest]);
        assert_eq!(attrs[0].parts, [(Cause::Host, 10 * MS)]);
        assert_eq!(
            attrs[1].parts,
            [(stalled, 5 * MS)],
            "no evidence: unchanged"
        );
    }

    #[test]
    fn an_idle_cpu_woken_late_with_only_its_timer_is_the_hosts() {
        let w = |r: u64, k: u64| LateWake {
            release_ns: r * MS,
            wake_ns: k * MS,
            missed: 0,
        };
        let late = vec![w(10, 13), w(40, 43), w(70, 73)];
        let mut t = [outcome(late, &[], 0)];
        let timer = Cause::Vector {
            name: "local_timer".into(),
        };
        let other = Cause::Irq {
            name: "virtio0".into(),
        };
        let mut attrs = [
            attribution(
                10 * MS,
                13 * MS,
                vec![
                    (Cause::IdleWakeup, 2_900_000),
                    (timer.clone(), 50_000),
                    (Cause::Switch, 50_000),
                ],
            ),
            // Another interrupt came first: the guest's, not the host's.
            attribution(
                40 * MS,
                43 * MS,
                vec![(Cause::IdleWakeup, 2 * MS), (other.clone(), MS)],
            ),
            // A task ran: not idle.
            attribution(
                70 * MS,
                73 * MS,
                vec![(Cause::Kernel { comm: "k".into() }, 3 * MS)],
            ),
        ];
        label_threads(&mut t, &StealSeries::default(), &mut attrs, 4 * MS);
        assert_eq!(
            t[0].labels,
            [HostLabel::IdleLate, HostLabel::Guest, HostLabel::Guest]
        );
        assert!(
            attrs[0].parts.contains(&(Cause::Host, 2_900_000)),
            "{:?}",
            attrs[0].parts
        );
        assert!(attrs[1].parts.contains(&(other, MS)));
        assert_eq!(HostSplit::of(&t).host_samples, 1);
    }
}
