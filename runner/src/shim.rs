//! A job's supervisor for the job's whole life (`docs/SHIMS.md`, "shim"): forked by the
//! launcher, it leaves the launcher's session, records itself (`shim.json`), spawns the
//! job as [`crate::job::spawn`] does for the daemon, records the job's leader
//! (`job.json`), reports one line to the launcher's pipe and lets go of every inherited
//! descriptor, then supervises the job to its end and records `outcome.json`. Everything
//! it records is durable before the next step, so a later daemon can tell what happened
//! from the run's folder alone ([`crate::evidence::classify`]).
//!
//! Invariant: the job starts only after `shim.json` is durable, and dies with its shim.

use std::{
    fs::File,
    io::{self, Write},
    os::fd::{AsRawFd, RawFd},
};

use rustix::process::{Pid, PidfdFlags, pidfd_open};
use tokio::{
    io::{Interest, unix::AsyncFd},
    signal::unix::{SignalKind, signal},
};

use crate::{
    evidence::{self, JOB_FILE, OUTCOME_FILE, SHIM_FILE},
    identity::ProcessIdentity,
    job::{Canceller, Ending, Outcome, StreamSummary, spawn},
    launch::{LaunchReport, LaunchRequest},
};

/// Exit code when the shim could not record itself or the outcome.
const EXIT_NO_EVIDENCE: i32 = 70;
/// [`Outcome::cancelled_by`] of a job ended because its daemon was gone.
pub const DAEMON_LOST: &str = "daemon_lost";

/// Supervises one job from a freshly forked, single-threaded child; returns the code the
/// caller exits with (0 once `outcome.json` is durable). Never returns to the caller's
/// work: the caller is a copy of the launcher, whose loop must not run twice.
pub fn run(req: LaunchRequest, report: File) -> i32 {
    // A session of its own: a signal to the launcher's group or a hang-up of its
    // terminal never reaches a job's supervisor. A forked child is never a group leader,
    // so this cannot fail.
    let _ = rustix::process::setsid();
    let report = Reporter::new(&req.run_id, report);
    // Nothing but the report pipe (and the lock until step 2) may stay open: a shim lives
    // as long as its job, and must not keep a pipe of the daemon or launcher alive.
    release_inherited(&[report.fd(), req.inherited_lock_fd.unwrap_or(-1)]);
    let shim = match record_shim(&req) {
        Ok(shim) => shim,
        Err(e) => {
            report.send(None, Err(format!("cannot record {SHIM_FILE}: {e}")));
            return EXIT_NO_EVIDENCE;
        }
    };
    if let Some(fd) = req.inherited_lock_fd {
        close_inherited(fd);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let message = format!("cannot start the shim's runtime: {e}");
            let recorded = record_spawn_failure(&req, &message);
            report.send(Some(shim), Err(message));
            return exit_code(recorded);
        }
    };
    runtime.block_on(supervise(req, shim, report))
}

/// Spawns the job, reports, waits for its end, records it.
async fn supervise(req: LaunchRequest, shim: ProcessIdentity, report: Reporter) -> i32 {
    // Before the job exists: from here on a SIGTERM cancels it rather than killing the
    // shim (which would leave a job without an outcome).
    let terminate = signal(SignalKind::terminate());
    let run_dir = req.spec.run_dir.clone();
    let job = match spawn(req.spec.clone().into_job_spec()) {
        Ok(job) => job,
        Err(e) => {
            let message = e.to_string();
            let recorded = record_spawn_failure(&req, &message);
            report.send(Some(shim), Err(message));
            return exit_code(recorded);
        }
    };
    let Some(leader) = job.identity(&req.boot_id) else {
        // Unnamed, the job could never be signalled safely after this shim: it must not
        // run on.
        let message = format!("cannot read the identity of job {}; cancelled", job.pid());
        report.send(Some(shim), Err(message));
        job.canceller().cancel();
        let outcome = job.wait().await;
        return exit_code(evidence::record(&run_dir, OUTCOME_FILE, &outcome));
    };
    // The job runs: if its record cannot be written, killing it would only add a second
    // failure. Recovery then reads "uncertain" should this shim die, never "not started".
    let _ = evidence::record(&run_dir, JOB_FILE, &leader);
    report.send(Some(shim), Ok(leader));
    // Runs until the shim exits, which ends the task with the runtime.
    let cause = tokio::spawn(watch_cancel(
        job.canceller(),
        terminate.ok(),
        req.daemon_pid,
    ));
    let mut outcome = job.wait().await;
    if outcome.ending == Ending::Cancelled && cause.is_finished() {
        outcome.cancelled_by = cause.await.ok().flatten();
    }
    exit_code(evidence::record(&run_dir, OUTCOME_FILE, &outcome))
}

/// 0 once the run's outcome is durable.
fn exit_code(recorded: io::Result<()>) -> i32 {
    match recorded {
        Ok(()) => 0,
        Err(_) => EXIT_NO_EVIDENCE,
    }
}

/// Cancels the job on SIGTERM (a daemon's request: it knows why) or when the launching
/// daemon is gone (`daemon_lost`, returned for the outcome, since no daemon will say it).
async fn watch_cancel(
    canceller: Canceller,
    terminate: Option<tokio::signal::unix::Signal>,
    daemon_pid: Option<u32>,
) -> Option<String> {
    let sigterm = async {
        match terminate {
            Some(mut s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    let daemon_gone = async {
        match daemon_pid {
            Some(pid) => daemon_exit(pid).await,
            None => std::future::pending().await,
        }
    };
    let cause = tokio::select! {
        () = sigterm => None,
        () = daemon_gone => Some(DAEMON_LOST.to_owned()),
    };
    canceller.cancel();
    cause
}

/// Completes when process `pid` has exited (at once if it is already gone). A pidfd names
/// that very process, never a later one under the same pid.
async fn daemon_exit(pid: u32) {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    let Ok(fd) = pidfd_open(pid, PidfdFlags::empty()) else {
        // No such process: the daemon is already gone.
        return;
    };
    // SAFETY: the `OwnedFd` moves into the `AsyncFd`, which alone owns it: it stays open
    // and names the same pidfd until the `AsyncFd` is dropped.
    #[allow(unsafe_code)]
    let registered = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) };
    match registered {
        // A pidfd turns readable when its process exits.
        Ok(fd) => {
            let _ = fd.readable().await;
        }
        // Unwatchable: never cancel for a loss that cannot be seen.
        Err(_) => std::future::pending().await,
    }
}

fn record_shim(req: &LaunchRequest) -> io::Result<ProcessIdentity> {
    std::fs::create_dir_all(&req.spec.run_dir)?;
    let shim = ProcessIdentity::of(std::process::id(), &req.boot_id)?;
    evidence::record(&req.spec.run_dir, SHIM_FILE, &shim)?;
    Ok(shim)
}

/// A job that never started still gets an outcome, so the run reads as ended
/// ([`evidence::classify`]) and never as a supervisor lost mid-launch. `Ending` has no
/// "not started": this one is `exited` without a code or signal, and says why in
/// `report_error` (which otherwise explains an unusable result file).
fn record_spawn_failure(req: &LaunchRequest, message: &str) -> io::Result<()> {
    let outcome = Outcome {
        ending: Ending::Exited,
        exit_code: None,
        signal: None,
        stdout: StreamSummary::default(),
        stderr: StreamSummary::default(),
        report: None,
        report_error: Some(message.to_owned()),
        cancelled_by: None,
    };
    evidence::record(&req.spec.run_dir, OUTCOME_FILE, &outcome)
}

/// The pipe to the launcher's reader, used once.
struct Reporter {
    run_id: String,
    file: File,
}

impl Reporter {
    fn new(run_id: &str, file: File) -> Self {
        Self {
            run_id: run_id.to_owned(),
            file,
        }
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Writes the report line (one `write`, shorter than `PIPE_BUF`, so whole) and closes
    /// the pipe. A reader gone is no reason to abandon a job that runs.
    fn send(mut self, shim: Option<ProcessIdentity>, result: Result<ProcessIdentity, String>) {
        let line = LaunchReport {
            run_id: self.run_id,
            shim,
            result,
        }
        .to_line();
        let _ = self.file.write_all(&line);
    }
}

/// Closes every descriptor but `keep` and points stdin, stdout and stderr at
/// `/dev/null`.
fn release_inherited(keep: &[RawFd]) {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    // Listed first, closed after: the listing's own descriptor is among them.
    let open: Vec<RawFd> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open.into_iter().filter(|fd| *fd > 2 && !keep.contains(fd)) {
        close_inherited(fd);
    }
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
        let _ = rustix::stdio::dup2_stderr(&null);
    }
}

fn close_inherited(fd: RawFd) {
    // SAFETY: called only in a shim, a single-threaded child of the launcher that never
    // returns to the launcher's code: the objects that owned these descriptors there are
    // never used or dropped again in this process, so closing them here is the only
    // close, and no other thread can be using them.
    // (`libc::close` rather than an `OwnedFd`: the listing's own descriptor is already
    // closed, and its EBADF is expected, not a bug.)
    #[allow(unsafe_code)]
    unsafe {
        libc::close(fd);
    }
}
