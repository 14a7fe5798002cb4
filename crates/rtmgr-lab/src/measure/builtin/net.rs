//! The built-in network load (ARTiS §3.1 "network load"; stress-ng `sock`):
//! per load CPU a client and a server thread talk TCP over 127.0.0.1 — 64 KiB
//! messages, each acknowledged, a new connection every 256 messages — so
//! loopback packets, their softirqs and the socket locks are exercised. Each
//! pair listens on its own ephemeral port: two loads never fight for a port.

use super::{Counter, Env, Workers};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

pub(super) const NAME: &str = "tcp-loopback";
const OP: &str = "a 64 KiB message sent over TCP on 127.0.0.1 and acknowledged (a new connection every 256 messages)";
const MESSAGE: usize = 64 << 10;
const ACK: usize = 8;
const PER_CONNECTION: u32 = 256;
/// Blocking socket calls wake this often to look at the stop flag.
const POLL: Duration = Duration::from_millis(100);

pub(super) fn start(instances: usize, w: &mut Workers) -> std::io::Result<()> {
    let ops = w.counter(NAME, OP);
    for _ in 0..instances {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        w.spawn("tcp-server", move |env| {
            quiet_when_stopped(env, serve(&listener, env))
        })?;
        let ops = ops.clone();
        w.spawn(NAME, move |env| {
            quiet_when_stopped(env, client(addr, &ops, env))
        })?;
    }
    Ok(())
}

/// A peer that stops first resets the connection: not an error then.
fn quiet_when_stopped(env: &Env, r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(_) if env.stopped() => Ok(()),
        r => r,
    }
}

fn timeouts(s: &TcpStream) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(POLL))?;
    s.set_write_timeout(Some(POLL))
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// Move `len` bytes with `step(offset)` (a read or a write from there),
/// riding out the socket timeouts; false at end of stream or when stopped.
fn transfer(
    len: usize,
    env: &Env,
    mut step: impl FnMut(usize) -> std::io::Result<usize>,
) -> std::io::Result<bool> {
    let mut done = 0;
    while done < len {
        match step(done) {
            Ok(0) => return Ok(false),
            Ok(n) => done += n,
            Err(e) if timed_out(&e) => {
                if env.stopped() {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn read_full(s: &mut TcpStream, buf: &mut [u8], env: &Env) -> std::io::Result<bool> {
    transfer(buf.len(), env, |at| s.read(&mut buf[at..]))
}

fn write_full(s: &mut TcpStream, buf: &[u8], env: &Env) -> std::io::Result<bool> {
    transfer(buf.len(), env, |at| s.write(&buf[at..]))
}

fn serve(listener: &TcpListener, env: &Env) -> std::io::Result<()> {
    let mut message = vec![0u8; MESSAGE];
    while !env.stopped() {
        let mut s = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if timed_out(&e) => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) => return Err(e),
        };
        s.set_nonblocking(false)?;
        timeouts(&s)?;
        while read_full(&mut s, &mut message, env)? {
            if !write_full(&mut s, &[0u8; ACK], env)? {
                break;
            }
        }
    }
    Ok(())
}

fn client(addr: SocketAddr, ops: &Arc<Counter>, env: &Env) -> std::io::Result<()> {
    let message = vec![0x5au8; MESSAGE];
    let mut ack = [0u8; ACK];
    while !env.stopped() {
        let mut s = TcpStream::connect(addr)?;
        timeouts(&s)?;
        for _ in 0..PER_CONNECTION {
            if !write_full(&mut s, &message, env)? || !read_full(&mut s, &mut ack, env)? {
                break;
            }
            ops.add(1);
        }
    }
    Ok(())
}
