//! The daemon's side of the launcher (`docs/SHIMS.md`): [`Launcher`] starts the launcher
//! process once, writes it one [`LaunchRequest`] a line and hands each [`LaunchReport`]
//! to the launch that waits for it; [`ShimWatch`] follows one shim through a pidfd (its
//! exit, and SIGTERM as cancel), whether or not the shim is the daemon's own child.
//!
//! Invariant: the launcher dies with the thread that started it (parent-death signal,
//! then a re-check of its parent), so it never forks a shim for a daemon that is gone.

use std::{
    collections::HashMap,
    ffi::OsString,
    io,
    os::fd::{OwnedFd, RawFd},
    path::PathBuf,
    process::Stdio,
    sync::{Arc, Mutex, PoisonError},
};

use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Interest, unix::AsyncFd},
    process::{Child, ChildStdin, ChildStdout, Command},
    sync::oneshot,
};

use crate::{
    evidence::{self, Evidence},
    identity::ProcessIdentity,
    launch::{LaunchReport, LaunchRequest},
};

/// The hidden argument that turns the daemon's executable into the launcher.
pub const LAUNCHER_FLAG: &str = "--job-launcher";

/// How to start the launcher: the daemon's own executable, its leading arguments (for an
/// executable that is more than the daemon), then [`LAUNCHER_FLAG`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherCommand {
    pub program: PathBuf,
    pub leading: Vec<OsString>,
    /// The soft open-file limit jobs get: the daemon's before it raised its own for its
    /// listeners (`None`: as inherited).
    pub open_files: Option<u64>,
}

/// Why a launch got no report.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the job launcher has stopped")]
    Gone,
    #[error("cannot write to the job launcher: {0}")]
    Write(io::Error),
    #[error("cannot restart the job launcher: {0}")]
    Restart(io::Error),
}

/// Reports not yet read, by run id; `None` once the launcher's output has ended.
type Pending = Arc<Mutex<Option<HashMap<String, oneshot::Sender<LaunchReport>>>>>;

/// The launcher, restarted when it is found gone. Dropping it closes its input, which
/// ends it; its shims run on.
#[derive(Debug)]
pub struct Launcher {
    command: LauncherCommand,
    inherited_fd: Option<RawFd>,
    current: tokio::sync::Mutex<Instance>,
}

impl Launcher {
    /// Starts the launcher; `inherited_fd` (the home lock) stays open in it, and only in
    /// it. Call from a thread that lives as long as the daemon (a runtime's worker, never a
    /// blocking-pool thread): the parent-death signal follows the thread that forked, and
    /// a restart happens on the thread that launches.
    pub fn start(command: &LauncherCommand, inherited_fd: Option<RawFd>) -> io::Result<Self> {
        Ok(Self {
            command: command.clone(),
            inherited_fd,
            current: tokio::sync::Mutex::new(Instance::start(command, inherited_fd)?),
        })
    }

    /// Asks for a shim for `req` and waits for its report. A launcher found dead (killed by
    /// hand, or by the kernel for memory) is replaced first. A request that got no report
    /// because its launcher died is sent once more to a replacement, but only when the
    /// run's folder proves no shim started for it ([`Evidence::NeverStarted`]: the report
    /// pipe ends only once every shim that could still report has closed it, and a shim
    /// records itself before it reports); otherwise [`LaunchError::Gone`], and the folder
    /// tells the caller what happened.
    pub async fn launch(&self, req: &LaunchRequest) -> Result<LaunchReport, LaunchError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let waiting = self.send(req).await?;
            match waiting.await {
                Ok(report) => return Ok(report),
                Err(_) if attempts < 2 && never_started(req) => {
                    tracing::warn!(run = %req.run_id, "the job launcher died with a request unread; sending it again");
                }
                Err(_) => return Err(LaunchError::Gone),
            }
        }
    }

    /// Writes `req` to a live launcher, replacing a dead one first.
    async fn send(
        &self,
        req: &LaunchRequest,
    ) -> Result<oneshot::Receiver<LaunchReport>, LaunchError> {
        let mut current = self.current.lock().await;
        if current.is_gone() {
            tracing::warn!("the job launcher is gone; starting another");
            *current =
                Instance::start(&self.command, self.inherited_fd).map_err(LaunchError::Restart)?;
        }
        match current.send(req).await {
            // Its input had no reader: it cannot have read this request.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                tracing::warn!("the job launcher stopped reading; starting another");
                *current = Instance::start(&self.command, self.inherited_fd)
                    .map_err(LaunchError::Restart)?;
                current.send(req).await.map_err(LaunchError::Write)
            }
            sent => sent.map_err(LaunchError::Write),
        }
    }

    /// The running launcher's pid (for tests and diagnostics).
    pub async fn pid(&self) -> Option<u32> {
        self.current.lock().await.child.id()
    }
}

/// One launcher process.
#[derive(Debug)]
struct Instance {
    input: ChildStdin,
    pending: Pending,
    child: Child,
}

impl Instance {
    fn start(command: &LauncherCommand, inherited_fd: Option<RawFd>) -> io::Result<Self> {
        let mut cmd = Command::new(&command.program);
        cmd.args(&command.leading)
            .arg(LAUNCHER_FLAG)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let parent = rustix::process::getpid();
        let open_files = command.open_files;
        // SAFETY: prctl, getppid and fcntl are async-signal-safe system calls that touch
        // no memory of the parent; the descriptor is the daemon's, open for its whole life.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
                // A daemon that died before the signal was asked for would never send it.
                if rustix::process::getppid() != Some(parent) {
                    return Err(io::Error::other("the daemon is gone"));
                }
                if let Some(soft) = open_files {
                    // Jobs get the limit the user's session gave, not the daemon's raise.
                    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
                    rustix::process::setrlimit(
                        rustix::process::Resource::Nofile,
                        rustix::process::Rlimit {
                            current: Some(soft),
                            maximum: limit.maximum,
                        },
                    )?;
                }
                if let Some(fd) = inherited_fd {
                    let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(io::Error::other("the launcher's pipes are missing"));
        };
        let pending: Pending = Arc::new(Mutex::new(Some(HashMap::new())));
        tokio::spawn(read_reports(output, pending.clone()));
        Ok(Self {
            input,
            pending,
            child,
        })
    }

    /// Whether the process has ended (or its output has, which only its end causes).
    fn is_gone(&mut self) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
            || !matches!(self.child.try_wait(), Ok(None))
    }

    /// Writes one request line; the receiver gets its report.
    async fn send(&mut self, req: &LaunchRequest) -> io::Result<oneshot::Receiver<LaunchReport>> {
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(pending) = pending.as_mut() else {
                return Err(io::ErrorKind::BrokenPipe.into());
            };
            pending.insert(req.run_id.clone(), tx);
        }
        let mut line = serde_json::to_vec(req)?;
        line.push(b'\n');
        // The caller holds the launcher's lock: requests never interleave.
        if let Err(e) = self.input.write_all(&line).await {
            self.forget(&req.run_id);
            return Err(e);
        }
        Ok(rx)
    }

    fn forget(&self, run_id: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pending) = pending.as_mut() {
            pending.remove(run_id);
        }
    }
}

/// Whether `req`'s run folder proves that no shim recorded itself for it.
fn never_started(req: &LaunchRequest) -> bool {
    matches!(
        evidence::classify(&req.spec.run_dir, &req.boot_id),
        Ok(Evidence::NeverStarted)
    )
}

/// Hands each report line to its launch; at the end of the output (the launcher and
/// every shim that could still report are gone) fails the launches still waiting.
async fn read_reports(output: ChildStdout, pending: Pending) {
    let mut lines = BufReader::new(output).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(report) = serde_json::from_str::<LaunchReport>(&line) else {
            continue;
        };
        let waiter = pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
            .and_then(|p| p.remove(&report.run_id));
        if let Some(waiter) = waiter {
            let _ = waiter.send(report);
        }
    }
    // Dropping the senders fails their receivers.
    pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
}

/// One shim, followed through a pidfd: it names that very process, never a later one
/// under the same pid.
#[derive(Debug)]
pub struct ShimWatch {
    fd: AsyncFd<OwnedFd>,
}

impl ShimWatch {
    /// Watches `shim`; `Ok(None)` when it is already gone (its outcome is then on disk,
    /// or never will be).
    pub fn open(shim: &ProcessIdentity) -> io::Result<Option<Self>> {
        let Some(pid) = i32::try_from(shim.pid).ok().and_then(Pid::from_raw) else {
            return Ok(None);
        };
        let fd = match pidfd_open(pid, PidfdFlags::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::SRCH) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // Checked after opening: if the pid still names the shim now, the pidfd does too.
        if !shim.is_running(&shim.boot_id) {
            return Ok(None);
        }
        // SAFETY: the `OwnedFd` moves into the `AsyncFd`, which alone owns it: it stays
        // open and names the same pidfd until the `AsyncFd` is dropped.
        #[allow(unsafe_code)]
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        Ok(Some(Self { fd }))
    }

    /// Completes when the shim has exited.
    pub async fn exited(&self) {
        // A pidfd turns readable when its process exits; an error means it cannot be
        // watched any more, which is treated the same (the caller then reads the folder).
        let _ = self.fd.readable().await;
    }

    /// Asks the shim to cancel its job (TERM, grace, KILL of the job's group).
    pub fn terminate(&self) -> io::Result<()> {
        pidfd_send_signal(self.fd.get_ref(), Signal::TERM).map_err(Into::into)
    }
}
