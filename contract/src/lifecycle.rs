//! What a supervised child does at start: tie its life to the supervisor and take the
//! app key from stdin (never from the environment or the command line, so never in `ps`);
//! and how long each side of a stop may take, ordered so that a clean stop is never a kill.

use std::{
    io::{self, BufRead},
    time::Duration,
};

use crate::secret::AppKey;

/// How long the supervisor waits after SIGTERM before it sends SIGKILL to a child (the
/// default of `STUDIO_STOP_GRACE_MS`), in milliseconds.
pub const STOP_GRACE_MS: u64 = 5_000;
/// The longest studiod's drain of in-flight work and jobs may take once asked to stop; its
/// last writes (sockets, the epoch's end, the store: milliseconds) follow. Shorter than
/// the supervisor's grace, so a clean stop is never turned into a kill.
pub const DAEMON_DRAIN: Duration = Duration::from_secs(4);
/// The longest studio-app's own stop may take (open event streams included).
pub const APP_DRAIN: Duration = Duration::from_secs(2);

const _: () = assert!(
    DAEMON_DRAIN.as_millis() < STOP_GRACE_MS as u128
        && APP_DRAIN.as_millis() < STOP_GRACE_MS as u128,
    "a child's drain must end before the supervisor's TERM-to-KILL grace"
);

/// Asks the kernel to send SIGTERM when the parent dies, then checks the parent is still
/// `supervisor_pid` (it may have died before the request took effect).
pub fn die_with_parent(supervisor_pid: u32) -> io::Result<()> {
    use rustix::process::{Signal, getppid, set_parent_process_death_signal};
    set_parent_process_death_signal(Some(Signal::TERM))?;
    let parent = getppid().map_or(0, |p| p.as_raw_nonzero().get().unsigned_abs());
    if parent != supervisor_pid {
        return Err(io::Error::other(format!(
            "supervisor {supervisor_pid} is gone (parent is now {parent})"
        )));
    }
    Ok(())
}

/// Reads the app key, one hex line, from stdin.
pub fn read_app_key_from_stdin() -> io::Result<AppKey> {
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    AppKey::from_hex(&line)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "stdin did not carry an app key"))
}
