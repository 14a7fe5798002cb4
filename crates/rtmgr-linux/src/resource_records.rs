//! Undoing the records of what runs beside the daemon's `[resources]` knobs
//! (DROPS §4.1: the manager gives back what it took): the starvation
//! guard's boosts and the live balancer's lends (`balance::lends`, ARTiS
//! §2.1), read from the one partition journal (the knobs' own files and
//! directory are their steps' undo, `resources::knobs::undo_records`); and
//! everything in the resources.jsonl an older rtmgr kept beside it (its
//! records name no knob).

use crate::host::{Host, Result};
use crate::journal::Record;
use crate::tasks;

/// Which records a pass undoes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The partition journal: boosts, lends and a directory an older rtmgr
    /// journalled without a knob's name (its resource knobs' files and
    /// directory are their steps' undo).
    PartitionJournal,
    /// An older rtmgr's resources.jsonl: every file, directory and boost.
    Legacy,
}

/// What an undo pass left.
#[derive(Debug, Default)]
pub struct Undone {
    /// What could not be restored.
    pub problems: Vec<String>,
    /// Threads whose boost was put back (journal `Unboost` for them when the
    /// journal is kept).
    pub unboosted: Vec<u32>,
    /// Tasks a balancer lent that were given back (journal `GivenBack` for
    /// them when the journal is kept).
    pub given_back: Vec<u32>,
}

/// Undo the records of `source`, newest first; then (the partition journal)
/// give back what a balancer lent.
pub fn undo(host: &Host, records: &[Record], source: Source) -> Undone {
    let mut out = undo_resources(host, records, source);
    if source == Source::PartitionJournal {
        let lends = crate::balance::lends::undo(host, records);
        out.problems.extend(lends.problems);
        out.given_back = lends.given_back;
    }
    out
}

fn undo_resources(host: &Host, records: &[Record], source: Source) -> Undone {
    let mut out = Undone::default();
    let note = |what: String, r: Result<()>, out: &mut Undone| {
        if let Err(e) = r {
            if !e.is_gone() {
                out.problems.push(format!("{what}: {e}"));
            }
        }
    };
    // Newest first: an `Unboost` settles the boosts before it, not a later
    // boost of the same thread (starved again).
    let mut put_back: Vec<u32> = Vec::new();
    for r in records.iter().rev() {
        match r {
            Record::Unboost { tid } => put_back.push(*tid),
            Record::File { path, old, .. } if source == Source::Legacy => {
                let done = host.write(path, old);
                note(format!("restore {}", path.display()), done, &mut out)
            }
            // A directory naming no knob: an older rtmgr's (a knob's own is
            // its step's undo).
            Record::Dir { path, knob }
                if (source == Source::Legacy || knob.is_none()) && host.exists(path) =>
            {
                let done = host.rmdir(path);
                note(format!("remove {}", path.display()), done, &mut out)
            }
            Record::Boost {
                tid,
                start_time,
                old,
            } if !put_back.contains(tid) => {
                put_back.push(*tid);
                if tasks::same_task(host, *tid, *start_time) {
                    let done = host.set_attr(*tid, old);
                    note(format!("thread {tid} policy"), done, &mut out);
                    out.unboosted.push(*tid);
                }
            }
            _ => {}
        }
    }
    out
}
