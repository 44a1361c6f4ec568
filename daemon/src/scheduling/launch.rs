//! From a claimed run to a finished one: a slot, the allow-list check immediately before
//! exec, the launch through a shim (`docs/SHIMS.md`), the dispatch stamp, the wait for
//! the shim's exit by pidfd, its `outcome.json`, the terminal write, then follow-ups.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use serde_json::Value;
use studio_contract::time::{now_ms, rfc3339};
use studio_runner::{
    Canceller, Ending, JobSpec, LaunchRequest, LaunchSpec, Outcome, ProcessIdentity,
    client::{LaunchError, ShimWatch},
    env::job_env,
    evidence::{self, Evidence},
};
use studio_schedule::{
    Action, FollowUp, OnDaemonLoss, ScheduleSpec, TaskSpec, validate::not_allowed,
};
use tokio::sync::OwnedSemaphorePermit;

use super::{
    CrashPoint,
    engine::Scheduler,
    model::{RunKind, RunRow, RunStatus, ScheduleRow},
    secrets::{Opened, SecretsUnavailable},
    store::{Claim, Cursor, Finish, NewRun, TaskRow},
};
use crate::error::chain;

/// The deadline of a job whose schedule sets none.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(7_200);
/// How deep follow-ups chain (validation refuses deeper specs).
const MAX_CHAIN_DEPTH: i64 = 10;

/// What a run belongs to: the schedule whose spec its job comes from (and whose
/// follow-ups it fires), or the task it is an attempt of.
#[derive(Debug, Clone)]
pub(crate) enum Owner {
    Schedule(ScheduleRow),
    Task(TaskRow),
}

/// What a job is besides its action: its working directory, its environment, its
/// deadline, and whether it must end with the studiod that launched it.
struct JobDef {
    cwd: Option<String>,
    env: BTreeMap<String, String>,
    /// Variable → the secret it receives.
    secrets: BTreeMap<String, String>,
    deadline: Option<u64>,
    kill_on_loss: bool,
}

impl Owner {
    /// The job's definition; `None` when the stored spec cannot be read.
    fn job(&self) -> Option<JobDef> {
        match self {
            Self::Schedule(row) => {
                let spec: ScheduleSpec = serde_json::from_str(&row.spec).ok()?;
                Some(JobDef {
                    kill_on_loss: spec.policies.on_daemon_loss == OnDaemonLoss::Kill,
                    deadline: spec.policies.deadline,
                    cwd: spec.cwd,
                    env: spec.env,
                    secrets: spec.secrets,
                })
            }
            Self::Task(row) => {
                let spec: TaskSpec = serde_json::from_str(&row.spec).ok()?;
                Some(JobDef {
                    kill_on_loss: false,
                    deadline: spec.deadline,
                    cwd: spec.cwd,
                    env: spec.env,
                    secrets: spec.secrets,
                })
            }
        }
    }

    /// The schedule, for follow-ups.
    fn schedule(&self) -> Option<&ScheduleRow> {
        match self {
            Self::Schedule(row) => Some(row),
            Self::Task(_) => None,
        }
    }
}

/// Why a launch has no job to supervise.
enum Unlaunched {
    /// Certainly nothing started.
    Refused(String),
    /// No report came back: the run's folder must tell.
    Unknown(String),
}

/// Why a claimed run could not be launched.
enum Refusal {
    NotAllowed(String),
    Spawn(String),
    ScheduleGone,
    /// A secret it names is gone or cannot be opened.
    Secret(String),
}

impl Scheduler {
    /// Runs `run` to its end in its own task. `permit` is its concurrency slot when the
    /// claim already took one (the run is then `running`); otherwise it waits `queued`.
    pub(super) fn launch(
        self: &Arc<Self>,
        run: RunRow,
        owner: Owner,
        permit: Option<OwnedSemaphorePermit>,
    ) {
        let this = self.clone();
        tokio::spawn(async move {
            let run_id = run.id.clone();
            if let Err(error) = this.drive(run, owner, permit).await {
                tracing::error!(run = %run_id, error = %chain(&error), "run supervision failed");
            }
            this.active().remove(&run_id);
            // A slot, and perhaps a concurrency key, is free: the workers look; and the
            // run may have left a retry to make.
            this.tasks_changed();
            this.retry_wake.notify_one();
        });
    }

    async fn drive(
        self: &Arc<Self>,
        run: RunRow,
        owner: Owner,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<(), crate::store::StoreError> {
        let _permit = match permit {
            Some(p) => p,
            None => {
                let Ok(p) = self.slots.clone().acquire_owned().await else {
                    return Ok(());
                };
                // Cancelled (or sent back to wait for a new approval) while it waited: the
                // compare-and-set fails and nothing runs. An approved run consumes its
                // grant here, in the same transaction.
                let Some((started, events)) = self.store.start_queued(&run.id, now_ms()).await?
                else {
                    return Ok(());
                };
                for event in events {
                    self.publish(event);
                }
                if started.status() != Some(RunStatus::Running) {
                    tracing::warn!(run = %run.id, "approval not granted: the run is cancelled");
                    return Ok(());
                }
                p
            }
        };
        let def = owner.job();
        let secrets = match def.as_ref().map(|d| &d.secrets) {
            Some(refs) => match self.open_secrets(refs).await {
                Ok(opened) => opened,
                Err(SecretsUnavailable::Store(e)) => return Err(e),
                Err(why) => return self.refuse(&run, Refusal::Secret(why.to_string())).await,
            },
            None => Opened::default(),
        };
        let job = match self.job_for(&run, def.as_ref(), secrets) {
            Ok(job) => job,
            Err(refusal) => return self.refuse(&run, refusal).await,
        };
        let kill_on_loss = def.as_ref().is_some_and(|d| d.kill_on_loss);
        let (shim, leader) = match self.launch_job(&run, &job, kill_on_loss).await {
            Ok(launched) => launched,
            Err(Unlaunched::Refused(why)) => return self.refuse(&run, Refusal::Spawn(why)).await,
            // No report: the run's folder says what happened, as it would at a restart.
            Err(Unlaunched::Unknown(why)) => {
                tracing::warn!(run = %run.id, error = %why, "launch not reported");
                return match evidence::classify(&job.run_dir, &self.boot_id) {
                    Ok(Evidence::NeverStarted) => self.refuse(&run, Refusal::Spawn(why)).await,
                    // Supervised here, by this task (which holds the run's slot).
                    Ok(Evidence::Supervised { shim }) => {
                        self.stamp_launch(&run).await?;
                        let pgid = evidence::job(&job.run_dir).map(|leader| leader.pid);
                        self.supervise(&run, owner.schedule(), &shim, pgid).await
                    }
                    found => self.settle_by_evidence(run, found).await,
                };
            }
        };
        CrashPoint::reached(self.config.crash_at, CrashPoint::AfterSpawn, &self.run_dir);
        self.store
            .mark_dispatched(
                &run.id,
                leader.pid,
                Some(&leader),
                Some(&job.program),
                job.deadline.and_then(|d| i64::try_from(d.as_millis()).ok()),
                now_ms(),
            )
            .await?;
        CrashPoint::reached(
            self.config.crash_at,
            CrashPoint::AfterDispatch,
            &self.run_dir,
        );
        self.supervise(&run, owner.schedule(), &shim, Some(leader.pid))
            .await
    }

    /// Follows the shim of a launched (or adopted) run to its end, passing on a cancel,
    /// then records the run's outcome from its folder.
    pub(super) async fn supervise(
        self: &Arc<Self>,
        run: &RunRow,
        schedule: Option<&ScheduleRow>,
        shim: &ProcessIdentity,
        pgid: Option<u32>,
    ) -> Result<(), crate::store::StoreError> {
        let (canceller, cancelled) = Canceller::pair();
        let pending_cancel = {
            let mut active = self.active();
            let entry = active.entry(run.id.clone()).or_default();
            entry.canceller = Some(canceller.clone());
            entry.pgid = pgid;
            entry.cancel_reason.is_some()
        };
        if pending_cancel {
            canceller.cancel();
        }
        watch_shim(&run.id, shim, cancelled).await;
        let run_dir = self.runs_dir.join(&run.id);
        let outcome = match evidence::classify(&run_dir, &self.boot_id) {
            Ok(Evidence::Ended(outcome)) => *outcome,
            other => return self.shim_lost(run, &other).await,
        };
        CrashPoint::reached(
            self.config.crash_at,
            CrashPoint::BeforeFinish,
            &self.run_dir,
        );
        self.record_outcome(run, schedule, &outcome).await
    }

    /// Ends a `running` run with the outcome its shim recorded, then fires its follow-up.
    pub(super) async fn record_outcome(
        self: &Arc<Self>,
        run: &RunRow,
        schedule: Option<&ScheduleRow>,
        outcome: &Outcome,
    ) -> Result<(), crate::store::StoreError> {
        let reason = self
            .active()
            .get(&run.id)
            .and_then(|a| a.cancel_reason.clone());
        let (status, reason) = settle(outcome, reason);
        let finish = finish_of(outcome);
        if let Some((row, events)) = self
            .store
            .transition(
                &run.id,
                RunStatus::Running,
                status,
                Some(&reason),
                Some(&finish),
                now_ms(),
            )
            .await?
        {
            self.publish_all(events);
            if let Some(schedule) = schedule {
                self.follow_up(&row, schedule).await;
            }
        }
        Ok(())
    }

    /// Stamps the launch of a run no daemon stamped (it died first, or got no report) from
    /// the job leader its shim recorded, if the job started.
    pub(super) async fn stamp_launch(&self, run: &RunRow) -> Result<(), crate::store::StoreError> {
        if run.dispatched_at_ms.is_none()
            && let Some(leader) = evidence::job(&self.runs_dir.join(&run.id))
        {
            self.store
                .mark_dispatched(&run.id, leader.pid, Some(&leader), None, None, now_ms())
                .await?;
        }
        Ok(())
    }

    /// Starts `job` under a shim: the shim's and the job leader's identities, or why
    /// nothing runs. With `kill_on_loss` the shim ends the job when this studiod is gone.
    async fn launch_job(
        &self,
        run: &RunRow,
        job: &JobSpec,
        kill_on_loss: bool,
    ) -> Result<(ProcessIdentity, ProcessIdentity), Unlaunched> {
        let launcher = self.launcher.as_ref().ok_or_else(|| {
            Unlaunched::Refused("no job launcher is configured; nothing was started".into())
        })?;
        let req = LaunchRequest {
            run_id: run.id.clone(),
            boot_id: self.boot_id.clone(),
            spec: LaunchSpec::from_job_spec(job),
            daemon_pid: kill_on_loss.then(std::process::id),
            inherited_lock_fd: self.lock_fd,
        };
        let report = match launcher.launch(&req).await {
            Ok(report) => report,
            Err(LaunchError::Gone) => {
                return Err(Unlaunched::Unknown(LaunchError::Gone.to_string()));
            }
            // Not written, or no launcher could be started: nothing was forked.
            Err(e) => return Err(Unlaunched::Refused(e.to_string())),
        };
        let leader = report.result.map_err(Unlaunched::Refused)?;
        let shim = report
            .shim
            .ok_or_else(|| Unlaunched::Unknown("the job started without a recorded shim".into()))?;
        Ok((shim, leader))
    }

    /// The shim ended without an outcome: the job's end is unknown, and its group is
    /// gone with the shim (the job dies with it).
    async fn shim_lost(
        &self,
        run: &RunRow,
        evidence: &std::io::Result<Evidence>,
    ) -> Result<(), crate::store::StoreError> {
        let detail = match evidence {
            Ok(found) => format!("the job's shim ended without an outcome ({found:?})"),
            Err(e) => format!("the job's outcome cannot be read: {e}"),
        };
        tracing::warn!(run = %run.id, detail = %detail, "shim lost");
        self.fail(run, RunStatus::Running, "shim_lost", detail)
            .await
    }

    /// Ends an active run (`from`) as `failed` with `reason`, `detail` as its error output.
    pub(super) async fn fail(
        &self,
        run: &RunRow,
        from: RunStatus,
        reason: &str,
        detail: String,
    ) -> Result<(), crate::store::StoreError> {
        let finish = Finish {
            stderr_tail: Some(detail),
            ..Finish::default()
        };
        if let Some((_, events)) = self
            .store
            .transition(
                &run.id,
                from,
                RunStatus::Failed,
                Some(reason),
                Some(&finish),
                now_ms(),
            )
            .await?
        {
            self.publish_all(events);
        }
        Ok(())
    }

    /// The job of a run: its program, the cleared environment, its deadline.
    fn job_for(
        &self,
        run: &RunRow,
        def: Option<&JobDef>,
        secrets: Opened,
    ) -> Result<JobSpec, Refusal> {
        let def = def.ok_or(Refusal::ScheduleGone)?;
        let action: Action = serde_json::from_str(&run.action)
            .map_err(|e| Refusal::Spawn(format!("unreadable action: {e}")))?;
        let (program, args) = match action {
            Action::Command { executable, args } => {
                // Checked again here, immediately before exec: a revoked entry spawns nothing.
                if !self.allowlist.allows(&executable) {
                    return Err(Refusal::NotAllowed(executable));
                }
                (self.program(&executable)?, args)
            }
            Action::Agent {
                prompt,
                model,
                profile,
            } => {
                let mut words = self.config.agent_command.iter().cloned();
                let program = words
                    .next()
                    .ok_or_else(|| Refusal::Spawn("STUDIO_AGENT_COMMAND is empty".into()))?;
                let program = self.program(&program)?;
                let mut args: Vec<String> = words.collect();
                for (flag, value) in [("--model", model), ("--profile", profile)] {
                    if let Some(v) = value {
                        args.extend([flag.to_owned(), v]);
                    }
                }
                args.extend(["--".to_owned(), prompt]);
                (program, args)
            }
        };
        let run_dir = self.runs_dir.join(&run.id);
        let studio = [
            ("STUDIO_RUN_ID", run.id.clone()),
            (
                "STUDIO_SCHEDULE_ID",
                run.schedule_id.clone().unwrap_or_default(),
            ),
            (
                "STUDIO_RESULT_FILE",
                run_dir.join("result.json").display().to_string(),
            ),
            // The instant this run stands for, so a job can process exactly its window.
            (
                "STUDIO_SCHEDULED_AT",
                run.scheduled_at_ms.map(rfc3339).unwrap_or_default(),
            ),
            ("STUDIO_ATTEMPT", run.attempt.to_string()),
        ];
        let mut extra = def.env.clone();
        extra.extend(secrets.env);
        Ok(JobSpec {
            program,
            args,
            cwd: def.cwd.as_ref().map(Into::into),
            env: job_env(self.config.host_env.iter().cloned(), &extra, &studio),
            run_dir,
            log_cap: self.config.log_cap,
            deadline: Some(def.deadline.map_or(DEFAULT_DEADLINE, Duration::from_secs)),
            grace: self.config.job_grace,
            die_with_parent: true,
            redact: secrets.redact,
        })
    }

    /// The absolute path `name` runs, found on studiod's own `PATH`, never the job's.
    fn program(&self, name: &str) -> Result<String, Refusal> {
        studio_runner::resolve(name, &self.config.search_path)
            .map(|path| path.display().to_string())
            .map_err(|e| Refusal::Spawn(format!("{e}; nothing was started")))
    }

    async fn refuse(&self, run: &RunRow, refusal: Refusal) -> Result<(), crate::store::StoreError> {
        let (reason, detail) = match refusal {
            Refusal::NotAllowed(exe) => (
                "not_allowed",
                format!("nothing was started: {}", not_allowed(&exe)),
            ),
            Refusal::Spawn(why) => ("spawn_failed", why),
            Refusal::ScheduleGone => (
                "schedule_deleted",
                "the schedule was deleted before the run started".into(),
            ),
            Refusal::Secret(why) => ("secret_missing", format!("nothing was started: {why}")),
        };
        tracing::warn!(run = %run.id, reason, detail = %detail, "run not launched");
        self.fail(run, RunStatus::Running, reason, detail).await
    }

    /// Fires the run's `on_success` / `on_fail` follow-up, if any.
    pub(super) async fn follow_up(self: &Arc<Self>, parent: &RunRow, schedule: &ScheduleRow) {
        let key = match parent.status() {
            Some(RunStatus::Completed) => "on_success",
            Some(RunStatus::Failed | RunStatus::TimedOut) => "on_fail",
            _ => return,
        };
        let Some(node) = parent
            .follow_ups
            .as_deref()
            .and_then(|f| serde_json::from_str::<Value>(f).ok())
            .and_then(|v| serde_json::from_value::<Option<FollowUp>>(v[key].clone()).ok())
            .flatten()
        else {
            return;
        };
        if parent.chain_depth >= MAX_CHAIN_DEPTH {
            tracing::warn!(run = %parent.id, "chain depth cap reached; follow-up not fired");
            return;
        }
        let follow_ups = (node.on_success.is_some() || node.on_fail.is_some()).then(|| {
            serde_json::json!({ "on_success": node.on_success, "on_fail": node.on_fail })
                .to_string()
        });
        let run = NewRun {
            id: uuid::Uuid::now_v7().to_string(),
            schedule_id: parent.schedule_id.clone(),
            occurrence_key: None,
            kind: RunKind::Chain,
            status: RunStatus::Queued,
            reason: Some(key.to_owned()),
            action: serde_json::to_string(&node.action).unwrap_or_default(),
            scheduled_at_ms: None,
            counted: false,
            chain_parent_id: Some(parent.id.clone()),
            chain_depth: parent.chain_depth + 1,
            replaces_run_id: None,
            follow_ups,
            attempt: 1,
            // Covered by its parent's grant, which bound the follow-ups too.
            approval: None,
            approval_id: None,
            task: None,
        };
        match self
            .claim_and_launch(run, schedule, Cursor::Keep, None)
            .await
        {
            Ok(Claim::Claimed(..)) => {}
            Ok(_) => tracing::warn!(run = %parent.id, "follow-up not claimed (schedule gone)"),
            Err(error) => tracing::error!(run = %parent.id, error = %error, "follow-up failed"),
        }
    }
}

/// Waits for the shim's exit; a cancel request becomes SIGTERM to the shim, which ends
/// the job's group (TERM, grace, KILL) and records it `cancelled`.
async fn watch_shim(
    run_id: &str,
    shim: &ProcessIdentity,
    mut cancelled: tokio::sync::watch::Receiver<bool>,
) {
    let watch = match ShimWatch::open(shim) {
        Ok(Some(watch)) => watch,
        // Already gone: its outcome is on disk, or never will be.
        Ok(None) => return,
        Err(e) => {
            // Unwatchable: poll its identity instead, so the run still ends.
            tracing::warn!(run = %run_id, error = %e, "cannot watch the shim by pidfd");
            while shim.is_running(&shim.boot_id) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            return;
        }
    };
    tokio::select! {
        () = watch.exited() => return,
        requested = cancelled.wait_for(|c| *c) => {
            if requested.is_ok()
                && let Err(e) = watch.terminate()
            {
                tracing::warn!(run = %run_id, error = %e, "cannot signal the shim");
            }
        }
    }
    watch.exited().await;
}

/// The terminal status and reason of an outcome.
pub(super) fn settle(outcome: &Outcome, cancel_reason: Option<String>) -> (RunStatus, String) {
    match outcome.ending {
        Ending::Deadline => (RunStatus::TimedOut, "deadline".into()),
        Ending::Cancelled => (
            RunStatus::Cancelled,
            cancel_reason
                .or_else(|| outcome.cancelled_by.clone())
                .unwrap_or_else(|| "cancelled".into()),
        ),
        Ending::Exited if outcome.succeeded() => (RunStatus::Completed, "exit_0".into()),
        Ending::Exited => match (outcome.exit_code, outcome.signal) {
            (Some(code), _) => (RunStatus::Failed, format!("exit_{code}")),
            (None, Some(sig)) => (RunStatus::Failed, format!("signal_{sig}")),
            // Neither code nor signal: the job never started, and its shim said why.
            (None, None) if outcome.report_error.is_some() => {
                (RunStatus::Failed, "spawn_failed".into())
            }
            (None, None) => (RunStatus::Failed, "unknown_exit".into()),
        },
    }
}

pub(super) fn finish_of(outcome: &Outcome) -> Finish {
    let report = outcome.report.clone().unwrap_or_default();
    let stderr_tail = match &outcome.report_error {
        Some(why) => format!("{}\n[studio] {why}\n", outcome.stderr.tail),
        None => outcome.stderr.tail.clone(),
    };
    Finish {
        exit_code: outcome.exit_code.map(i64::from),
        signal: outcome.signal.map(i64::from),
        stdout_tail: Some(outcome.stdout.tail.clone()),
        stderr_tail: Some(stderr_tail),
        stdout_bytes: i64::try_from(outcome.stdout.bytes).ok(),
        stderr_bytes: i64::try_from(outcome.stderr.bytes).ok(),
        cost_usd: report.cost_usd,
        tokens: report.tokens.and_then(|t| i64::try_from(t).ok()),
    }
}
