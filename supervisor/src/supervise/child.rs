//! One run of a child process: spawn it in its own process group with the app key on
//! stdin, drain both pipes into its log, notice its readiness line, and stop it
//! (SIGTERM, then SIGKILL to its group after a grace).
//!
//! Must be called from a thread that lives as long as the supervisor: the children ask
//! for PR_SET_PDEATHSIG, which fires when the *thread* that spawned them exits.

use std::{
    ffi::OsString,
    io,
    path::PathBuf,
    process::{ExitStatus, Stdio},
    time::Duration,
};

use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use studio_contract::{ready::Ready, secret::AppKey};
use tokio::{
    io::{AsyncRead, AsyncWriteExt, BufReader},
    process::{Child, Command},
    sync::oneshot,
};

use crate::logs::{self, MAX_LINE, SharedLog};

/// How to start a child.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
    /// Written as one hex line on stdin, then stdin is closed.
    pub(crate) app_key: Option<AppKey>,
    /// Environment variables the child must not inherit.
    pub(crate) env_remove: Vec<&'static str>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadyError {
    #[error("exited before it was ready ({})", describe(.0))]
    Exited(ExitStatus),
    #[error("not ready within {} ms", .0.as_millis())]
    Timeout(Duration),
    #[error("could not wait for it: {0}")]
    Wait(#[source] io::Error),
}

/// A human description of an exit status ("exit status 1", "killed by signal 9").
pub(crate) fn describe(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => status.to_string(),
    }
}

/// A started child.
#[derive(Debug)]
pub(crate) struct Running {
    child: Child,
    pid: u32,
    ready: Option<oneshot::Receiver<Ready>>,
}

/// Starts the child; its output goes to `log` until its pipes close.
pub(crate) async fn spawn(spec: &Spec, log: &SharedLog) -> io::Result<Running> {
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .stdin(if spec.app_key.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: a terminal's Ctrl-C reaches only the supervisor, which then stops
        // the children in order; SIGKILL to the group also takes its helpers.
        .process_group(0)
        .kill_on_drop(true);
    for key in &spec.env_remove {
        cmd.env_remove(key);
    }
    let mut child = cmd.spawn()?;
    let pid = child.id().unwrap_or_default();

    let (ready_tx, ready_rx) = oneshot::channel();
    if let Some(out) = child.stdout.take() {
        tokio::spawn(drain(out, log.clone(), Some(ready_tx)));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(drain(err, log.clone(), None));
    }
    if let (Some(mut stdin), Some(key)) = (child.stdin.take(), spec.app_key.as_ref()) {
        let line = format!("{}\n", key.to_hex());
        // A child that died at once closes the pipe: its exit is noticed as a crash.
        if let Err(error) = stdin.write_all(line.as_bytes()).await {
            tracing::warn!(pid, %error, "could not hand the app key to the child");
        }
        drop(stdin);
    }
    Ok(Running {
        child,
        pid,
        ready: Some(ready_rx),
    })
}

/// Copies a pipe into the log line by line; on stdout, the first readiness line is sent.
async fn drain(
    pipe: impl AsyncRead + Unpin,
    log: SharedLog,
    mut ready: Option<oneshot::Sender<Ready>>,
) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::with_capacity(256);
    loop {
        match logs::read_line_bounded(&mut reader, &mut line, MAX_LINE).await {
            Ok(Some(())) => {}
            Ok(None) => return,
            Err(error) => {
                tracing::debug!(%error, "child pipe closed");
                return;
            }
        }
        logs::append(&log, &line);
        if ready.is_some()
            && let Some(r) = Ready::parse(&String::from_utf8_lossy(&line))
            && let Some(tx) = ready.take()
        {
            let _ = tx.send(r);
        }
    }
}

impl Running {
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits for the readiness line; an exit or the timeout first is an error.
    pub(crate) async fn wait_ready(&mut self, timeout: Duration) -> Result<Ready, ReadyError> {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut ready = self.ready.take();
        loop {
            tokio::select! {
                r = async { ready.as_mut().expect("guarded by the branch condition").await },
                    if ready.is_some() =>
                {
                    match r {
                        Ok(r) => return Ok(r),
                        // stdout closed without the line: only its exit or the timeout remain.
                        Err(_) => ready = None,
                    }
                }
                status = self.child.wait() => {
                    return Err(status.map_or_else(ReadyError::Wait, ReadyError::Exited));
                }
                () = &mut deadline => return Err(ReadyError::Timeout(timeout)),
            }
        }
    }

    /// Waits for the child to exit on its own.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// SIGTERM to the child, SIGKILL to its whole group if it is still there after `grace`.
    pub(crate) async fn stop(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Ok(status);
        }
        let pid = Pid::from_raw(i32::try_from(self.pid).unwrap_or(0));
        if let Some(pid) = pid {
            let _ = kill_process(pid, Signal::TERM);
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                tracing::warn!(pid = self.pid, "child ignored SIGTERM; sending SIGKILL");
                if let Some(pid) = pid {
                    let _ = kill_process_group(pid, Signal::KILL);
                }
                // The group signal may miss if the child left its group; this cannot.
                let _ = self.child.start_kill();
                self.child.wait().await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use rustix::process::test_kill_process_group;

    use super::*;
    use crate::{
        logs::{RotatingLog, Rotation},
        testdir::TestDir,
    };

    fn script_spec(dir: &TestDir, body: &str) -> Spec {
        let script = dir.path().join("child.sh");
        std::fs::write(&script, body).expect("write script");
        // Run through sh rather than exec'ing the fresh file: no ETXTBSY race with
        // other tests forking while the file was open for writing.
        Spec {
            program: PathBuf::from("/bin/sh"),
            args: vec![script.into_os_string()],
            app_key: Some(AppKey::generate()),
            env_remove: vec!["STUDIO_TOKEN"],
        }
    }

    fn log_in(dir: &TestDir) -> (SharedLog, PathBuf) {
        let path = dir.path().join("child.log");
        let log = RotatingLog::open(&path, Rotation::default())
            .expect("log")
            .shared();
        (log, path)
    }

    async fn log_contains(path: &PathBuf, needle: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if std::fs::read_to_string(path).is_ok_and(|s| s.contains(needle)) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    const READY_AND_IGNORE_TERM: &str = r#"trap '' TERM
read key
echo "key length ${#key}" >&2
echo "hello from stdout"
echo "STUDIO_READY {\"pid\":$$,\"addr\":\"127.0.0.1:4242\",\"epoch\":\"e1\"}"
while :; do sleep 1; done
"#;

    #[tokio::test]
    async fn readiness_is_detected_and_a_stubborn_child_is_killed() {
        let dir = TestDir::new("child");
        let (log, path) = log_in(&dir);
        let spec = script_spec(&dir, READY_AND_IGNORE_TERM);
        let mut running = spawn(&spec, &log).await.expect("spawn");
        let ready = running
            .wait_ready(Duration::from_secs(10))
            .await
            .expect("ready");
        assert_eq!(ready.pid, running.pid());
        assert_eq!(ready.addr, "127.0.0.1:4242");
        assert_eq!(ready.epoch.as_deref(), Some("e1"));
        // The key arrived on stdin (64 hex digits), and both streams reached the log.
        assert!(log_contains(&path, "key length 64").await);
        assert!(log_contains(&path, "hello from stdout").await);
        assert!(log_contains(&path, "STUDIO_READY").await);

        let started = Instant::now();
        let status = running
            .stop(Duration::from_millis(300))
            .await
            .expect("stopped");
        let waited = started.elapsed();
        assert_eq!(describe(&status), "killed by signal 9");
        assert!(waited >= Duration::from_millis(300), "waited {waited:?}");
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
        // SIGKILL went to the group: the shell's `sleep` is gone too.
        let group = Pid::from_raw(i32::try_from(running.pid()).expect("pid")).expect("pid");
        let deadline = Instant::now() + Duration::from_secs(2);
        while test_kill_process_group(group).is_ok() {
            assert!(Instant::now() < deadline, "the child's group survived");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_polite_child_stops_on_term() {
        let dir = TestDir::new("child-term");
        let (log, _) = log_in(&dir);
        let body = "read key\necho \"STUDIO_READY {\\\"pid\\\":$$,\\\"addr\\\":\\\"127.0.0.1:1\\\"}\"\nexec sleep 30\n";
        let spec = script_spec(&dir, body);
        let mut running = spawn(&spec, &log).await.expect("spawn");
        running
            .wait_ready(Duration::from_secs(10))
            .await
            .expect("ready");
        let started = Instant::now();
        let status = running.stop(Duration::from_secs(10)).await.expect("stop");
        assert_eq!(describe(&status), "killed by signal 15");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn an_early_exit_and_a_silent_child_are_not_ready() {
        let dir = TestDir::new("child-bad");
        let (log, path) = log_in(&dir);
        let spec = script_spec(&dir, "echo 'bad configuration' >&2\nexit 64\n");
        let mut running = spawn(&spec, &log).await.expect("spawn");
        let err = running
            .wait_ready(Duration::from_secs(10))
            .await
            .expect_err("exits");
        assert!(
            matches!(err, ReadyError::Exited(s) if s.code() == Some(64)),
            "{err}"
        );
        assert!(log_contains(&path, "bad configuration").await);

        let spec = script_spec(&dir, "exec sleep 30\n");
        let mut running = spawn(&spec, &log).await.expect("spawn");
        let err = running
            .wait_ready(Duration::from_millis(200))
            .await
            .expect_err("times out");
        assert!(matches!(err, ReadyError::Timeout(_)), "{err}");
        running.stop(Duration::from_secs(5)).await.expect("stop");
    }
}
