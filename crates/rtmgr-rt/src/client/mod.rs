//! The daemon's client (DROPS §4.1: a task asks the resource manager for
//! what it needs; budget-based RTAI §3: W every P): connect to `rtmgr serve`
//! over its Unix socket and reserve, release, list, ask the status. The
//! periodic task API uses it when a daemon runs; C programs call
//! `rtmgr_reserve()` ([`capi`]). The socket is `$RTMGR_SOCKET`, else
//! /run/rtmgr/rtmgr.sock.

pub mod capi;

pub use rtmgr_core::protocol::{
    ErrorCode, IrqRef, RefusalKind, ReservationInfo, ReserveRequest, StatusInfo,
};

use rtmgr_core::protocol::{parse_response, Op, Reply, Request, Response, DEFAULT_SOCKET};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// Environment variable naming the daemon's socket.
pub const SOCKET_ENV: &str = "RTMGR_SOCKET";
/// Environment variable that keeps the periodic task API off the daemon.
pub const NO_DAEMON_ENV: &str = "RTMGR_NO_DAEMON";

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no rtmgr daemon at {path}: {source}")]
    NoDaemon {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("refused ({reason:?}): {message}")]
    Refused {
        reason: RefusalKind,
        message: String,
    },
    #[error("the daemon answered with an error ({code:?}): {message}")]
    Daemon { code: ErrorCode, message: String },
    #[error("talking to the daemon: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Protocol(String),
}

/// The socket to use.
pub fn socket_path() -> PathBuf {
    std::env::var_os(SOCKET_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// Is a daemon listening (and not disabled by RTMGR_NO_DAEMON)?
pub fn daemon_running() -> bool {
    std::env::var_os(NO_DAEMON_ENV).is_none() && UnixStream::connect(socket_path()).is_ok()
}

/// A connection to the daemon.
pub struct Client {
    reader: BufReader<UnixStream>,
    stream: UnixStream,
}

impl Client {
    /// Connect to `socket_path()`.
    pub fn connect() -> Result<Client, ClientError> {
        Self::connect_to(&socket_path())
    }

    pub fn connect_to(path: &std::path::Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path).map_err(|source| ClientError::NoDaemon {
            path: path.display().to_string(),
            source,
        })?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Client { reader, stream })
    }

    /// Send one request, read its response. While waiting the thread stays
    /// runnable (yielding) until the answer: a release needs it runnable to
    /// get the bandwidth back (the kernel, 6.x, returns the bandwidth of a
    /// thread leaving SCHED_DEADLINE only if it is runnable then). A grant
    /// does not (the daemon grants a sleeping thread too, docs/protocol.md
    /// "When the policy takes effect"), but a client that blocked for its
    /// grants met stranded deadline threads in the soak far more often
    /// (docs/serve.md "Stranded threads"). A SCHED_FIFO/RR thread blocks,
    /// at once or as soon as its grant makes it one: woken by the answer
    /// at SCHED_FIFO, Linux restarts its RLIMIT_RTTIME count (it does so
    /// only when an RT thread wakes; a thread that spun through its FIFO
    /// grants added up their RT time until SIGXCPU).
    pub fn request(&mut self, op: Op) -> Result<Response, ClientError> {
        self.stream
            .write_all(Request::new(op).to_line().as_bytes())?;
        let mut line = String::new();
        // Until the answer (at most the 10 s read timeout), while the
        // thread is neither SCHED_FIFO nor SCHED_RR.
        let spin_until = rtmgr_sys::time::mono_ns() + 10_000_000_000;
        self.stream.set_nonblocking(true)?;
        let r = loop {
            match self.reader.read_line(&mut line) {
                Ok(0) if line.is_empty() => {
                    break Err(ClientError::Protocol(
                        "the daemon closed the connection".into(),
                    ))
                }
                Ok(_) if line.ends_with('\n') => break Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if rtmgr_sys::time::mono_ns() < spin_until && !fixed_priority() {
                        rtmgr_sys::sched::yield_now();
                    } else {
                        self.stream.set_nonblocking(false)?;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e.into()),
            }
        };
        let _ = self.stream.set_nonblocking(false);
        r?;
        parse_response(line.as_bytes()).map_err(ClientError::Protocol)
    }

    fn expect(&mut self, op: Op) -> Result<Reply, ClientError> {
        match self.request(op)?.reply {
            Reply::Refused {
                reason, message, ..
            } => Err(ClientError::Refused { reason, message }),
            Reply::Error { code, message } => Err(ClientError::Daemon { code, message }),
            r => Ok(r),
        }
    }

    /// Reserve; with no threads and no process named, for the calling thread.
    pub fn reserve(&mut self, mut r: ReserveRequest) -> Result<ReservationInfo, ClientError> {
        if r.threads.is_empty() && r.pid.is_none() {
            r.threads = vec![rtmgr_sys::sched::gettid()];
        }
        match self.expect(Op::Reserve(r))? {
            Reply::Granted { reservation } => Ok(*reservation),
            other => Err(unexpected(other)),
        }
    }

    pub fn release(&mut self, id: u64) -> Result<(), ClientError> {
        match self.expect(Op::Release { id })? {
            Reply::Released { .. } => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    pub fn list(&mut self) -> Result<Vec<ReservationInfo>, ClientError> {
        match self.expect(Op::List)? {
            Reply::List { reservations } => Ok(reservations),
            other => Err(unexpected(other)),
        }
    }

    pub fn status(&mut self) -> Result<StatusInfo, ClientError> {
        match self.expect(Op::Status)? {
            Reply::Status { status } => Ok(*status),
            other => Err(unexpected(other)),
        }
    }
}

/// Is the calling thread SCHED_FIFO or SCHED_RR (one sched_getattr)?
fn fixed_priority() -> bool {
    rtmgr_sys::sched::get_attr(0).is_ok_and(|a| {
        a.policy == rtmgr_sys::sched::SCHED_FIFO || a.policy == rtmgr_sys::sched::SCHED_RR
    })
}

fn unexpected(r: Reply) -> ClientError {
    ClientError::Protocol(format!("unexpected answer from the daemon: {r:?}"))
}
