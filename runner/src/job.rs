//! One job from spawn to a reaped, accounted end.

use std::{
    io,
    os::unix::process::ExitStatusExt,
    path::PathBuf,
    process::{ExitStatus, Stdio},
    sync::Arc,
    time::Duration,
};

use rustix::process::{Pid, Signal, kill_process_group, test_kill_process_group};
use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWriteExt},
    process::{Child, Command},
    sync::watch,
    task::JoinHandle,
    time::{Instant, sleep, sleep_until, timeout},
};

use crate::{
    redact::{Patterns, Redaction, Redactor},
    tail::Tail,
};

/// Bytes of each stream kept in memory for the run row.
pub const TAIL_BYTES: usize = 64 * 1024;
/// How long drains may outlive the job's group (a process that escaped it may hold a pipe).
const DRAIN_LINGER: Duration = Duration::from_secs(2);
/// The largest result file read.
const REPORT_MAX_BYTES: u64 = 64 * 1024;

/// What to run and how. Its `Debug` shows the environment's names only: the values
/// may be secrets.
#[derive(Clone)]
pub struct JobSpec {
    /// The absolute path of the executable (see [`crate::program::resolve`]); never a
    /// shell line, never looked up on the job's own `PATH`.
    pub program: String,
    pub args: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// The whole environment (see [`crate::env::job_env`]); nothing else is inherited.
    pub env: Vec<(String, String)>,
    /// Where `stdout.log`, `stderr.log` and the result file go.
    pub run_dir: PathBuf,
    /// Bytes of each stream written to its log file; the rest is counted, not kept.
    pub log_cap: u64,
    pub deadline: Option<Duration>,
    /// Between TERM and KILL.
    pub grace: Duration,
    /// The job's leader gets SIGKILL when the thread that spawned it dies, so a crashed
    /// daemon leaves no unsupervised job (its group is swept at the next start).
    pub die_with_parent: bool,
    /// The secrets the job received: their values are masked in its output.
    pub redact: Vec<Redaction>,
}

impl std::fmt::Debug for JobSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSpec")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("env", &crate::redact::names(&self.env))
            .field("run_dir", &self.run_dir)
            .field("log_cap", &self.log_cap)
            .field("deadline", &self.deadline)
            .field("grace", &self.grace)
            .field("die_with_parent", &self.die_with_parent)
            .field("redact", &self.redact)
            .finish()
    }
}

impl JobSpec {
    /// The file a job reports its spend in (`STUDIO_RESULT_FILE`).
    pub fn result_file(&self) -> PathBuf {
        self.run_dir.join("result.json")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot prepare the run folder {path}: {source}")]
    RunDir { path: PathBuf, source: io::Error },
    #[error("cannot start {program:?}: {source}")]
    Exec { program: String, source: io::Error },
    #[error("{0:?} is not an absolute path; nothing was started")]
    NotAbsolute(String),
}

/// How the job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    Exited,
    Deadline,
    Cancelled,
}

/// One output stream, accounted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSummary {
    /// Everything the job wrote.
    pub bytes: u64,
    /// What reached the log file (at most the cap).
    pub logged: u64,
    /// The last 64 KiB, starting on a character boundary.
    pub tail: String,
}

/// What the job reported through `STUDIO_RESULT_FILE`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    #[serde(default)]
    pub cost_usd: Option<f64>,
    #[serde(default)]
    pub tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub ending: Ending,
    pub exit_code: Option<i32>,
    /// The signal that ended the leader, if one did.
    pub signal: Option<i32>,
    pub stdout: StreamSummary,
    pub stderr: StreamSummary,
    pub report: Option<Report>,
    /// Why a result file present was not usable.
    pub report_error: Option<String>,
    /// Who cancelled the job when nobody asked its daemon to: `daemon_lost` when its shim
    /// ended it because the daemon that launched it was gone (`on_daemon_loss: kill`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<String>,
}

impl Outcome {
    pub fn succeeded(&self) -> bool {
        self.ending == Ending::Exited && self.exit_code == Some(0)
    }
}

/// Asks a running job to stop (TERM to its group, then KILL after the grace).
#[derive(Debug, Clone)]
pub struct Canceller(watch::Sender<bool>);

impl Canceller {
    /// A canceller for a job supervised elsewhere (a shim): the receiver sees the request.
    pub fn pair() -> (Self, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        (Self(tx), rx)
    }

    pub fn cancel(&self) {
        let _ = self.0.send(true);
    }

    /// Whether [`Canceller::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }
}

/// A launched job.
#[derive(Debug)]
pub struct Job {
    pid: u32,
    start_ticks: Option<u64>,
    cancel: watch::Sender<bool>,
    task: JoinHandle<Outcome>,
}

impl Job {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The leader's identity on boot `boot_id`, for signalling its group after a restart.
    pub fn identity(&self, boot_id: &str) -> Option<crate::ProcessIdentity> {
        self.start_ticks.map(|start_ticks| crate::ProcessIdentity {
            pid: self.pid,
            start_ticks,
            boot_id: boot_id.to_owned(),
        })
    }

    pub fn canceller(&self) -> Canceller {
        Canceller(self.cancel.clone())
    }

    /// Waits for the end; afterwards no process of the job's group is left.
    pub async fn wait(self) -> Outcome {
        match self.task.await {
            Ok(outcome) => outcome,
            // The supervising task panicked: make sure the group is gone anyway.
            Err(_) => {
                kill_group(self.pid, Signal::KILL);
                Outcome {
                    ending: Ending::Cancelled,
                    exit_code: None,
                    signal: Some(Signal::KILL.as_raw()),
                    stdout: StreamSummary::default(),
                    stderr: StreamSummary::default(),
                    report: None,
                    report_error: Some("the job's supervising task failed".into()),
                    cancelled_by: None,
                }
            }
        }
    }
}

/// Starts the job. `Ok` means the child is confirmed launched (exec succeeded).
pub fn spawn(spec: JobSpec) -> Result<Job, SpawnError> {
    if !spec.program.starts_with('/') {
        return Err(SpawnError::NotAbsolute(spec.program));
    }
    std::fs::create_dir_all(&spec.run_dir).map_err(|source| SpawnError::RunDir {
        path: spec.run_dir.clone(),
        source,
    })?;
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    let die_with_parent = spec.die_with_parent;
    let parent = rustix::process::getpid();
    // SAFETY: setsid, prctl and getppid are async-signal-safe system calls that touch no
    // memory of the parent. setsid makes the job the leader of a new session and process
    // group (pgid = its pid), so the whole group can be signalled and none of it shares
    // our terminal.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
            if die_with_parent {
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
                // The parent may have died before the signal was asked for: then nobody
                // would ever deliver it, so the job must not start at all.
                if rustix::process::getppid() != Some(parent) {
                    return Err(io::Error::other("the launching daemon is gone"));
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|source| SpawnError::Exec {
        program: spec.program.clone(),
        source,
    })?;
    let pid = child.id().unwrap_or(0);
    // Fixed at fork, so read now even if the job ends at once (nothing reaps it before
    // its supervising task runs, so a zombie is still ours to name).
    let start_ticks = crate::identity::child_start_ticks(pid).ok();
    let (cancel, cancelled) = watch::channel(false);
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let task = tokio::spawn(supervise(spec, child, pid, stdout, stderr, cancelled));
    Ok(Job {
        pid,
        start_ticks,
        cancel,
        task,
    })
}

async fn supervise(
    spec: JobSpec,
    mut child: Child,
    pid: u32,
    stdout: Option<tokio::process::ChildStdout>,
    stderr: Option<tokio::process::ChildStderr>,
    mut cancelled: watch::Receiver<bool>,
) -> Outcome {
    let patterns = patterns(&spec.redact);
    let out = tokio::spawn(drain(
        stdout,
        spec.run_dir.join("stdout.log"),
        spec.log_cap,
        patterns.clone(),
    ));
    let err = tokio::spawn(drain(
        stderr,
        spec.run_dir.join("stderr.log"),
        spec.log_cap,
        patterns,
    ));
    let deadline = spec.deadline.map(|d| Instant::now() + d);
    let deadline_passed = async {
        match deadline {
            Some(at) => sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    let cancel_requested = async {
        // If the sender is gone nobody can cancel any more: wait for the other arms.
        if cancelled.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let (ending, status) = tokio::select! {
        status = child.wait() => (Ending::Exited, status),
        () = deadline_passed => (Ending::Deadline, terminate(&mut child, pid, spec.grace).await),
        () = cancel_requested => (Ending::Cancelled, terminate(&mut child, pid, spec.grace).await),
    };
    // The leader is gone; nothing it left in its group may outlive the job.
    sweep_group(pid, spec.grace).await;
    let stdout = finish_drain(out).await;
    let stderr = finish_drain(err).await;
    let (report, report_error) = read_report(&spec.result_file()).await;
    let (exit_code, signal) = match &status {
        Ok(s) => split_status(*s),
        Err(_) => (None, None),
    };
    Outcome {
        ending,
        exit_code,
        signal,
        stdout,
        stderr,
        report,
        report_error,
        cancelled_by: None,
    }
}

fn split_status(status: ExitStatus) -> (Option<i32>, Option<i32>) {
    (status.code(), status.signal())
}

fn kill_group(pgid: u32, signal: Signal) -> bool {
    i32::try_from(pgid)
        .ok()
        .and_then(Pid::from_raw)
        .is_some_and(|p| kill_process_group(p, signal).is_ok())
}

fn group_exists(pgid: u32) -> bool {
    i32::try_from(pgid)
        .ok()
        .and_then(Pid::from_raw)
        .is_some_and(|p| test_kill_process_group(p).is_ok())
}

/// TERM to the group, the grace, then KILL to the group; returns the leader's status.
async fn terminate(child: &mut Child, pgid: u32, grace: Duration) -> io::Result<ExitStatus> {
    kill_group(pgid, Signal::TERM);
    match timeout(grace, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            kill_group(pgid, Signal::KILL);
            child.wait().await
        }
    }
}

/// Ends whatever is left of the group after its leader exited: TERM, grace, KILL.
async fn sweep_group(pgid: u32, grace: Duration) {
    if !kill_group(pgid, Signal::TERM) {
        return;
    }
    let until = Instant::now() + grace;
    while Instant::now() < until {
        if !group_exists(pgid) {
            return;
        }
        sleep(Duration::from_millis(20)).await;
    }
    kill_group(pgid, Signal::KILL);
    // KILL cannot be ignored; the kernel needs a moment to reap the members.
    for _ in 0..50 {
        if !group_exists(pgid) {
            return;
        }
        sleep(Duration::from_millis(20)).await;
    }
}

async fn finish_drain(task: JoinHandle<StreamSummary>) -> StreamSummary {
    let abort = task.abort_handle();
    match timeout(DRAIN_LINGER, task).await {
        Ok(Ok(summary)) => summary,
        _ => {
            abort.abort();
            StreamSummary::default()
        }
    }
}

/// The job's known values, compiled once for both streams; `None` if they cannot be
/// (then its output is withheld: nothing unredacted is ever logged).
fn patterns(redact: &[Redaction]) -> Option<Arc<Patterns>> {
    match Patterns::new(redact) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            tracing::error!(error = %e, "the job's output will be withheld");
            None
        }
    }
}

/// Reads a stream to its end, redacted: the first `cap` bytes to `path`, the last 64 KiB
/// kept. A partial line is written when the job has been quiet for [`QUIET`].
async fn drain(
    stream: Option<impl AsyncRead + Unpin>,
    path: PathBuf,
    cap: u64,
    patterns: Option<Arc<Patterns>>,
) -> StreamSummary {
    let mut summary = StreamSummary::default();
    let Some(mut stream) = stream else {
        return summary;
    };
    let mut log = Log {
        file: tokio::fs::File::create(&path).await.ok(),
        tail: Tail::new(TAIL_BYTES),
        cap,
        logged: 0,
    };
    let mut redactor = patterns.map(Redactor::new);
    if redactor.is_none() {
        log.write(WITHHELD).await;
    }
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::with_capacity(buf.len());
    loop {
        // Only armed while a partial line is held, so a quiet job costs no wake-ups.
        // `read` is cancel safe: a timed-out read lost no bytes.
        let read = if redactor.as_ref().is_some_and(Redactor::pending) {
            timeout(QUIET, stream.read(&mut buf)).await.ok()
        } else {
            Some(stream.read(&mut buf).await)
        };
        out.clear();
        match (read, redactor.as_mut()) {
            (Some(Ok(0) | Err(_)), _) => break,
            (Some(Ok(n)), r) => {
                summary.bytes += n as u64;
                if let Some(r) = r {
                    r.feed_into(&buf[..n], &mut out);
                }
            }
            (None, Some(r)) => r.idle_into(&mut out),
            (None, None) => {}
        }
        log.write(&out).await;
    }
    if let Some(r) = redactor.as_mut() {
        out.clear();
        r.finish_into(&mut out);
        log.write(&out).await;
    }
    if let Some(mut f) = log.file {
        let _ = f.flush().await;
    }
    summary.logged = log.logged;
    summary.tail = log.tail.text();
    summary
}

/// How long a stream is quiet before its held partial line is written.
const QUIET: Duration = Duration::from_millis(200);
/// Logged instead of a stream whose redaction could not be prepared.
const WITHHELD: &[u8] = b"[studio: output withheld: its redaction could not be prepared]\n";

/// Where a stream's redacted bytes go: the log file up to its cap, and the tail.
struct Log {
    file: Option<tokio::fs::File>,
    tail: Tail,
    cap: u64,
    logged: u64,
}

impl Log {
    async fn write(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.tail.push(bytes);
        let room = self.cap.saturating_sub(self.logged);
        if room > 0
            && let Some(f) = self.file.as_mut()
        {
            let take = usize::try_from(room).map_or(bytes.len(), |r| r.min(bytes.len()));
            if f.write_all(&bytes[..take]).await.is_ok() {
                self.logged += take as u64;
            } else {
                // A full disk must not stall the job: keep draining, stop logging.
                self.file = None;
            }
        }
    }
}

async fn read_report(path: &std::path::Path) -> (Option<Report>, Option<String>) {
    let Ok(meta) = tokio::fs::metadata(path).await else {
        return (None, None);
    };
    if meta.len() > REPORT_MAX_BYTES {
        return (
            None,
            Some(format!("result file larger than {REPORT_MAX_BYTES} bytes")),
        );
    }
    let Ok(text) = tokio::fs::read_to_string(path).await else {
        return (None, Some("result file is not UTF-8 text".into()));
    };
    match serde_json::from_str::<Report>(&text) {
        Ok(r) if r.cost_usd.is_some_and(|c| !c.is_finite() || c < 0.0) => {
            (None, Some("cost_usd must be a non-negative number".into()))
        }
        Ok(r) => (Some(r), None),
        Err(e) => (
            None,
            Some(format!("result file is not the expected JSON: {e}")),
        ),
    }
}
