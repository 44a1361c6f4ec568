//! Which process a pid names. A pid alone can name another process after the one it
//! named ended (pids are reused) or after a reboot; a pid with its start time (clock
//! ticks after boot, field 22 of `/proc/<pid>/stat`) and the boot's id
//! (`/proc/sys/kernel/random/boot_id`) cannot. Recovery signals a recorded process only
//! when all three still match.

use std::io;

use rustix::process::{Pid, Signal, kill_process_group};
use serde::{Deserialize, Serialize};

/// A process as it was when recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: u32,
    pub start_ticks: u64,
    pub boot_id: String,
}

impl ProcessIdentity {
    /// The identity of the live process `pid` on this boot.
    pub fn of(pid: u32, boot_id: &str) -> io::Result<Self> {
        Ok(Self {
            pid,
            start_ticks: start_ticks(pid)?,
            boot_id: boot_id.to_owned(),
        })
    }

    /// Whether `pid` still names this very process: the same boot, alive, started at the
    /// recorded instant.
    pub fn is_running(&self, boot_id: &str) -> bool {
        self.boot_id == boot_id && start_ticks(self.pid).is_ok_and(|t| t == self.start_ticks)
    }

    /// SIGKILLs the process group this process leads, only while it is still this very
    /// process (a reused pid or another boot is left alone); whether a signal was sent.
    /// The kernel reuses no pid while a group of that number has members, so the group
    /// cannot turn into another between the check and the signal unless it empties.
    pub fn kill_group(&self, boot_id: &str) -> bool {
        let Some(pgid) = i32::try_from(self.pid).ok().and_then(Pid::from_raw) else {
            return false;
        };
        self.is_running(boot_id) && kill_process_group(pgid, Signal::KILL).is_ok()
    }
}

/// This boot's id.
pub fn boot_id() -> io::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?
        .trim()
        .to_owned())
}

/// When `pid` started, in clock ticks after boot; an error when no such process lives
/// (a zombie counts as gone).
pub fn start_ticks(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("process {pid} is gone or unreadable"),
        )
    })
}

/// When our own child `pid` started, even if it already exited: until its parent reaps
/// it, a zombie keeps its pid, so the pid cannot name another process yet. For the
/// identity of a job that may end the instant it starts.
pub(crate) fn child_start_ticks(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat_fields(&stat)
        .map(|(_, ticks)| ticks)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unreadable stat line"))
}

/// Field 22 (`starttime`) of a stat line, unless the process is a zombie.
fn parse_stat(stat: &str) -> Option<u64> {
    parse_stat_fields(stat)
        .filter(|(state, _)| !matches!(*state, "Z" | "X"))
        .map(|(_, ticks)| ticks)
}

/// The state (field 3) and `starttime` (field 22) of a stat line. The command name
/// (field 2) may hold spaces and parentheses, so fields are counted after the last `)`.
fn parse_stat_fields(stat: &str) -> Option<(&str, u64)> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    // starttime is field 22, the 19th after the state.
    let state = fields.next()?;
    Some((state, fields.nth(18)?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22_even_with_parentheses_in_the_name() {
        let stat =
            "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_stat(stat), Some(98_765));
        let zombie = "4242 (x) Z 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 0 0";
        assert_eq!(parse_stat(zombie), None);
        assert_eq!(parse_stat_fields(zombie), Some(("Z", 98_765)));
    }

    #[test]
    fn this_process_is_itself_and_no_other() {
        let boot = boot_id().expect("boot id");
        let me = ProcessIdentity::of(std::process::id(), &boot).expect("identity");
        assert!(me.is_running(&boot));
        let earlier = ProcessIdentity {
            start_ticks: me.start_ticks.wrapping_sub(1),
            ..me.clone()
        };
        assert!(
            !earlier.is_running(&boot),
            "another process once had this pid"
        );
        assert!(
            !me.is_running("another-boot"),
            "a reboot ends every process"
        );
    }
}
