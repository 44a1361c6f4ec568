//! The life of one supervised child across runs: start, readiness, crash, backoff,
//! crash loop (`failed`), requested restarts and the final stop. Its state is published
//! on a watch channel for `status` and for the launch sequence.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use studio_contract::time;
use tokio::sync::{mpsc, watch};

use crate::{
    control::{ChildStatus, State},
    logs::{self, SharedLog},
    supervise::{
        child::{self, ReadyError, Spec},
        policy::{Decision, Params, Policy},
    },
};

/// Exit status a child uses for bad configuration (docs/ARCHITECTURE.md).
const EXIT_CONFIG: i32 = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmd {
    /// Stop the current process (if any) and start afresh; not a crash.
    Restart,
    /// Stop for good.
    Stop,
}

#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) name: &'static str,
    pub(crate) ready_timeout: Duration,
    pub(crate) grace: Duration,
    pub(crate) policy: Params,
    /// Rewrite `--addr` to the address the first run bound (`:0` stays stable).
    pub(crate) pin_addr: bool,
    /// The daemon's control socket: a requested restart first asks it to `detach`, so
    /// its running jobs outlive the restart (`docs/SHIMS.md`). A final stop does not.
    pub(crate) detach_socket: Option<PathBuf>,
}

/// How a run ended.
enum Ended {
    Crashed { reason: String, config_error: bool },
    Restart,
    Stop,
}

impl From<Option<Cmd>> for Ended {
    fn from(cmd: Option<Cmd>) -> Self {
        match cmd {
            Some(Cmd::Restart) => Ended::Restart,
            // The supervisor dropped its handle: nothing is left to supervise for.
            Some(Cmd::Stop) | None => Ended::Stop,
        }
    }
}

pub(crate) struct Supervised {
    spec: Spec,
    opts: Options,
    log: SharedLog,
    status: watch::Sender<ChildStatus>,
    cmds: mpsc::Receiver<Cmd>,
    policy: Policy,
    ever_ready: bool,
}

impl Supervised {
    pub(crate) fn new(
        spec: Spec,
        opts: Options,
        log: SharedLog,
        status: watch::Sender<ChildStatus>,
        cmds: mpsc::Receiver<Cmd>,
    ) -> Self {
        let policy = Policy::new(opts.policy);
        Self {
            spec,
            opts,
            log,
            status,
            cmds,
            policy,
            ever_ready: false,
        }
    }

    /// Runs until told to stop; the child is stopped when this returns.
    pub(crate) async fn run(mut self) {
        let mut starts: u32 = 0;
        loop {
            self.status.send_modify(|s| {
                s.restarts = starts;
                s.state = State::Starting;
            });
            starts = starts.saturating_add(1);
            match self.run_once().await {
                Ended::Stop => break,
                Ended::Restart => self.policy.on_requested_restart(),
                Ended::Crashed {
                    reason,
                    config_error,
                } => {
                    self.note(&format!("{} {reason}", self.opts.name));
                    tracing::warn!(child = self.opts.name, %reason, "child crashed");
                    self.status
                        .send_modify(|s| s.last_exit = Some(reason.clone()));
                    // Bad configuration before the first readiness will not fix itself.
                    let decision = if config_error && !self.ever_ready {
                        Decision::Fail
                    } else {
                        self.policy.on_crash(Instant::now())
                    };
                    if self.after_crash(decision).await.is_none() {
                        break;
                    }
                }
            }
        }
        self.status.send_modify(|s| {
            s.state = State::Stopped;
            s.pid = None;
        });
    }

    /// Waits out the backoff, or sits `failed` until asked; `None` means stop.
    async fn after_crash(&mut self, decision: Decision) -> Option<()> {
        match decision {
            Decision::RestartAfter(delay) => {
                self.status.send_modify(|s| s.state = State::Backoff);
                tokio::select! {
                    () = tokio::time::sleep(delay) => Some(()),
                    cmd = self.cmds.recv() => self.revive(cmd),
                }
            }
            Decision::Fail => {
                tracing::error!(
                    child = self.opts.name,
                    "crash loop: giving up until a restart is requested"
                );
                self.note(&format!("{} failed: crash loop", self.opts.name));
                self.status.send_modify(|s| s.state = State::Failed);
                let cmd = self.cmds.recv().await;
                self.revive(cmd)
            }
        }
    }

    fn revive(&mut self, cmd: Option<Cmd>) -> Option<()> {
        match Ended::from(cmd) {
            Ended::Restart => {
                self.policy.on_requested_restart();
                Some(())
            }
            _ => None,
        }
    }

    async fn run_once(&mut self) -> Ended {
        self.policy.on_start();
        let mut running = match child::spawn(&self.spec, &self.log).await {
            Ok(r) => r,
            Err(e) => {
                return Ended::Crashed {
                    reason: format!("could not start {}: {e}", self.spec.program.display()),
                    config_error: false,
                };
            }
        };
        let pid = running.pid();
        tracing::info!(child = self.opts.name, pid, "started");
        self.note(&format!("{} started, pid {pid}", self.opts.name));
        self.status.send_modify(|s| {
            s.pid = Some(pid);
            s.started_at = Some(time::rfc3339(time::now_ms()));
            s.epoch = None;
        });

        let ready = tokio::select! {
            r = running.wait_ready(self.opts.ready_timeout) => r,
            cmd = self.cmds.recv() => return self.stop(&mut running, cmd).await,
        };
        let ready = match ready {
            Ok(r) => r,
            Err(e) => {
                let config_error =
                    matches!(&e, ReadyError::Exited(s) if s.code() == Some(EXIT_CONFIG));
                if matches!(e, ReadyError::Timeout(_)) {
                    let _ = running.stop(self.opts.grace).await;
                }
                return Ended::Crashed {
                    reason: e.to_string(),
                    config_error,
                };
            }
        };
        self.policy.on_ready(Instant::now());
        self.ever_ready = true;
        tracing::info!(child = self.opts.name, pid, addr = %ready.addr, "ready");
        if self.opts.pin_addr {
            pin_addr(&mut self.spec, &ready.addr);
        }
        self.status.send_modify(|s| {
            s.state = State::Running;
            s.epoch = ready.epoch.clone();
            s.addr = Some(ready.addr.clone());
            s.last_exit = None;
        });

        tokio::select! {
            status = running.wait() => Ended::Crashed {
                reason: match status {
                    Ok(s) => format!("exited ({})", child::describe(&s)),
                    Err(e) => format!("could not be waited for: {e}"),
                },
                config_error: false,
            },
            cmd = self.cmds.recv() => self.stop(&mut running, cmd).await,
        }
    }

    async fn stop(&mut self, running: &mut child::Running, cmd: Option<Cmd>) -> Ended {
        let pid = running.pid();
        if cmd == Some(Cmd::Restart)
            && let Some(socket) = self.opts.detach_socket.clone()
        {
            // Unanswered, the stop cancels the jobs: nothing runs on that no daemon knows of.
            match crate::pairing::detach_daemon(socket).await {
                Ok(running) => self.note(&format!(
                    "{} restarting; {running} running job(s) left to their shims",
                    self.opts.name
                )),
                Err(error) => {
                    tracing::warn!(child = self.opts.name, %error, "detach refused; running jobs will be cancelled");
                }
            }
        }
        match running.stop(self.opts.grace).await {
            Ok(s) => {
                tracing::info!(child = self.opts.name, pid, status = %child::describe(&s), "stopped");
                self.note(&format!(
                    "{} stopped ({})",
                    self.opts.name,
                    child::describe(&s)
                ));
            }
            Err(error) => tracing::warn!(child = self.opts.name, pid, %error, "stop failed"),
        }
        self.status.send_modify(|s| s.pid = None);
        Ended::from(cmd)
    }

    /// A supervisor line in the child's log, so the log tells its own story.
    fn note(&self, what: &str) {
        let line = format!("[studio {}] {what}", time::rfc3339(time::now_ms()));
        logs::append(&self.log, line.as_bytes());
    }
}

/// Replaces the value after `--addr` with the bound address, so a restart reuses it.
fn pin_addr(spec: &mut Spec, bound: &str) {
    if let Some(i) = spec.args.iter().position(|a| a == "--addr")
        && let Some(value) = spec.args.get_mut(i + 1)
    {
        *value = bound.into();
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use studio_contract::secret::AppKey;

    use super::*;
    use crate::{
        logs::{RotatingLog, Rotation},
        testdir::TestDir,
    };

    fn setup(
        dir: &TestDir,
        body: &str,
    ) -> (
        mpsc::Sender<Cmd>,
        watch::Receiver<ChildStatus>,
        tokio::task::JoinHandle<()>,
    ) {
        let script = dir.path().join("c.sh");
        std::fs::write(&script, body).expect("script");
        let spec = Spec {
            program: PathBuf::from("/bin/sh"),
            args: vec![
                script.into_os_string(),
                "--addr".into(),
                "127.0.0.1:0".into(),
            ],
            app_key: Some(AppKey::generate()),
            env_remove: vec![],
        };
        let log = RotatingLog::open(dir.path().join("c.log"), Rotation::default())
            .expect("log")
            .shared();
        let (status_tx, status_rx) = watch::channel(ChildStatus::stopped());
        let (cmd_tx, cmd_rx) = mpsc::channel(4);
        let opts = Options {
            name: "test",
            ready_timeout: Duration::from_secs(10),
            grace: Duration::from_secs(2),
            policy: Params {
                base: Duration::from_millis(10),
                max: Duration::from_millis(40),
                healthy_after: Duration::from_secs(60),
                max_crashes: 3,
            },
            pin_addr: true,
            detach_socket: None,
        };
        let task = tokio::spawn(Supervised::new(spec, opts, log, status_tx, cmd_rx).run());
        (cmd_tx, status_rx, task)
    }

    async fn until(rx: &mut watch::Receiver<ChildStatus>, f: impl Fn(&ChildStatus) -> bool) {
        tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|s| f(s)))
            .await
            .expect("state reached in time")
            .expect("supervisor alive");
    }

    const READY: &str = "read key\necho \"STUDIO_READY {\\\"pid\\\":$$,\\\"addr\\\":\\\"127.0.0.1:5555\\\",\\\"epoch\\\":\\\"$$\\\"}\"\nexec sleep 30\n";

    #[tokio::test]
    async fn crashes_are_restarted_then_the_loop_fails_and_a_restart_revives() {
        let dir = TestDir::new("sup-loop");
        let (cmd, mut status, task) = setup(&dir, "read key\nexit 3\n");
        until(&mut status, |s| s.state == State::Failed).await;
        let s = status.borrow().clone();
        assert_eq!(s.restarts, 3, "three restarts, the fourth crash fails it");
        assert_eq!(
            s.last_exit.as_deref(),
            Some("exited before it was ready (exit status 3)")
        );
        cmd.send(Cmd::Restart).await.expect("send");
        until(&mut status, |s| s.restarts == 4).await;
        cmd.send(Cmd::Stop).await.expect("send");
        task.await.expect("joined");
        assert_eq!(status.borrow().state, State::Stopped);
    }

    #[tokio::test]
    async fn a_bad_configuration_fails_at_once() {
        let dir = TestDir::new("sup-64");
        let (_cmd, mut status, task) = setup(&dir, "read key\nexit 64\n");
        until(&mut status, |s| s.state == State::Failed).await;
        assert_eq!(status.borrow().restarts, 0);
        task.abort();
    }

    #[tokio::test]
    async fn a_requested_restart_gives_a_new_process_and_pins_the_address() {
        let dir = TestDir::new("sup-rs");
        let (cmd, mut status, task) = setup(&dir, READY);
        until(&mut status, |s| s.state == State::Running).await;
        let first = status.borrow().clone();
        assert_eq!(first.addr.as_deref(), Some("127.0.0.1:5555"));
        assert_eq!(first.epoch, first.pid.map(|p| p.to_string()));
        cmd.send(Cmd::Restart).await.expect("send");
        until(&mut status, |s| {
            s.state == State::Running && s.pid != first.pid
        })
        .await;
        assert_eq!(status.borrow().restarts, 1);
        // A crash of a running child is restarted too.
        let pid = status.borrow().pid.expect("pid");
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid"),
            rustix::process::Signal::KILL,
        )
        .expect("kill");
        until(&mut status, |s| {
            s.state == State::Running && s.pid != Some(pid)
        })
        .await;
        assert_eq!(status.borrow().restarts, 2);
        cmd.send(Cmd::Stop).await.expect("send");
        task.await.expect("joined");
        let log = std::fs::read_to_string(dir.path().join("c.log")).expect("log");
        assert!(log.contains("test exited (killed by signal 9)"), "{log}");
    }

    #[test]
    fn pinning_rewrites_only_the_addr_value() {
        let mut spec = Spec {
            program: PathBuf::from("x"),
            args: ["--home", "h", "--addr", "127.0.0.1:0", "--daemon-addr", "d"]
                .map(Into::into)
                .to_vec(),
            app_key: None,
            env_remove: vec![],
        };
        pin_addr(&mut spec, "127.0.0.1:4000");
        assert_eq!(spec.args[3], "127.0.0.1:4000");
        assert_eq!(spec.args[5], "d");
    }
}
