//! The user-mode prediction of lending (ARTiS §2.1: guests only while
//! preemptible): which tasks are lent, and the coarse /proc times it forgives.

use super::*;

#[test]
fn only_tasks_predicted_to_stay_in_user_mode_are_lent() {
    // One idle RT CPU, a saturated NRT CPU: a pure user-mode task, one that
    // spends 20 % of its time in the kernel, one that blocks 400 times a
    // second, and one that makes 1000 read/write calls a second.
    let c = cpus(&[0], &[(1, 0.0)]);
    let mut tasks = vec![
        busy(1, TaskClass::Linux, Place::Nrt),
        TaskObs {
            user_ns: 40 * MS,
            kernel_ns: 10 * MS,
            ..busy(2, TaskClass::Linux, Place::Nrt)
        },
        TaskObs {
            voluntary: 20,
            ..busy(3, TaskClass::Linux, Place::Nrt)
        },
        TaskObs {
            kernel_entries: Some(50),
            ..busy(4, TaskClass::Linux, Place::Nrt)
        },
    ];
    let cfg = PolicyConfig {
        rotate: false,
        ..Default::default()
    };
    let mut b = Balancer::new(cfg.clone());
    let mut lent = Vec::new();
    for step in 0..6 {
        let m = b.step(&obs(step * 50 * MS, c.clone(), tasks.clone()));
        lent.extend(m.iter().filter(|m| m.to == Place::Rt(1)).map(|m| m.task));
        apply(&mut tasks, &m);
    }
    assert_eq!(lent, vec![1], "only the user-mode task");
    // Without the prediction the first candidate (poorest, then id) is lent.
    let mut tasks2: Vec<TaskObs> = tasks
        .iter()
        .map(|t| TaskObs {
            place: Place::Nrt,
            ..t.clone()
        })
        .collect();
    tasks2.retain(|t| t.id != 1);
    let mut b = Balancer::new(PolicyConfig {
        predict_user_mode: false,
        ..cfg
    });
    let mut any = false;
    for step in 0..6 {
        let m = b.step(&obs(step * 50 * MS, c.clone(), tasks2.clone()));
        any |= m.iter().any(|m| m.to == Place::Rt(1));
        apply(&mut tasks2, &m);
    }
    assert!(any, "the prediction is what kept the others off");
}

#[test]
fn one_clock_tick_of_kernel_time_is_forgiven_where_times_are_coarse() {
    // /proc counts user and kernel time in 10 ms ticks: a busy user-mode
    // task is charged a stray tick of kernel time now and then. With that
    // resolution declared, one tick (10 of 40 ms) is forgiven, two are not.
    let c = cpus(&[0], &[(1, 0.0)]);
    let with_kernel = |id, kernel_ms| TaskObs {
        user_ns: 40 * MS - kernel_ms * MS,
        kernel_ns: kernel_ms * MS,
        ..busy(id, TaskClass::Linux, Place::Nrt)
    };
    for (kernel_ms, resolution_ns, lent) in
        [(10, 10 * MS, true), (20, 10 * MS, false), (10, 0, false)]
    {
        let mut tasks = vec![with_kernel(1, kernel_ms), with_kernel(2, kernel_ms)];
        let cfg = PolicyConfig {
            rotate: false,
            ..Default::default()
        };
        let mut b = Balancer::new(cfg);
        let mut any = false;
        for step in 0..6 {
            let o = Observation {
                time_resolution_ns: resolution_ns,
                ..obs(step * 50 * MS, c.clone(), tasks.clone())
            };
            let m = b.step(&o);
            any |= m.iter().any(|m| m.to == Place::Rt(1));
            apply(&mut tasks, &m);
        }
        assert_eq!(
            any, lent,
            "{kernel_ms} ms of kernel time at {resolution_ns} ns resolution"
        );
    }
}
