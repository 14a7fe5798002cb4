//! The Unix-socket front end of the Manager (DROPS §4.1's request protocol):
//! one thread polling the listening socket, the connections, and the pidfds
//! of clients holding grants (readable = the client exited: its grants go).
//! Newline-delimited JSON, one response per request; a line longer than the
//! protocol's maximum, bytes that are not a request, a peer that vanishes —
//! each gets an error or is dropped, and the daemon goes on.

use super::manager::Manager;
use super::peer::{self, Client};
use rtmgr_core::protocol::{parse_request, ErrorCode, Response, MAX_MESSAGE};
use rtmgr_sys::pidfd::{peer_cred, peer_pidfd, poll_readable};
use rtmgr_sys::time::mono_ns;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A connection closes after this long without a complete request.
const IDLE_NS: u64 = 30_000_000_000;

struct Conn {
    stream: UnixStream,
    client: Client,
    buf: Vec<u8>,
    last_ns: u64,
    closed: bool,
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
    let mut next_tick = mono_ns() + tick_ms * 1_000_000;
    while !stop.load(Ordering::Relaxed) {
        let (ready, exited, woken) = {
            let pidfds = m.pidfds();
            let mut fds: Vec<BorrowedFd<'_>> = Vec::with_capacity(1 + conns.len() + pidfds.len());
            fds.push(listener.as_fd());
            fds.extend(conns.iter().map(|c| c.stream.as_fd()));
            fds.extend(pidfds.iter().map(|(_, fd)| *fd));
            let first_front = fds.len();
            fds.extend(fronts.iter().map(|f| f.fd()));
            let wait = wait_ms(next_tick, mono_ns());
            // Every few ms while a thread waits for SCHED_DEADLINE
            // (`pending.rs`), 100 ms while grants are watched, else at the tick.
            let most = m.wake_within_ms().unwrap_or(wait);
            let ready = poll_readable(&fds, wait.min(most) as i32)?;
            let exited: Vec<u32> = pidfds
                .iter()
                .zip(&ready[1 + conns.len()..])
                .filter(|(_, r)| **r)
                .map(|((pid, _), _)| *pid)
                .collect();
            let woken = ready[first_front..].to_vec();
            (ready[..1 + conns.len()].to_vec(), exited, woken)
        };
        for pid in exited {
            m.client_exited(pid);
        }
        for (f, r) in fronts.iter_mut().zip(woken) {
            if r {
                f.serve(m);
            }
        }
        m.finish_deferred();
        m.repair_stranded(mono_ns());
        m.finish_pending(mono_ns());
        for (c, r) in conns.iter_mut().zip(&ready[1..]) {
            if *r {
                serve_conn(m, c);
            }
        }
        if ready[0] {
            accept(m, listener, &mut conns, max_connections);
        }
        let now = mono_ns();
        conns.retain(|c| !c.closed && now.saturating_sub(c.last_ns) < IDLE_NS);
        if now >= next_tick {
            tick(m);
            next_tick = now + tick_ms * 1_000_000;
        }
    }
    Ok(())
}

/// Whole ms until `next_tick`, rounded up: rounded down, the poll ended
/// short of the tick and the loop spun on 0 ms polls for up to a ms.
fn wait_ms(next_tick: u64, now: u64) -> u64 {
    next_tick.saturating_sub(now).div_ceil(1_000_000)
}

fn accept(m: &mut Manager, listener: &UnixListener, conns: &mut Vec<Conn>, max: usize) {
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
        conns.push(Conn {
            stream,
            client,
            buf: Vec::new(),
            last_ns: mono_ns(),
            closed: false,
        });
    }
}

/// Read what is there (one read: poll said readable), answer every complete line.
fn serve_conn(m: &mut Manager, c: &mut Conn) {
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
    while let Some(i) = c.buf.iter().position(|&b| b == b'\n') {
        let line: Vec<u8> = c.buf.drain(..=i).collect();
        answer(m, c, &line[..line.len() - 1]);
        if c.closed {
            return;
        }
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
    if n == 0 {
        // End of stream: an unterminated last line is answered as it is.
        if !c.buf.is_empty() {
            let line = std::mem::take(&mut c.buf);
            answer(m, c, &line);
        }
        c.closed = true;
    }
}

fn answer(m: &mut Manager, c: &mut Conn, line: &[u8]) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let t0 = mono_ns();
    let resp = match parse_request(line) {
        Ok(req) => {
            let v = req.v;
            m.handle(&c.client, req).in_version(v)
        }
        Err(e) => {
            let r = Response::error(e.code, e.message);
            m.count(&r);
            r
        }
    };
    tracing::debug!(
        "pid {}: answered in {} µs",
        c.client.cred.pid,
        (mono_ns() - t0) / 1000
    );
    if write_line(&c.stream, &resp).is_err() {
        c.closed = true;
    }
}

fn write_line(mut s: &UnixStream, r: &Response) -> std::io::Result<()> {
    s.write_all(r.to_line().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::wait_ms;

    /// Up to the tick the poll waits at least 1 ms (no 0 ms poll before
    /// the tick is due); at or past it, 0 (the tick runs now).
    #[test]
    fn the_wait_for_the_tick_is_rounded_up() {
        let t = 5_000_000_000;
        assert_eq!(wait_ms(t, t - 400_000), 1);
        assert_eq!(wait_ms(t, t - 1_000_000), 1);
        assert_eq!(wait_ms(t, t - 1_000_001), 2);
        assert_eq!(wait_ms(t, t - 999_999_999), 1000);
        assert_eq!((wait_ms(t, t), wait_ms(t, t + 5)), (0, 0));
    }
}
