//! McKenney §5 Fig. 9, step by step: throughput only? peak utilisation over
//! the cap? memory that cannot be locked? virtualisation? kernel-heavy work?
//! work longer than the crossover? and, in the real-time bubble, the deadline
//! against this machine's measured tail. The first step that says "real fast"
//! decides; every step's reason is kept.

use super::delay::{crossover_ns, DelayModel};
use super::{Advice, Answer, Facts, Reason, Setup, Source, Workload, ADVICE_SCHEMA};

/// McKenney §2.2: "the more aggressive your real-time workload, the lower
/// your CPU utilization must be"; common practice caps it at 50 %.
pub const RULE_UTILIZATION: f64 = 0.5;
/// Steal time above this share means the hypervisor takes the CPU away.
pub const STEAL_LIMIT: f64 = 0.01;
/// McKenney §5: work items of hundreds of milliseconds lose any latency gain in the noise.
pub const LONG_WORK_US: f64 = 100_000.0;
/// Slack (deadline − work) below which stock Linux's tail cannot be trusted
/// without measuring (McKenney §5: 100 µs of work, 250 µs deadline).
pub const TIGHT_SLACK_US: f64 = 1_000.0;
/// Headroom on a reservation's budget over the measured work.
pub const BUDGET_HEADROOM: f64 = 1.2;

fn reason(principle: u8, question: &str, finding: String, source: Source) -> Reason {
    Reason {
        principle,
        question: question.into(),
        finding,
        source,
        leads_to: None,
        check: String::new(),
    }
}

impl Reason {
    fn to(mut self, a: Option<Answer>) -> Reason {
        self.leads_to = a;
        self
    }
    fn check(mut self, c: &str) -> Reason {
        self.check = c.into();
        self
    }
}

fn fast_if(cond: bool) -> Option<Answer> {
    cond.then_some(Answer::RealFast)
}

/// Run the flow.
pub fn advise(w: &Workload, f: &Facts) -> Advice {
    let mut missing = Vec::new();
    let mut reasons = vec![
        throughput(w, &mut missing),
        utilization(w, f, &mut missing),
        memory(w, f, &mut missing),
        virtualization(f),
        kernel_share(w, f, &mut missing),
        duration(w, f, &mut missing),
    ];
    let (deadline, best) = deadline(w, f, &mut missing);
    reasons.push(deadline);
    let decided_by = reasons
        .iter()
        .position(|r| r.leads_to == Some(Answer::RealFast))
        .or_else(|| reasons.iter().position(|r| r.leads_to.is_some()));
    let answer = decided_by
        .and_then(|i| reasons[i].leads_to)
        .unwrap_or(Answer::Benchmark);
    let setup = (answer == Answer::RealTime).then(|| setup(w, f, best));
    Advice {
        schema: ADVICE_SCHEMA.into(),
        answer,
        setup,
        decided_by,
        reasons,
        missing,
        workload: w.clone(),
        facts: f.clone(),
    }
}

fn throughput(w: &Workload, missing: &mut Vec<String>) -> Reason {
    let q = "Is getting a lot of work done all that matters (throughput only)?";
    match w.throughput_only {
        Some(t) => reason(
            1,
            q,
            if t {
                "yes: throughput only".into()
            } else {
                "no: work items must complete in time".into()
            },
            Source::User("--throughput-only, or implied by --deadline".into()),
        )
        .to(fast_if(t)),
        None => {
            missing.push("--throughput-only if completion times do not matter".into());
            reason(1, q, "not said: assumed no".into(), Source::Unknown)
        }
    }
    .check("only you know")
}

/// Peak utilisation: given, or work / period.
fn peak_utilization(w: &Workload) -> Option<(f64, Source)> {
    if let Some(u) = w.utilization {
        return Some((u, Source::User("--utilization".into())));
    }
    match (w.work_us, w.period_us) {
        (Some(c), Some(p)) if p > 0.0 => Some((c / p, Source::User("--work / --period".into()))),
        _ => None,
    }
}

fn utilization(w: &Workload, f: &Facts, missing: &mut Vec<String>) -> Reason {
    let q = "Can the RT CPUs take the peak load with headroom (utilisation under the cap)?";
    let check = "rtmgr admit TASKSET.toml (admission against the cap per RT CPU)";
    let Some((u, source)) = peak_utilization(w) else {
        missing.push("--utilization (peak CPU share of the real-time work per RT CPU)".into());
        return reason(2, q, "not said".into(), Source::Unknown).check(check);
    };
    let finding = if u > f.rt_cap {
        format!(
            "{:.0}% peak is over the cap of {:.0}% per RT CPU: peaks will degrade response times",
            u * 100.0,
            f.rt_cap * 100.0
        )
    } else if u > RULE_UTILIZATION {
        format!(
            "{:.0}% peak fits the cap of {:.0}% but is above McKenney's rule of thumb ({:.0}%): little headroom",
            u * 100.0,
            f.rt_cap * 100.0,
            RULE_UTILIZATION * 100.0
        )
    } else {
        format!(
            "{:.0}% peak leaves headroom under the cap ({:.0}%)",
            u * 100.0,
            f.rt_cap * 100.0
        )
    };
    reason(2, q, finding, source)
        .to(fast_if(u > f.rt_cap))
        .check(check)
}

const MIB: f64 = 1024.0 * 1024.0;

fn memory(w: &Workload, f: &Facts, missing: &mut Vec<String>) -> Reason {
    let q = "Can the real-time work lock all its memory (no page faults)?";
    let check = "grep -E 'MemAvailable|SwapTotal|SwapFree' /proc/meminfo";
    let swap_used = match (f.swap_total_bytes, f.swap_free_bytes) {
        (Some(t), Some(fr)) => t.saturating_sub(fr),
        _ => 0,
    };
    let avail = f.mem_available_bytes;
    let Some(mib) = w.memory_mib else {
        missing.push("--memory (what the real-time work must lock)".into());
        let finding = format!(
            "not said; {} available{}",
            avail.map_or("unknown".into(), |a| format!("{:.0} MiB", a as f64 / MIB)),
            if swap_used > 0 {
                format!(
                    ", {:.0} MiB swapped out: memory is already oversubscribed",
                    swap_used as f64 / MIB
                )
            } else {
                String::new()
            }
        );
        return reason(3, q, finding, Source::Measured("/proc/meminfo".into())).check(check);
    };
    let Some(a) = avail else {
        return reason(
            3,
            q,
            format!("{mib:.0} MiB asked; MemAvailable unknown"),
            Source::Unknown,
        )
        .check(check);
    };
    let a_mib = a as f64 / MIB;
    let too_much = mib > a_mib;
    let finding = if too_much {
        format!("{mib:.0} MiB to lock but only {a_mib:.0} MiB available: mlockall() cannot hold it, page faults follow")
    } else {
        format!(
            "{mib:.0} MiB to lock of {a_mib:.0} MiB available ({:.0}%){}",
            mib / a_mib * 100.0,
            if swap_used > 0 {
                "; some memory is swapped out: leave margin"
            } else {
                ""
            }
        )
    };
    reason(
        3,
        q,
        finding,
        Source::Measured("/proc/meminfo MemAvailable".into()),
    )
    .to(fast_if(too_much))
    .check(check)
}

fn virtualization(f: &Facts) -> Reason {
    let q = "Does the work run under a hypervisor that takes the CPU away?";
    let check =
        "rtmgr status --host-test (the host_preemption item); rtmgr evaluate (stock's steal)";
    let (steal, how, source) = match &f.steal {
        Some(s) => (s.share, s.how.clone(), s.source.clone()),
        None => {
            let window = format!("/proc/stat steal over {} ms", f.steal_window_ms);
            (
                f.steal_share.unwrap_or(0.0),
                format!("{window}, CPUs not loaded"),
                Source::Measured(window),
            )
        }
    };
    let host_test = f
        .host_test
        .as_ref()
        .map(|h| {
            let capacity = h.capacity.as_ref().map_or(String::new(), |c| {
                format!(
                    "; cpu_capacity: {} ({}, `rtmgr status --host-test`)",
                    c.finding,
                    rtmgr_linux::host_preemption::CACHE_PATH
                )
            });
            format!("; host test: {}{capacity}", h.verdict)
        })
        .unwrap_or_default();
    let (finding, fast) = match &f.hypervisor {
        None => ("bare metal (no hypervisor flag)".to_string(), false),
        Some(h) if steal > STEAL_LIMIT => (
            format!(
                "virtual machine ({h}) and {:.1}% steal time ({how}): the host stops vCPUs, tails are the host's{host_test}",
                steal * 100.0
            ),
            true,
        ),
        Some(h) => (
            format!(
                "virtual machine ({h}), {:.2}% steal ({how}): real time only as good as the host allows; measure{host_test}",
                steal * 100.0
            ),
            false,
        ),
    };
    reason(4, q, finding, source).to(fast_if(fast)).check(check)
}

/// The slowdown of `config` for this work: user and kernel slowdowns mixed
/// by the kernel share (1 where not measured).
fn work_slowdown(w: &Workload, f: &Facts, config: &str) -> f64 {
    let c = f.cost.as_ref().and_then(|c| c.get(config));
    let user = c.and_then(|c| c.user_slowdown).unwrap_or(1.0);
    let kernel = c.and_then(|c| c.kernel_slowdown).unwrap_or(user);
    let k = w.kernel_share.unwrap_or(0.0);
    (1.0 - k) * user + k * kernel
}

fn kernel_share(w: &Workload, f: &Facts, missing: &mut Vec<String>) -> Reason {
    let q = "How much of the work is kernel services (which real time slows most)?";
    let check =
        "/usr/bin/time -v YOUR_PROGRAM (system vs user time); rtmgr measure cost --only micro";
    let kernel = f
        .cost
        .as_ref()
        .and_then(|c| c.get("shield"))
        .and_then(|c| c.kernel_slowdown);
    let source = f
        .cost
        .as_ref()
        .map_or(Source::Unknown, |c| Source::Report(c.source.clone()));
    let finding = match (w.kernel_share, kernel) {
        (Some(k), Some(s)) => format!(
            "{:.0}% kernel; kernel services take {s:.2}x stock's time shielded: the work {:.2}x",
            k * 100.0,
            work_slowdown(w, f, "shield")
        ),
        (Some(k), None) => format!(
            "{:.0}% kernel; the kernel slowdown is not measured",
            k * 100.0
        ),
        (None, Some(s)) => {
            missing.push("--kernel-share (share of the work in system calls)".into());
            format!("not said; kernel services take {s:.2}x stock's time shielded")
        }
        (None, None) => {
            missing.push("--kernel-share (share of the work in system calls)".into());
            "not said, not measured".into()
        }
    };
    reason(5, q, finding, source).check(check)
}

/// Stock's and shield's delay models, when the tail was measured.
fn models(w: &Workload, f: &Facts, config: &str) -> Option<DelayModel> {
    let lat = f.tail.as_ref()?.get(config)?;
    Some(DelayModel {
        latency_ns: lat as f64,
        slowdown: work_slowdown(w, f, config),
    })
}

fn duration(w: &Workload, f: &Facts, missing: &mut Vec<String>) -> Reason {
    let q = "Is each work item short enough for latency to matter (under the crossover)?";
    let check = "rtmgr measure cost and rtmgr evaluate, then rtmgr advise --from each report";
    let Some(work) = w.work_us else {
        missing.push("--work (processing time of one work item)".into());
        return reason(6, q, "not said".into(), Source::Unknown).check(check);
    };
    if let (Some(stock), Some(shield)) = (models(w, f, "stock"), models(w, f, "shield")) {
        let src = f
            .tail
            .as_ref()
            .map(|t| t.source.clone())
            .unwrap_or_default();
        let shield_lower = shield.latency_ns < stock.latency_ns;
        return match (crossover_ns(&stock, &shield), shield_lower) {
            (Some(x), true) => {
                let long = work * 1e3 > x;
                reason(
                    6,
                    q,
                    format!(
                        "{work:.0} µs of work; stock and shield cross at {:.0} µs of work: {}",
                        x / 1e3,
                        if long { "above it stock finishes first" } else { "below it the shield finishes first" }
                    ),
                    Source::Report(src),
                )
                .to(fast_if(long))
            }
            (Some(x), false) => {
                let short = work * 1e3 < x;
                reason(
                    6,
                    q,
                    format!(
                        "{work:.0} µs of work; stock has the lower tail, the shield the faster work: they cross at {:.0} µs, {}",
                        x / 1e3,
                        if short { "below it stock finishes first" } else { "above it the shield finishes first" }
                    ),
                    Source::Report(src),
                )
                .to(fast_if(short))
            }
            (None, true) => reason(
                6,
                q,
                format!(
                    "{work:.0} µs of work; the shield has the lower tail and its work takes {:.2}x stock's time: it finishes first at every duration, no crossover",
                    shield.slowdown / stock.slowdown
                ),
                Source::Report(src),
            ),
            (None, false) => reason(
                6,
                q,
                format!("{work:.0} µs of work; the shield's tail is no lower than stock's and its work no faster: stock finishes first at every duration, no crossover"),
                Source::Report(src),
            )
            .to(fast_if(true)),
        }
        .check(check);
    }
    let long = work >= LONG_WORK_US;
    reason(
        6,
        q,
        format!(
            "{work:.0} µs of work{}",
            if long {
                ": hundreds of milliseconds, latency is lost in the noise"
            } else {
                ""
            }
        ),
        Source::Rule(format!(
            "McKenney §5: items of {:.0} ms and more",
            LONG_WORK_US / 1e3
        )),
    )
    .to(fast_if(long))
    .check(check)
}

/// The deadline step; also the best real-time configuration that meets it.
fn deadline(w: &Workload, f: &Facts, missing: &mut Vec<String>) -> (Reason, Option<&'static str>) {
    let q = "Does stock Linux meet the deadline, or only a real-time set-up?";
    let check =
        "rtmgr evaluate --out DIR; rtmgr advise --from DIR/report.json --work … --deadline …";
    let (Some(work), Some(dl)) = (w.work_us, w.deadline_us) else {
        missing.push("--deadline (from release to completion)".into());
        return (
            reason(0, q, "no deadline said".into(), Source::Unknown).check(check),
            None,
        );
    };
    if let (Some(tail), Some(stock)) = (&f.tail, models(w, f, "stock")) {
        let total = |m: DelayModel| m.total_ns(work * 1e3) / 1e3;
        let st = total(stock);
        let src = Source::Report(tail.source.clone());
        if st <= dl {
            let r = reason(
                0,
                q,
                format!(
                    "stock finishes in {st:.0} µs at {} ≤ {dl:.0} µs: real fast suffices",
                    tail.percentile
                ),
                src,
            );
            return (r.to(Some(Answer::RealFast)).check(check), None);
        }
        let best = ["balanced", "shield"]
            .into_iter()
            .filter_map(|c| Some((c, total(models(w, f, c)?))))
            .find(|(_, t)| *t <= dl);
        let finding = match best {
            Some((c, t)) => format!(
                "stock needs {st:.0} µs at {} > {dl:.0} µs; {c} finishes in {t:.0} µs",
                tail.percentile
            ),
            None => format!(
                "stock needs {st:.0} µs at {} > {dl:.0} µs and no measured set-up meets it on this machine: real time is needed, and better hardware (or no hypervisor)",
                tail.percentile
            ),
        };
        return (
            reason(0, q, finding, src)
                .to(Some(Answer::RealTime))
                .check(check),
            best.map(|b| b.0),
        );
    }
    let slack = dl - work;
    let tight = slack < TIGHT_SLACK_US;
    let r = reason(
        0,
        q,
        if tight {
            format!("{work:.0} µs of work in {dl:.0} µs leaves {slack:.0} µs of slack: less than stock Linux's tail under load")
        } else {
            format!("{slack:.0} µs of slack: measure this machine's tail before choosing")
        },
        Source::Rule(format!(
            "slack under {TIGHT_SLACK_US:.0} µs (McKenney §5: 100 µs of work, 250 µs deadline)"
        )),
    );
    (r.to(tight.then_some(Answer::RealTime)).check(check), None)
}

/// The set-up: a reservation for periodic work, else the measured best, else the shield.
fn setup(w: &Workload, f: &Facts, best: Option<&str>) -> Setup {
    if let (Some(p), Some(c)) = (w.period_us, w.work_us) {
        let slow = work_slowdown(w, f, "shield");
        return Setup::Reservation {
            period_ns: (p * 1e3) as u64,
            budget_ns: ((c * slow * BUDGET_HEADROOM).ceil() * 1e3).min(p * 1e3) as u64,
        };
    }
    // Lending costs a host slice where the host preempts busy vCPUs, and
    // buys nothing where a further busy vCPU adds no work (the lending
    // controller's own rule and default threshold).
    let host_preempts = f.host_test.as_ref().is_some_and(|h| h.preempts);
    let min = rtmgr_core::balance::LendingConfig::default().min_marginal_capacity;
    let no_capacity = f
        .host_test
        .as_ref()
        .and_then(|h| h.capacity.as_ref())
        .is_some_and(|c| c.marginal < min);
    match best {
        Some("balanced") if !host_preempts && !no_capacity => Setup::Balanced,
        _ => Setup::Shield,
    }
}
