//! Starting a probe's threads (McKenney §2.1: one pinned SCHED_FIFO thread
//! per measured CPU): each is set up by `rt_thread::setup_rt_thread`, says
//! how that went, then runs its body. The guard, `rtmgr top --probe` and the
//! lab's probe start theirs here.

use crate::rt_thread::{setup_rt_thread, MeasureError, Prepare};
use crate::sched::Policy;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// Threads started, and whether every one was set up.
pub struct Started<T> {
    pub handles: Vec<JoinHandle<T>>,
    /// Every set-up error (sorted, once each), or Ok.
    pub setup: Result<(), MeasureError>,
}

/// One thread per entry of `cpus`, named `name(i)`, each pinned to its CPU
/// under `policy` (after `prepare`), then running `body(i, set_up)`. Returns
/// when every thread has reported its set-up; on an error the threads that
/// were set up run on: the caller stops them and joins.
pub fn spawn_pinned<T, F>(
    cpus: &[u32],
    name: impl Fn(usize) -> String,
    policy: Policy,
    prepare: Option<Prepare>,
    body: F,
) -> Started<T>
where
    T: Send + 'static,
    F: Fn(usize, bool) -> T + Send + Sync + 'static,
{
    let body = Arc::new(body);
    let (tx, rx) = mpsc::channel::<Result<(), String>>();
    let mut handles = Vec::with_capacity(cpus.len());
    let mut errors = Vec::new();
    for (i, &cpu) in cpus.iter().enumerate() {
        let (tx, prepare, body) = (tx.clone(), prepare.clone(), body.clone());
        let spawned = std::thread::Builder::new().name(name(i)).spawn(move || {
            let ok = setup_rt_thread(cpu, policy, prepare.as_ref());
            let set_up = ok.is_ok();
            let _ = tx.send(ok.map_err(|e| e.to_string()));
            // The caller waits until every thread has said how its set-up went.
            drop(tx);
            body(i, set_up)
        });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                errors.push(MeasureError::io("spawn probe thread", e).to_string());
                break;
            }
        }
    }
    drop(tx);
    let reports: Vec<Result<(), String>> = rx.iter().collect();
    if reports.len() < handles.len() {
        errors.push("probe thread died during setup".into());
    }
    errors.extend(reports.into_iter().filter_map(|r| r.err()));
    errors.sort();
    errors.dedup();
    let setup = match errors.is_empty() {
        true => Ok(()),
        false => Err(MeasureError::Setup(errors.join("; "))),
    };
    Started { handles, setup }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_that_does_not_exist_is_a_setup_error_and_the_body_knows() {
        let s = spawn_pinned(
            &[100_000],
            |i| format!("t{i}"),
            Policy::Other { nice: 0 },
            None,
            |i, set_up| (i, set_up),
        );
        assert!(s.setup.is_err());
        let out: Vec<_> = s.handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(out, vec![(0, false)]);
    }
}
