//! What a supervised child does at start: tie its life to the supervisor and take the
//! app key from stdin (never from the environment or the command line, so never in `ps`).

use std::io::{self, BufRead};

use crate::secret::AppKey;

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
