//! systemd readiness (Type=notify): READY=1 once the socket listens,
//! STATUS= lines, STOPPING=1 on SIGTERM. Nothing happens outside systemd
//! (no NOTIFY_SOCKET).

/// Tell systemd the daemon is ready, with a status line.
pub fn ready(status: &str) {
    send(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(status),
    ]);
}

pub fn status(status: &str) {
    send(&[sd_notify::NotifyState::Status(status)]);
}

pub fn stopping() {
    send(&[sd_notify::NotifyState::Stopping]);
}

fn send(states: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!("sd_notify: {e}");
    }
}
