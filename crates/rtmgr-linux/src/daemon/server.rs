//! The Unix-socket front end of the Manager (DROPS §4.1's request protocol):
//! one thread waiting (epoll, each descriptor registered once) on the
//! listening socket, the connections, and the pidfds of clients holding
//! grants (readable = the client exited: its grants go).
//! Newline-delimited JSON, one response per request; a line longer than the
//! protocol's maximum, bytes that are not a request, a peer that vanishes —
//! each gets an error or is dropped, and the daemon goes on. A grant's
//! kernel steps run on the grant worker: its connection waits for the
//! answer, every other one is served meanwhile, and the next `reserve`
//! waits its turn (the oldest first: one read as the worker comes free
//! goes behind those already waiting).

use super::manager::{Answer, Manager};
use super::peer::{self, Client};
use rtmgr_core::protocol::{parse_request, AnswerOp, ErrorCode, Op, Response, MAX_MESSAGE};
use rtmgr_sys::interest::Interest;
use rtmgr_sys::pidfd::{peer_cred, peer_pidfd};
use rtmgr_sys::time::mono_ns;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The readiness keys of the listening socket and of the grant worker's
/// wake-up socket; the kinds of the others (`key`): a front end (by index),
/// a connection (by token), a client's pidfd (by its watch's serial).
const LISTENER: u64 = 0;
const WORKER: u64 = 2 << 56;
const FRONT: u64 = 1;
const CONN: u64 = 3;
const PIDFD: u64 = 4;

/// A key: its kind in the top byte, its id below.
fn key(kind: u64, id: u64) -> u64 {
    kind << 56 | (id & ((1 << 56) - 1))
}

/// A connection closes after this long without a complete request.
const IDLE_NS: u64 = 30_000_000_000;

struct Conn {
    token: u64,
    stream: UnixStream,
    client: Client,
    buf: Vec<u8>,
    last_ns: u64,
    closed: bool,
    /// The peer will send no more (its lines are still answered).
    eof: bool,
    /// A grant of this connection's is on the worker: its version, when
    /// the request was read, and which request it was.
    awaiting: Option<(u32, u64, AnswerOp)>,
    /// Since when a `reserve` of this connection waits for the grant in flight.
    queued_ns: Option<u64>,
    /// When the next line to answer was read, if earlier than `last_ns`
    /// (a `reserve` that waited its turn).
    head_read_ns: Option<u64>,
}

impl Conn {
    /// Polled for reading: an ended stream is always readable.
    fn polled(&self) -> bool {
        !self.eof && !self.closed
    }

    /// A `reserve` of this connection waits its turn.
    fn queued(&self) -> bool {
        self.queued_ns.is_some() && !self.closed
    }

    /// Nothing left to answer.
    fn idle(&self) -> bool {
        self.awaiting.is_none() && self.queued_ns.is_none()
    }
}

/// Another front end served from this loop (the D-Bus one): its fd is
/// polled beside the socket's; readable = requests wait for `serve`.
pub trait Front {
    fn fd(&self) -> BorrowedFd<'_>;
    fn serve(&mut self, m: &mut Manager);
}

/// Serve until `stop` is set. `tick` runs every `tick_ms` (reconciliation).
pub fn run(
    m: &mut Manager,
    listener: &UnixListener,
    max_connections: usize,
    tick_ms: u64,
    stop: &AtomicBool,
    tick: impl FnMut(&mut Manager),
) -> std::io::Result<()> {
    run_with(m, listener, max_connections, tick_ms, stop, tick, &mut [])
}

/// `run`, also serving `fronts`.
pub fn run_with(
    m: &mut Manager,
    listener: &UnixListener,
    max_connections: usize,
    tick_ms: u64,
    stop: &AtomicBool,
    mut tick: impl FnMut(&mut Manager),
    fronts: &mut [&mut dyn Front],
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut conns: Vec<Conn> = Vec::new();
    let mut next_token = 1;
    let mut next_tick = mono_ns() + tick_ms * 1_000_000;
    let mut interest = Interest::new()?;
    while !stop.load(Ordering::Relaxed) {
        // Registered once each (epoll), not handed to the kernel at every wake.
        interest.sync(
            std::iter::once((LISTENER, listener.as_fd()))
                .chain(
                    conns
                        .iter()
                        .filter(|c| c.polled())
                        .map(|c| (key(CONN, c.token), c.stream.as_fd())),
                )
                .chain(m.pidfds().map(|(_, serial, fd)| (key(PIDFD, serial), fd)))
                .chain(
                    fronts
                        .iter()
                        .enumerate()
                        .map(|(i, f)| (key(FRONT, i as u64), f.fd())),
                )
                // Readable = a grant is done.
                .chain(m.worker_fd().map(|fd| (WORKER, fd))),
        )?;
        let wait = wait_ms(next_tick, mono_ns());
        // Every few ms while a thread waits for SCHED_DEADLINE
        // (`pending.rs`), 100 ms while grants are watched, else at the tick.
        let most = m.wake_within_ms().unwrap_or(wait);
        let ready = interest.wait(wait.min(most) as i32)?;
        let exited: Vec<u32> = m
            .pidfds()
            .filter(|(_, serial, _)| ready.contains(&key(PIDFD, *serial)))
            .map(|(pid, _, _)| pid)
            .collect();
        if ready.contains(&WORKER) {
            m.worker_woke();
        }
        for pid in exited {
            m.client_exited(pid);
        }
        for (i, f) in fronts.iter_mut().enumerate() {
            if ready.contains(&key(FRONT, i as u64)) {
                f.serve(m);
            }
        }
        m.share_the_cpu();
        // The worker's fd woke the poll when a grant is done.
        deliver(m, &mut conns);
        m.finish_deferred();
        m.repair_stranded(mono_ns());
        m.finish_pending(mono_ns());
        // A `reserve` read now goes behind those that wait their turn
        // already: the oldest is served first (`serve_queued`), not one
        // that arrives as the worker comes free.
        let mut behind = conns.iter().any(Conn::queued);
        for c in conns.iter_mut() {
            if ready.contains(&key(CONN, c.token)) {
                serve_conn(m, c, behind);
                behind |= c.queued();
            }
        }
        serve_queued(m, &mut conns);
        // Answers ready at once (a job done here: the worker is gone).
        deliver(m, &mut conns);
        if ready.contains(&LISTENER) {
            accept(m, listener, &mut conns, max_connections, &mut next_token);
        }
        let now = mono_ns();
        conns.retain(|c| !c.closed && (!c.idle() || now.saturating_sub(c.last_ns) < IDLE_NS));
        if now >= next_tick {
            tick(m);
            next_tick = now + tick_ms * 1_000_000;
        }
    }
    drain(m, &mut conns);
    Ok(())
}

/// At the stop, nothing read goes unanswered: the grant in flight is
/// answered first, then every complete line already read, in order on each
/// connection; a `reserve` (one that waited its turn too) gets
/// `shutting_down` and is granted nothing, the rest their usual answers (a
/// `release` may still go to the worker: it is waited for). Nothing more is
/// read.
fn drain(m: &mut Manager, conns: &mut [Conn]) {
    m.stop_granting();
    loop {
        m.await_in_flight();
        deliver(m, conns);
        for c in conns
            .iter_mut()
            .filter(|c| !c.closed && c.awaiting.is_none())
        {
            if let Some(t) = c.queued_ns.take() {
                c.head_read_ns = Some(t);
            }
            answer_lines(m, c, false);
        }
        if !m.worker_busy() {
            return;
        }
    }
}

/// Whole ms until `next_tick`, rounded up: rounded down, the poll ended
/// short of the tick and the loop spun on 0 ms polls for up to a ms.
fn wait_ms(next_tick: u64, now: u64) -> u64 {
    next_tick.saturating_sub(now).div_ceil(1_000_000)
}

/// Answer the grants the worker finished, each on its connection (gone:
/// the grant stays the client's process's, like any grant of a client
/// that hung up); their queued lines go on.
fn deliver(m: &mut Manager, conns: &mut [Conn]) {
    for (token, resp) in m.take_answers() {
        let behind = conns.iter().any(|c| c.token != token && c.queued());
        let Some(c) = conns.iter_mut().find(|c| c.token == token) else {
            continue;
        };
        let Some((v, read_ns, op)) = c.awaiting.take() else {
            continue;
        };
        if write_line(&c.stream, &resp.in_version(v)).is_err() {
            c.closed = true;
        }
        answered(m, c, op, read_ns);
        answer_lines(m, c, behind);
    }
}

/// Connections whose `reserve` waited its turn, the oldest first, while
/// no job is in flight.
fn serve_queued(m: &mut Manager, conns: &mut [Conn]) {
    while !m.worker_busy() {
        let Some(c) = conns
            .iter_mut()
            .filter(|c| c.queued())
            .min_by_key(|c| c.queued_ns)
        else {
            return;
        };
        c.head_read_ns = c.queued_ns.take();
        answer_lines(m, c, false);
    }
}

fn accept(
    m: &mut Manager,
    listener: &UnixListener,
    conns: &mut Vec<Conn>,
    max: usize,
    next_token: &mut u64,
) {
    for _ in 0..64 {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(_) => return,
        };
        if conns.len() >= max {
            let _ = write_line(
                &stream,
                &Response::error(ErrorCode::Os, "too many connections; try again"),
            );
            continue;
        }
        let Ok(cred) = peer_cred(stream.as_fd()) else {
            continue;
        };
        let pidfd = peer_pidfd(stream.as_fd()).ok().flatten();
        // A peer that is gone already cannot be granted anything.
        let Some(client) = peer::identify(&m.host, cred, pidfd) else {
            continue;
        };
        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
        *next_token += 1;
        conns.push(Conn {
            token: *next_token,
            stream,
            client,
            buf: Vec::new(),
            last_ns: mono_ns(),
            closed: false,
            eof: false,
            awaiting: None,
            queued_ns: None,
            head_read_ns: None,
        });
    }
}

/// Read what is there (one read: poll said readable), answer every complete
/// line; `behind`: other `reserve`s wait their turn already.
fn serve_conn(m: &mut Manager, c: &mut Conn, behind: bool) {
    let mut chunk = [0u8; 16 * 1024];
    let n = match (&c.stream).read(&mut chunk) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return,
        Err(_) => {
            c.closed = true;
            return;
        }
    };
    c.last_ns = mono_ns();
    c.buf.extend_from_slice(&chunk[..n]);
    c.eof = n == 0;
    if c.idle() {
        answer_lines(m, c, behind);
    } else if c.buf.len() > 2 * MAX_MESSAGE {
        // Pipelined beyond reason while its grant is applied.
        c.closed = true;
    }
}

/// Answer the complete lines in order, until one waits: for its grant's
/// kernel steps (`awaiting`) or for its turn (`queued_ns`: a grant is in
/// flight, or `behind` other `reserve`s that wait theirs). At the end of
/// the stream an unterminated last line is answered as it is.
fn answer_lines(m: &mut Manager, c: &mut Conn, behind: bool) {
    while c.awaiting.is_none() && !c.closed {
        let Some(i) = c.buf.iter().position(|&b| b == b'\n') else {
            break;
        };
        let read_ns = c.head_read_ns.take().unwrap_or(c.last_ns);
        if waits_its_turn(m, &c.buf[..i], behind) {
            c.queued_ns.get_or_insert(read_ns);
            return;
        }
        let line: Vec<u8> = c.buf.drain(..=i).collect();
        answer(m, c, &line[..line.len() - 1], read_ns);
    }
    if c.awaiting.is_some() || c.closed {
        return;
    }
    if c.buf.len() > MAX_MESSAGE {
        let resp = Response::error(
            ErrorCode::TooLarge,
            format!("no newline within {MAX_MESSAGE} bytes: the connection is closed"),
        );
        m.count(&resp);
        let _ = write_line(&c.stream, &resp);
        c.closed = true;
        return;
    }
    if c.eof {
        if !c.buf.is_empty() {
            let read_ns = c.head_read_ns.take().unwrap_or(c.last_ns);
            if waits_its_turn(m, &c.buf, behind) {
                c.queued_ns.get_or_insert(read_ns);
                return;
            }
            let line = std::mem::take(&mut c.buf);
            answer(m, c, &line, read_ns);
        }
        c.closed = c.awaiting.is_none();
    }
}

/// A `reserve` while a job is in flight, or `behind` others that wait
/// their turn, waits.
fn waits_its_turn(m: &Manager, line: &[u8], behind: bool) -> bool {
    (m.worker_busy() || behind)
        && parse_request(line.strip_suffix(b"\r").unwrap_or(line))
            .is_ok_and(|r| matches!(r.op, Op::Reserve(_)))
}

/// Answer one line, read at `read_ns`.
fn answer(m: &mut Manager, c: &mut Conn, line: &[u8], read_ns: u64) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let (resp, op) = match parse_request(line) {
        Ok(req) => {
            let v = req.v;
            let op = AnswerOp::of(&req.op);
            match m.handle_or_start(&c.client, req, Some(c.token)) {
                Answer::Now(resp) => (resp.in_version(v), op),
                Answer::Later => {
                    c.awaiting = Some((v, read_ns, op));
                    return;
                }
            }
        }
        Err(e) => {
            let r = Response::error(e.code, e.message);
            m.count(&r);
            (r, AnswerOp::Other)
        }
    };
    if write_line(&c.stream, &resp).is_err() {
        c.closed = true;
    }
    answered(m, c, op, read_ns);
}

/// An answer written: how long since its request was read, waiting its
/// turn included (`rtmgr_answer_seconds`, and the debug log).
fn answered(m: &mut Manager, c: &Conn, op: AnswerOp, read_ns: u64) {
    let took_ns = mono_ns().saturating_sub(read_ns);
    m.observe_answer(op, took_ns);
    tracing::debug!(
        "pid {}: answered in {} µs",
        c.client.cred.pid,
        took_ns / 1000
    );
}

fn write_line(mut s: &UnixStream, r: &Response) -> std::io::Result<()> {
    s.write_all(r.to_line().as_bytes())
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
