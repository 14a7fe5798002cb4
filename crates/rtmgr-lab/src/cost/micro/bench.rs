//! The micro-benchmarks themselves (DROPS §5.1 Fig. 4 after hbench:OS and
//! lmbench): each runs for a time budget and returns ns per operation or MB/s.

use super::MicroKind;
use std::hint::black_box;
use std::io::{self, Read, Write};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

/// Run `op` in batches of `batch` until `budget` has passed; ns per operation.
fn per_op(budget: Duration, batch: u64, mut op: impl FnMut() -> io::Result<()>) -> io::Result<f64> {
    let t0 = Instant::now();
    let mut n = 0u64;
    loop {
        for _ in 0..batch {
            op()?;
        }
        n += batch;
        let e = t0.elapsed();
        if e >= budget {
            return Ok(e.as_nanos() as f64 / n as f64);
        }
    }
}

pub fn measure(kind: MicroKind, budget: Duration) -> io::Result<f64> {
    match kind {
        MicroKind::NullSyscall => per_op(budget, 1000, || {
            black_box(std::os::unix::process::parent_id());
            Ok(())
        }),
        MicroKind::CtxSwitch => {
            // Both tasks on one CPU: each round trip is two switches.
            let cpu = rtmgr_linux::sched::get_affinity(0)?
                .first()
                .ok_or_else(|| io::Error::other("no CPU in the affinity mask"))?;
            ping_pong(budget, Some(cpu)).map(|rt| rt / 2.0)
        }
        MicroKind::PipeLatency => ping_pong(budget, None),
        MicroKind::PipeBandwidth => pipe_bandwidth(budget),
        MicroKind::ForkExit => per_op(budget, 10, rtmgr_sys::process::fork_exit_wait),
        MicroKind::PageFault => page_faults(budget),
        MicroKind::UdpRoundTrip => udp_round_trip(budget),
    }
}

/// Pin the calling thread to `cpu`, if given.
fn pin(cpu: Option<u32>) -> io::Result<()> {
    match cpu {
        Some(c) => rtmgr_linux::sched::set_affinity(0, &rtmgr_core::CpuSet::single(c)),
        None => Ok(()),
    }
}

/// Round trips of one byte between two tasks over two pipes (lmbench
/// lat_pipe; lat_ctx when both are pinned to one CPU); ns per round trip.
fn ping_pong(budget: Duration, cpu: Option<u32>) -> io::Result<f64> {
    let (mut to_peer, mut from_us) = (std::io::pipe()?, std::io::pipe()?);
    let mut peer_in = to_peer.0;
    let mut peer_out = from_us.1;
    let peer = std::thread::spawn(move || -> io::Result<()> {
        pin(cpu)?;
        let mut b = [0u8; 1];
        loop {
            peer_in.read_exact(&mut b)?;
            if b[0] == 0 {
                return Ok(());
            }
            peer_out.write_all(&b)?;
        }
    });
    let restore = rtmgr_linux::sched::get_affinity(0)?;
    pin(cpu)?;
    let mut b = [1u8; 1];
    let r = per_op(budget, 100, || {
        to_peer.1.write_all(&[1])?;
        from_us.0.read_exact(&mut b)
    });
    let _ = to_peer.1.write_all(&[0]);
    let joined = peer.join().map_err(|_| io::Error::other("peer panicked"));
    rtmgr_linux::sched::set_affinity(0, &restore)?;
    joined??;
    r
}

/// One writer streams 64 KiB chunks through a pipe to a reader; MB/s.
fn pipe_bandwidth(budget: Duration) -> io::Result<f64> {
    let (mut rx, mut tx) = std::io::pipe()?;
    let reader = std::thread::spawn(move || -> io::Result<u64> {
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0u64;
        loop {
            match rx.read(&mut buf)? {
                0 => return Ok(total),
                n => total += n as u64,
            }
        }
    });
    let chunk = vec![7u8; 64 * 1024];
    let t0 = Instant::now();
    while t0.elapsed() < budget {
        for _ in 0..16 {
            tx.write_all(&chunk)?;
        }
    }
    drop(tx);
    let bytes = reader
        .join()
        .map_err(|_| io::Error::other("reader panicked"))??;
    Ok(bytes as f64 / t0.elapsed().as_secs_f64() / 1e6)
}

/// Fresh anonymous pages touched once each; ns per page fault. 64 MiB is
/// above glibc's largest mmap threshold, so every block is a new mapping.
fn page_faults(budget: Duration) -> io::Result<f64> {
    const BYTES: usize = 64 << 20;
    const PAGE: usize = 4096;
    let t0 = Instant::now();
    let mut pages = 0u64;
    while t0.elapsed() < budget {
        let mut block = vec![0u8; BYTES];
        for i in (0..BYTES).step_by(PAGE) {
            block[i] = 1;
        }
        black_box(&block);
        pages += (BYTES / PAGE) as u64;
    }
    Ok(t0.elapsed().as_nanos() as f64 / pages.max(1) as f64)
}

/// A one-byte UDP datagram to an echo thread on loopback and back; ns per round trip.
fn udp_round_trip(budget: Duration) -> io::Result<f64> {
    let echo = UdpSocket::bind("127.0.0.1:0")?;
    let us = UdpSocket::bind("127.0.0.1:0")?;
    us.connect(echo.local_addr()?)?;
    us.set_read_timeout(Some(Duration::from_secs(5)))?;
    let peer = std::thread::spawn(move || -> io::Result<()> {
        let mut b = [0u8; 1];
        loop {
            let (n, from) = echo.recv_from(&mut b)?;
            if n == 0 || b[0] == 0 {
                return Ok(());
            }
            echo.send_to(&b[..n], from)?;
        }
    });
    let mut b = [0u8; 1];
    let r = per_op(budget, 100, || {
        us.send(&[1])?;
        us.recv(&mut b).map(|_| ())
    });
    let _ = us.send(&[0]);
    peer.join()
        .map_err(|_| io::Error::other("echo thread panicked"))??;
    r
}
