//! Attribution against recorded-style traces: a task in a system call, an idle
//! CPU woken late, interrupts, interleaved CPUs, truncated and empty traces.

use super::*;
use crate::trace::event::parse_line;

fn events(text: &str) -> Vec<Event> {
    text.lines().filter_map(parse_line).collect()
}

fn us(sec: u64, micros: u64) -> u64 {
    sec * 1_000_000_000 + micros * 1000
}

fn part(a: &Attribution, c: &Cause) -> u64 {
    a.parts
        .iter()
        .find(|(x, _)| x == c)
        .map(|p| p.1)
        .unwrap_or(0)
}

#[test]
fn a_task_in_a_system_call_holds_the_cpu() {
    let ev = events(
        "stress-ng-futex-50 [001] ..... 1000.000100: sys_enter: NR 202 (0, 0, 0, 0, 0, 0)
stress-ng-futex-50 [001] d.h1. 1000.000201: local_timer_entry: vector=236
stress-ng-futex-50 [001] d.h2. 1000.000203: sched_waking: comm=rtmgr-probe1.0 pid=77 prio=0 target_cpu=001
stress-ng-futex-50 [001] d.h1. 1000.000204: local_timer_exit: vector=236
stress-ng-cpu-60 [000] ..... 1000.000500: sys_enter: NR 1 (0, 0, 0, 0, 0, 0)
stress-ng-futex-50 [001] ..... 1000.000900: sys_exit: NR 202 = 0
stress-ng-futex-50 [001] d..2. 1000.000901: sched_switch: prev_comm=stress-ng-futex prev_pid=50 prev_prio=120 prev_state=R+ ==> next_comm=rtmgr-probe1.0 next_pid=77 next_prio=0",
    );
    let s = Sample {
        cpu: 1,
        tid: 77,
        release_ns: us(1000, 200),
        wake_ns: us(1000, 905),
    };
    let a = attribute_in(&s, &ev, DEFAULT_TICK_NS);
    let futex = Cause::Syscall {
        comm: "stress-ng-futex".into(),
        syscall: "futex".into(),
    };
    assert_eq!(a.parts[0].0, futex, "{a:?}");
    assert_eq!(part(&a, &futex), 697_000);
    assert_eq!(
        part(
            &a,
            &Cause::Vector {
                name: "local_timer".into()
            }
        ),
        3_000
    );
    assert_eq!(part(&a, &Cause::Switch), 4_000);
    assert_eq!(a.parts.iter().map(|p| p.1).sum::<u64>(), s.latency_ns());
}

#[test]
fn an_idle_cpu_woken_late_and_an_interrupt() {
    let ev = events(
        "<idle>-0 [001] d.h1. 2000.000100: irq_handler_entry: irq=36 name=virtio1-req.0
<idle>-0 [001] d.h1. 2000.000112: irq_handler_exit: irq=36 ret=handled
<idle>-0 [001] d.h1. 2000.000450: local_timer_entry: vector=236
<idle>-0 [001] d.h2. 2000.000452: sched_waking: comm=rtmgr-probe1.0 pid=77 prio=0 target_cpu=001
<idle>-0 [001] d.h1. 2000.000453: local_timer_exit: vector=236
<idle>-0 [001] d..2. 2000.000455: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=rtmgr-probe1.0 next_pid=77 next_prio=0",
    );
    let s = Sample {
        cpu: 1,
        tid: 77,
        release_ns: us(2000, 0),
        wake_ns: us(2000, 458),
    };
    let a = attribute_in(&s, &ev, DEFAULT_TICK_NS);
    assert_eq!(part(&a, &Cause::IdleWakeup), 438_000, "{a:?}");
    assert_eq!(
        part(
            &a,
            &Cause::Irq {
                name: "virtio1-req.0".into()
            }
        ),
        12_000
    );
    assert_eq!(
        part(
            &a,
            &Cause::Vector {
                name: "local_timer".into()
            }
        ),
        3_000
    );
    // idle between the waking and the switch, then the switch itself
    assert_eq!(part(&a, &Cause::Switch), 5_000);
    assert_eq!(a.parts[0].0, Cause::IdleWakeup);
}

#[test]
fn truncated_and_empty_traces() {
    // The irq's exit was lost long before the release: it takes no blame.
    let ev = events(
        "<idle>-0 [001] d.h1. 3000.000000: irq_handler_entry: irq=9 name=acpi
<idle>-0 [001] d..2. 3000.020010: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=rtmgr-probe1.0 next_pid=77 next_prio=0
<idle>-0 [001] d..2. 3000.020011: sched_switch: prev_comm=swapp",
    );
    let s = Sample {
        cpu: 1,
        tid: 77,
        release_ns: us(3000, 20_000),
        wake_ns: us(3000, 20_012),
    };
    let a = attribute_in(&s, &ev, DEFAULT_TICK_NS);
    assert_eq!(
        part(
            &a,
            &Cause::Irq {
                name: "acpi".into()
            }
        ),
        0,
        "{a:?}"
    );
    assert_eq!(part(&a, &Cause::IdleWakeup), 10_000);
    // Nothing recorded in the window at all: the hypervisor.
    let none = attribute_in(
        &Sample {
            cpu: 1,
            tid: 77,
            release_ns: us(5000, 0),
            wake_ns: us(5000, 800),
        },
        &ev,
        DEFAULT_TICK_NS,
    );
    assert_eq!(none.parts, vec![(Cause::Unexplained, 800_000)]);
}

#[test]
fn a_task_switched_out_in_a_syscall_resumes_in_it() {
    let ev = events(
        "dd-40 [001] ..... 4000.000010: sys_enter: NR 1 (0, 0, 0, 0, 0, 0)
dd-40 [001] d..2. 4000.000020: sched_switch: prev_comm=dd prev_pid=40 prev_prio=120 prev_state=D ==> next_comm=cc1 next_pid=41 next_prio=120
cc1-41 [001] d..2. 4000.000030: sched_switch: prev_comm=cc1 prev_pid=41 prev_prio=120 prev_state=R ==> next_comm=dd next_pid=40 next_prio=120
dd-40 [001] d..2. 4000.000400: sched_switch: prev_comm=dd prev_pid=40 prev_prio=120 prev_state=R ==> next_comm=rtmgr-probe1.0 next_pid=77 next_prio=0",
    );
    let a = attribute_in(
        &Sample {
            cpu: 1,
            tid: 77,
            release_ns: us(4000, 50),
            wake_ns: us(4000, 402),
        },
        &ev,
        DEFAULT_TICK_NS,
    );
    let write = Cause::Syscall {
        comm: "dd".into(),
        syscall: "write".into(),
    };
    assert_eq!(part(&a, &write), 350_000, "{a:?}");
}

#[test]
fn a_long_silence_on_a_busy_cpu_is_the_hypervisor() {
    let ev = events(
        "stress-ng-futex-50 [001] ..... 6000.000100: sys_enter: NR 202 (0, 0, 0, 0, 0, 0)
stress-ng-futex-50 [001] d.h1. 6000.030201: local_timer_entry: vector=236
stress-ng-futex-50 [001] d.h2. 6000.030203: sched_waking: comm=rtmgr-probe1.0 pid=77 prio=0 target_cpu=001
stress-ng-futex-50 [001] d.h1. 6000.030204: local_timer_exit: vector=236
stress-ng-futex-50 [001] d..2. 6000.030210: sched_switch: prev_comm=stress-ng-futex prev_pid=50 prev_prio=120 prev_state=R+ ==> next_comm=rtmgr-probe1.0 next_pid=77 next_prio=0",
    );
    let s = Sample {
        cpu: 1,
        tid: 77,
        release_ns: us(6000, 200),
        wake_ns: us(6000, 30_212),
    };
    let a = attribute_in(&s, &ev, DEFAULT_TICK_NS);
    let futex = Cause::Syscall {
        comm: "stress-ng-futex".into(),
        syscall: "futex".into(),
    };
    assert_eq!(
        part(&a, &Cause::Host),
        30_001_000 - DEFAULT_TICK_NS,
        "{a:?}"
    );
    assert_eq!(part(&a, &futex), DEFAULT_TICK_NS + 6_000);
    assert_eq!(a.parts.iter().map(|p| p.1).sum::<u64>(), s.latency_ns());
}

#[test]
fn user_mode_silent_beyond_a_tick_is_the_host() {
    // A guest in user mode (its last system call returned) when the probe's
    // timer was due; the interrupt comes 5.5 ms late, and no tick came in
    // between: beyond one tick (4 ms), the vCPU did not run.
    let ev = events(
        "stress-ng-cpu-60 [001] ..... 7000.000050: sys_enter: NR 39 (0, 0, 0, 0, 0, 0)
stress-ng-cpu-60 [001] ..... 7000.000052: sys_exit: NR 39 = 60
stress-ng-cpu-60 [001] d.h1. 7000.005700: local_timer_entry: vector=236
stress-ng-cpu-60 [001] d.h2. 7000.005702: sched_waking: comm=rtmgr-probe1.0 pid=77 prio=0 target_cpu=001
stress-ng-cpu-60 [001] d.h1. 7000.005703: local_timer_exit: vector=236
stress-ng-cpu-60 [001] d..2. 7000.005710: sched_switch: prev_comm=stress-ng-cpu prev_pid=60 prev_prio=139 prev_state=R+ ==> next_comm=rtmgr-probe1.0 next_pid=77 next_prio=0",
    );
    let s = Sample {
        cpu: 1,
        tid: 77,
        release_ns: us(7000, 200),
        wake_ns: us(7000, 5_712),
    };
    let a = attribute_in(&s, &ev, DEFAULT_TICK_NS);
    let late = Cause::Stalled {
        comm: "stress-ng-cpu".into(),
    };
    assert_eq!(a.parts[0].0, late, "{a:?}");
    // One tick of the silence, and the 7 µs from the timer's exit to the switch.
    assert_eq!(part(&a, &late), DEFAULT_TICK_NS + 7_000);
    assert_eq!(part(&a, &Cause::Host), 5_500_000 - DEFAULT_TICK_NS);
    assert!(late.to_string().contains("unexplained"));
    assert_eq!(a.parts.iter().map(|p| p.1).sum::<u64>(), s.latency_ns());
}

#[test]
fn user_mode_silent_within_a_tick_is_unexplained() {
    // The same, 2 ms late: a tick may not have been due, so no evidence.
    let ev = events(
        "stress-ng-cpu-60 [001] ..... 7000.000050: sys_enter: NR 39 (0, 0, 0, 0, 0, 0)
stress-ng-cpu-60 [001] ..... 7000.000052: sys_exit: NR 39 = 60
stress-ng-cpu-60 [001] d.h1. 7000.002200: local_timer_entry: vector=236
stress-ng-cpu-60 [001] d.h1. 7000.002203: local_timer_exit: vector=236
stress-ng-cpu-60 [001] d..2. 7000.002210: sched_switch: prev_comm=stress-ng-cpu prev_pid=60 prev_prio=139 prev_state=R+ ==> next_comm=rtmgr-probe1.0 next_pid=77 next_prio=0",
    );
    let s = Sample {
        cpu: 1,
        tid: 77,
        release_ns: us(7000, 200),
        wake_ns: us(7000, 2_212),
    };
    let a = attribute_in(&s, &ev, DEFAULT_TICK_NS);
    assert_eq!(part(&a, &Cause::Host), 0, "{a:?}");
    let late = Cause::Stalled {
        comm: "stress-ng-cpu".into(),
    };
    assert_eq!(part(&a, &late), 2_007_000);
}

#[test]
fn no_event_at_all_on_a_busy_cpu_beyond_a_tick_is_the_host() {
    // The last event before the release shows a task in user mode; nothing
    // at all comes for 6 ms: beyond one tick, the host's.
    let ev = events("kdamond.0-33 [001] ..... 8000.000050: sys_exit: NR 39 = 60");
    let s = Sample {
        cpu: 1,
        tid: 77,
        release_ns: us(8000, 100),
        wake_ns: us(8000, 6_100),
    };
    let a = attribute_in(&s, &ev, DEFAULT_TICK_NS);
    assert_eq!(part(&a, &Cause::Host), 6_000_000 - DEFAULT_TICK_NS, "{a:?}");
    let kthread = Cause::Stalled {
        comm: "kdamond.0".into(),
    };
    assert_eq!(part(&a, &kthread), DEFAULT_TICK_NS);
    // Within a tick: no evidence, unexplained (a kernel thread is never host without it).
    let short = Sample {
        wake_ns: us(8000, 3_100),
        ..s
    };
    let a = attribute_in(&short, &ev, DEFAULT_TICK_NS);
    assert_eq!(part(&a, &Cause::Host), 0, "{a:?}");
}

#[test]
fn evidence_names_the_no_event_time_host() {
    let mut a = Attribution {
        sample: Sample {
            cpu: 1,
            tid: 77,
            release_ns: 0,
            wake_ns: 10,
        },
        parts: vec![
            (Cause::Stalled { comm: "x".into() }, 4),
            (Cause::Switch, 3),
            (Cause::Unexplained, 2),
            (Cause::Host, 1),
        ],
    };
    a.name_silence_host();
    assert_eq!(a.parts, [(Cause::Host, 7), (Cause::Switch, 3)]);
}
