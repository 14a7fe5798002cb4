//! The D-Bus side of the rtkit front end: `org.freedesktop.RealtimeKit1` at
//! `/org/freedesktop/RealtimeKit1` (rtkit's interface, method for method),
//! served by zbus on its own thread. A call is identified (the bus daemon's
//! credentials of the sender: unix user and process id, as rtkit asks for
//! them) and handed to the daemon's loop, which decides; this side waits for
//! the answer and turns it into a reply or a D-Bus error.

use super::config::RtkitSection;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;
use zbus::fdo;
use zbus::message::Header;
use zbus::names::BusName;

pub const NAME: &str = "org.freedesktop.RealtimeKit1";
pub const PATH: &str = "/org/freedesktop/RealtimeKit1";

/// Who called: the bus daemon's view of the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub pid: u32,
}

/// One method call, with rtkit's arguments (`process` None: the caller's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Realtime {
        process: Option<u64>,
        thread: u64,
        priority: u32,
    },
    HighPriority {
        process: Option<u64>,
        thread: u64,
        priority: i32,
    },
    ResetKnown,
    ResetAll,
    Exit,
}

/// Why a call failed, as rtkit names it: EPERM → AccessDenied, the rest Failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fail {
    Denied(String),
    Failed(String),
}

impl From<Fail> for fdo::Error {
    fn from(f: Fail) -> Self {
        match f {
            Fail::Denied(m) => fdo::Error::AccessDenied(m),
            Fail::Failed(m) => fdo::Error::Failed(m),
        }
    }
}

/// A call waiting for the daemon's loop.
pub struct Job {
    pub caller: Caller,
    pub call: Call,
    pub reply: mpsc::SyncSender<Result<(), Fail>>,
}

/// The object served on the bus.
pub struct RealtimeKit {
    limits: RtkitSection,
    jobs: mpsc::Sender<Job>,
    /// Written once per job: wakes the daemon's poll.
    wake: UnixStream,
}

/// The daemon's loop answers within this, or the call fails.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

impl RealtimeKit {
    pub fn new(limits: RtkitSection, jobs: mpsc::Sender<Job>, wake: UnixStream) -> Self {
        RealtimeKit { limits, jobs, wake }
    }

    async fn ask(&self, conn: &zbus::Connection, hdr: &Header<'_>, call: Call) -> fdo::Result<()> {
        let caller = caller(conn, hdr).await?;
        let (reply, answer) = mpsc::sync_channel(1);
        let gone = || fdo::Error::Failed("the daemon is stopping".into());
        self.jobs
            .send(Job {
                caller,
                call,
                reply,
            })
            .map_err(|_| gone())?;
        let _ = (&self.wake).write(&[1]);
        // rtkit answers one call at a time too: waiting here holds the
        // next call back until this one is decided.
        match answer.recv_timeout(ANSWER_WITHIN) {
            Ok(r) => r.map_err(fdo::Error::from),
            Err(_) => Err(gone()),
        }
    }
}

/// The sender's unix user and process id, from the bus daemon.
async fn caller(conn: &zbus::Connection, hdr: &Header<'_>) -> fdo::Result<Caller> {
    let failed = |m: &str| fdo::Error::Failed(format!("cannot identify the caller: {m}"));
    let sender = hdr.sender().ok_or_else(|| failed("no sender"))?;
    let dbus = fdo::DBusProxy::new(conn).await?;
    let c = dbus
        .get_connection_credentials(BusName::Unique(sender.to_owned()))
        .await?;
    Ok(Caller {
        uid: c.unix_user_id().ok_or_else(|| failed("no unix user id"))?,
        pid: c.process_id().ok_or_else(|| failed("no process id"))?,
    })
}

#[zbus::interface(name = "org.freedesktop.RealtimeKit1")]
impl RealtimeKit {
    async fn make_thread_realtime(
        &self,
        #[zbus(connection)] conn: &zbus::Connection,
        #[zbus(header)] hdr: Header<'_>,
        thread: u64,
        priority: u32,
    ) -> fdo::Result<()> {
        let call = Call::Realtime {
            process: None,
            thread,
            priority,
        };
        self.ask(conn, &hdr, call).await
    }

    #[zbus(name = "MakeThreadRealtimeWithPID")]
    async fn make_thread_realtime_with_pid(
        &self,
        #[zbus(connection)] conn: &zbus::Connection,
        #[zbus(header)] hdr: Header<'_>,
        process: u64,
        thread: u64,
        priority: u32,
    ) -> fdo::Result<()> {
        let call = Call::Realtime {
            process: Some(process),
            thread,
            priority,
        };
        self.ask(conn, &hdr, call).await
    }

    async fn make_thread_high_priority(
        &self,
        #[zbus(connection)] conn: &zbus::Connection,
        #[zbus(header)] hdr: Header<'_>,
        thread: u64,
        priority: i32,
    ) -> fdo::Result<()> {
        let call = Call::HighPriority {
            process: None,
            thread,
            priority,
        };
        self.ask(conn, &hdr, call).await
    }

    #[zbus(name = "MakeThreadHighPriorityWithPID")]
    async fn make_thread_high_priority_with_pid(
        &self,
        #[zbus(connection)] conn: &zbus::Connection,
        #[zbus(header)] hdr: Header<'_>,
        process: u64,
        thread: u64,
        priority: i32,
    ) -> fdo::Result<()> {
        let call = Call::HighPriority {
            process: Some(process),
            thread,
            priority,
        };
        self.ask(conn, &hdr, call).await
    }

    async fn reset_known(
        &self,
        #[zbus(connection)] conn: &zbus::Connection,
        #[zbus(header)] hdr: Header<'_>,
    ) -> fdo::Result<()> {
        self.ask(conn, &hdr, Call::ResetKnown).await
    }

    async fn reset_all(
        &self,
        #[zbus(connection)] conn: &zbus::Connection,
        #[zbus(header)] hdr: Header<'_>,
    ) -> fdo::Result<()> {
        self.ask(conn, &hdr, Call::ResetAll).await
    }

    async fn exit(
        &self,
        #[zbus(connection)] conn: &zbus::Connection,
        #[zbus(header)] hdr: Header<'_>,
    ) -> fdo::Result<()> {
        self.ask(conn, &hdr, Call::Exit).await
    }

    #[zbus(property(emits_changed_signal = "const"), name = "RTTimeUSecMax")]
    fn rttime_usec_max(&self) -> i64 {
        i64::try_from(self.limits.rttime_usec_max).unwrap_or(i64::MAX)
    }

    #[zbus(property(emits_changed_signal = "const"), name = "MaxRealtimePriority")]
    fn max_realtime_priority(&self) -> i32 {
        i32::from(self.limits.max_realtime_priority)
    }

    #[zbus(property(emits_changed_signal = "const"), name = "MinNiceLevel")]
    fn min_nice_level(&self) -> i32 {
        self.limits.min_nice_level
    }
}

/// Connect to the bus, serve the object, own the name (refused when another
/// process, e.g. rtkit-daemon, owns it).
pub fn connect(
    limits: &RtkitSection,
    iface: RealtimeKit,
) -> Result<zbus::blocking::Connection, String> {
    let where_ = limits.bus.as_deref().unwrap_or("the system bus");
    let err = |e: zbus::Error| format!("D-Bus ({where_}): {e}");
    let b = match &limits.bus {
        Some(a) => zbus::blocking::connection::Builder::address(a.as_str()),
        None => zbus::blocking::connection::Builder::system(),
    }
    .map_err(err)?;
    b.serve_at(PATH, iface)
        .map_err(err)?
        .name(NAME)
        .map_err(err)?
        .build()
        .map_err(|e| match e {
            zbus::Error::NameTaken => format!(
                "D-Bus ({where_}): {NAME} is owned by another process (stop rtkit-daemon: see docs/rtkit.md)"
            ),
            e => err(e),
        })
}
