//! `rtmgr serve --rtkit`: rtkit's D-Bus API (org.freedesktop.RealtimeKit1)
//! answered by the daemon, so desktop and pro-audio clients (PipeWire,
//! PulseAudio, JACK) get real time through rtmgr's admission and placement
//! (ARTiS §2.1: an rtkit thread is an RT1+ task on an RT CPU; DROPS §4.1:
//! the resource manager grants on request). `bus.rs` is the zbus side on its
//! own thread, `rules.rs` rtkit's checks and the grant, `high.rs` nice
//! levels, `config.rs` the `[rtkit]` keys. Calls reach the daemon's loop
//! through a channel and a wake-up socket (`front.rs`, a `server::Front`).
//! All but `config.rs` need the cargo feature `rtkit` (zbus); without it
//! the config is still read, and `ServeConfig::check_built` refuses `--rtkit`.

#[cfg(feature = "rtkit")]
mod bus;
pub mod config;
#[cfg(feature = "rtkit")]
mod front;
#[cfg(feature = "rtkit")]
mod high;
#[cfg(feature = "rtkit")]
mod rules;

pub use config::RtkitSection;
#[cfg(feature = "rtkit")]
pub use front::{start, RtkitFront};
