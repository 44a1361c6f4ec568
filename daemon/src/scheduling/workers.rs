//! Remote workers, studiod's side (docs/TASKS.md, "Workers" and "Leases"): enrolment
//! through one-time join tokens, what a connected worker is told to run or cancel, the
//! heartbeat that renews its leases, its fenced reports (start, log chunks, end), the
//! lease reaper, and revocation. The wire (gRPC, mutual TLS) is `crate::workers`; here
//! everything is in the scheduler's terms.
//!
//! Invariants: an attempt's report is recorded only while the run is still running under
//! the reporting worker with the lease's fencing token (checked in the writing
//! transaction); an attempt whose lease ends unrenewed ends `failed` with reason
//! `worker_lost` and its task's retry policy decides; the reaper sleeps until the
//! earliest lease, like every other due time here.

use std::{
    collections::{BTreeMap, HashSet},
    io::{Seek, SeekFrom, Write},
    sync::{Arc, PoisonError},
    time::Duration,
};

use serde_json::json;
use studio_contract::time::now_ms;
use studio_runner::{Ending, Outcome, Redaction};
use studio_schedule::{Action, ScheduleSpec, TaskSpec};

use super::{
    Scheduler,
    engine::{Active, EngineError},
    launch::{finish_of, settle},
    model::{RunRow, RunStatus},
    secrets::SecretsUnavailable,
    store::{Ended, Finish, NewWorker, Note, WorkerRow, serves, split},
    tasks::Fairness,
};
use crate::{
    audit::{Actor, Kind},
    error::chain,
    store::StoreError,
};

/// The reason of an attempt whose worker lost it (or was lost).
const WORKER_LOST: &str = "worker_lost";

/// The deadline of an attempt whose task sets none (as for schedules).
const DEFAULT_DEADLINE_S: u64 = 7_200;
/// The longest the lease reaper sleeps with no lease to watch.
const IDLE: Duration = Duration::from_secs(60);

/// A lease granted to a worker: the attempt's run, the task it is an attempt of (none
/// for a run of a schedule with a target), its fencing token and what to run.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub run: RunRow,
    pub task_id: Option<String>,
    pub fence: i64,
    pub job: RemoteJob,
}

/// What a worker runs: the action and the job's own working directory, environment
/// and deadline; nothing of studiod's.
#[derive(Debug, Clone)]
pub(crate) struct RemoteJob {
    pub action: Action,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    /// Variable → the secret it receives (its `Debug` shows no value).
    pub secrets: BTreeMap<String, Redaction>,
    pub deadline_s: u64,
}

/// What a worker's assignment stream carries next.
#[derive(Debug, Clone)]
pub(crate) enum Instruction {
    Lease(Box<Grant>),
    Cancel {
        run_id: String,
        fence: i64,
        reason: String,
    },
}

/// What a heartbeat answers: the leases renewed, the attempts to cancel, and those that
/// are not the worker's any more (to kill).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Beat {
    pub renewed: Vec<String>,
    pub cancel: Vec<String>,
    pub kill: Vec<String>,
}

/// A connected worker's own state on studiod's side: its fair order and the cancels
/// already passed on.
#[derive(Debug, Default)]
pub(crate) struct Session {
    fairness: Fairness,
    cancels_sent: HashSet<String>,
}

/// Which stream of a job a log chunk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogStream {
    Stdout,
    Stderr,
}

impl Scheduler {
    /// How long a remote lease lasts unrenewed.
    pub(crate) fn lease_ttl_ms(&self) -> i64 {
        i64::try_from(self.config.lease_ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// Records a join token (its digest) with the labels it grants, valid until
    /// `expires_at_ms`, made by `by`.
    pub(crate) async fn record_join_token(
        &self,
        digest: &str,
        labels: &[String],
        expires_at_ms: i64,
        by: &Actor,
    ) -> Result<(), EngineError> {
        let note = Note {
            by,
            kind: Kind::WorkerTokenCreated,
            object: "worker_token".into(),
            schedule_id: None,
            detail: json!({ "labels": labels, "expires_at_ms": expires_at_ms }),
        };
        let key = labels_key(labels);
        self.store
            .create_join_token(digest, &key, expires_at_ms, &note, now_ms())
            .await?;
        Ok(())
    }

    /// Enrols `worker` with the join token `digest` (once, unexpired); `None` when the
    /// token does not admit it.
    pub(crate) async fn join_worker(
        &self,
        digest: &str,
        worker: &NewWorker,
        epoch: &str,
    ) -> Result<Option<WorkerRow>, StoreError> {
        let joined = self
            .store
            .join_worker(digest, worker, epoch, now_ms())
            .await?;
        if joined.is_some() {
            // Tasks it can serve are not unmatched any more.
            self.work_signal.send_modify(|n| *n += 1);
        }
        Ok(joined)
    }

    /// Whether the join token `digest` could enrol a worker now.
    pub(crate) async fn join_token_usable(&self, digest: &str) -> Result<bool, StoreError> {
        self.store.join_token_usable(digest, now_ms()).await
    }

    /// The enrolled, unrevoked worker whose certificate has this SHA-256.
    pub(crate) async fn admitted_worker(&self, sha: &str) -> Result<Option<WorkerRow>, StoreError> {
        Ok(self
            .store
            .worker_by_cert(sha)
            .await?
            .filter(|w| w.revoked_at_ms.is_none()))
    }

    /// Records what a worker offers now (a subset of its granted labels: anything else
    /// is dropped) and how many jobs it runs at once; the worker after.
    pub(crate) async fn register_worker(
        &self,
        worker: &WorkerRow,
        offered: &[String],
        capacity: u32,
        version: &str,
    ) -> Result<Option<WorkerRow>, StoreError> {
        let granted = split(&worker.labels);
        let offered: Vec<String> = offered
            .iter()
            .filter(|l| granted.contains(l))
            .cloned()
            .collect();
        let capacity = i64::from(capacity.clamp(1, 1024));
        let row = self
            .store
            .register_worker(
                &worker.id,
                &labels_key(&offered),
                capacity,
                version,
                now_ms(),
            )
            .await?;
        self.work_signal.send_modify(|n| *n += 1);
        Ok(row)
    }

    /// Changes of the queue and cancel requests, for assignment streams to look again.
    pub(crate) fn work_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.work_signal.subscribe()
    }

    /// Notes that one of `worker`'s assignment streams opened (`true`) or closed (a
    /// reconnecting worker's new stream may open before its old one is noticed closed).
    pub(crate) fn set_connected(&self, worker: &str, open: bool) {
        let mut connected = self
            .connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let streams = connected.entry(worker.to_owned()).or_default();
        if open {
            *streams += 1;
        } else {
            *streams = streams.saturating_sub(1);
            if *streams == 0 {
                connected.remove(worker);
            }
        }
    }

    /// Whether one of `worker`'s assignment streams is open.
    /// How many workers have an open assignment stream.
    pub(crate) fn connected_workers(&self) -> i64 {
        let n = self
            .connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        i64::try_from(n).unwrap_or(i64::MAX)
    }

    pub(crate) fn is_connected(&self, worker: &str) -> bool {
        self.connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(worker)
    }

    /// The cap of each stream of a run's log.
    pub(crate) fn log_cap(&self) -> u64 {
        self.config.log_cap
    }

    /// What `worker` is to do now: cancels asked for its attempts (each once per
    /// session), then leases while it has free capacity and renews its leases.
    pub(crate) async fn next_instructions(
        self: &Arc<Self>,
        worker: &WorkerRow,
        session: &mut Session,
    ) -> Result<Vec<Instruction>, StoreError> {
        let mut out = Vec::new();
        let asked: Vec<(String, String)> = self
            .active()
            .iter()
            .filter(|(_, a)| a.worker.as_deref() == Some(worker.id.as_str()))
            .filter_map(|(id, a)| Some((id.clone(), a.cancel_reason.clone()?)))
            .collect();
        for (run_id, reason) in asked {
            if session.cancels_sent.insert(run_id.clone())
                && let Some(fence) = self.store.fence_of(&run_id).await?
            {
                out.push(Instruction::Cancel {
                    run_id,
                    fence,
                    reason,
                });
            }
        }
        // A worker that has stopped renewing (killed, cut off, suspended) gets no new
        // lease: it would only run out.
        let live = worker
            .last_seen_at_ms
            .is_some_and(|seen| now_ms() - seen <= self.lease_ttl_ms());
        if !live {
            return Ok(out);
        }
        let running = self
            .store
            .attempts_by_worker()
            .await?
            .into_iter()
            .find_map(|(id, n)| (id == worker.id).then_some(n))
            .unwrap_or(0);
        let labels = worker.serving();
        for _ in running..worker.capacity {
            // A schedule's occurrence is due now; a task can wait its turn.
            let grant = match self.claim_targeted_for(worker, &labels).await? {
                Some(grant) => Some(grant),
                None => self.claim_for(worker, &labels, session).await?,
            };
            let Some(grant) = grant else {
                break;
            };
            out.push(Instruction::Lease(Box::new(grant)));
        }
        Ok(out)
    }

    /// Claims the oldest queued run of a schedule whose target the worker's labels serve.
    async fn claim_targeted_for(
        &self,
        worker: &WorkerRow,
        labels: &[String],
    ) -> Result<Option<Grant>, StoreError> {
        for (run_id, spec) in self.store.targeted_candidates(64).await? {
            let Ok(spec) = serde_json::from_str::<ScheduleSpec>(&spec) else {
                continue;
            };
            let Some(target) = &spec.target else {
                continue;
            };
            if !serves(labels, &target.labels_key()) {
                continue;
            }
            let Some((run, fence, events)) = self
                .store
                .claim_targeted(&run_id, &worker.id, self.lease_ttl_ms(), now_ms())
                .await?
            else {
                continue;
            };
            self.publish_all(events);
            {
                let mut active = self.active();
                let entry = active.entry(run.id.clone()).or_default();
                entry.schedule_id = run.schedule_id.clone();
                entry.targeted = true;
                entry.worker = Some(worker.id.clone());
            }
            self.lease_wake.notify_one();
            let Some(secrets) = self.remote_secrets(&run, &spec.secrets).await? else {
                continue;
            };
            // The action as the occurrence was claimed; the rest as the schedule says now.
            let action = serde_json::from_str(&run.action).unwrap_or(spec.action);
            let job = RemoteJob {
                action,
                cwd: spec.cwd,
                env: spec.env,
                secrets,
                deadline_s: spec.policies.deadline.unwrap_or(DEFAULT_DEADLINE_S),
            };
            return Ok(Some(Grant {
                run,
                task_id: None,
                fence,
                job,
            }));
        }
        Ok(None)
    }

    /// The secrets a just-claimed remote attempt names (`refs`: variable → secret), for its
    /// lease; `None` when one is gone or cannot be opened: the attempt then ends `failed`
    /// / `secret_missing`, before anything is sent.
    async fn remote_secrets(
        &self,
        run: &RunRow,
        refs: &BTreeMap<String, String>,
    ) -> Result<Option<BTreeMap<String, Redaction>>, StoreError> {
        let opened = match self.open_secrets(refs).await {
            Ok(opened) => opened,
            Err(SecretsUnavailable::Store(e)) => return Err(e),
            Err(why) => {
                let detail = format!("[studio] nothing was started: {why}\n");
                self.fail(run, RunStatus::Running, "secret_missing", detail)
                    .await?;
                self.active().remove(&run.id);
                self.tasks_changed();
                return Ok(None);
            }
        };
        Ok(Some(
            refs.iter()
                .filter_map(|(variable, name)| {
                    let value = opened.env.get(variable)?.clone();
                    let secret = Redaction {
                        name: name.clone(),
                        value,
                    };
                    Some((variable.clone(), secret))
                })
                .collect(),
        ))
    }

    /// Claims the task the worker's fair order picks among those its labels serve.
    async fn claim_for(
        self: &Arc<Self>,
        worker: &WorkerRow,
        labels: &[String],
        session: &mut Session,
    ) -> Result<Option<Grant>, StoreError> {
        let released = self.store.release_retries(now_ms()).await?;
        if !released.is_empty() {
            // Every worker may serve what came back to the queue.
            self.publish_all(released);
            self.work_signal.send_modify(|n| *n += 1);
        }
        for _ in 0..3 {
            let candidates = self.store.claim_candidates(labels).await?;
            let Some(picked) = session.fairness.pick(&candidates).cloned() else {
                return Ok(None);
            };
            let Some((task, run, events)) = self
                .store
                .claim_task(&picked.id, &worker.id, self.lease_ttl_ms(), now_ms())
                .await?
            else {
                continue;
            };
            self.publish_all(events);
            self.active().insert(
                run.id.clone(),
                Active {
                    worker: Some(worker.id.clone()),
                    ..Active::default()
                },
            );
            self.lease_wake.notify_one();
            let spec: TaskSpec = match serde_json::from_str(&task.spec) {
                Ok(spec) => spec,
                Err(e) => {
                    let detail = format!("[studio] the stored spec cannot be read: {e}\n");
                    self.fail(&run, RunStatus::Running, "spawn_failed", detail)
                        .await?;
                    self.active().remove(&run.id);
                    continue;
                }
            };
            let Some(secrets) = self.remote_secrets(&run, &spec.secrets).await? else {
                continue;
            };
            let fence = self.store.fence_of(&run.id).await?.unwrap_or_default();
            let job = RemoteJob {
                deadline_s: spec.deadline.unwrap_or(DEFAULT_DEADLINE_S),
                action: spec.action,
                cwd: spec.cwd,
                env: spec.env,
                secrets,
            };
            return Ok(Some(Grant {
                run,
                task_id: Some(task.id),
                fence,
                job,
            }));
        }
        Ok(None)
    }

    /// Renews the leases `worker` holds and says which of its attempts to cancel or kill.
    pub(crate) async fn heartbeat(
        &self,
        worker: &WorkerRow,
        held: &[(String, i64)],
    ) -> Result<Beat, StoreError> {
        let now = now_ms();
        let renewed = self
            .store
            .renew_leases(&worker.id, held, now + self.lease_ttl_ms(), now)
            .await?;
        let active = self.active();
        let cancel = renewed
            .iter()
            .filter(|id| active.get(*id).is_some_and(|a| a.cancel_reason.is_some()))
            .cloned()
            .collect();
        drop(active);
        let kill = held
            .iter()
            .filter(|(id, _)| !renewed.contains(id))
            .map(|(id, _)| id.clone())
            .collect();
        Ok(Beat {
            renewed,
            cancel,
            kill,
        })
    }

    /// A worker's attempt started; `false` when its lease is not the worker's any more
    /// (the worker then kills the job).
    pub(crate) async fn attempt_started(
        &self,
        worker: &WorkerRow,
        run_id: &str,
        fence: i64,
        pid: u32,
    ) -> Result<bool, StoreError> {
        let now = now_ms();
        let deadline_ms = match self.store.run(run_id).await? {
            Some(run) => self.deadline_of(&run).await?,
            None => return Ok(false),
        };
        let lease = now + self.lease_ttl_ms();
        let Some(events) = self
            .store
            .remote_started(run_id, (&worker.id, fence), pid, (lease, deadline_ms), now)
            .await?
        else {
            return Ok(false);
        };
        self.publish_all(events);
        Ok(true)
    }

    /// The deadline (ms) of an attempt: its task's or its schedule's, or the default.
    async fn deadline_of(&self, run: &RunRow) -> Result<i64, StoreError> {
        let seconds = match (&run.task_id, &run.schedule_id) {
            (Some(id), _) => self
                .store
                .task(id)
                .await?
                .and_then(|t| serde_json::from_str::<TaskSpec>(&t.spec).ok())
                .and_then(|s| s.deadline),
            (None, Some(id)) => self
                .store
                .schedule(id)
                .await?
                .and_then(|row| serde_json::from_str::<ScheduleSpec>(&row.spec).ok())
                .and_then(|s| s.policies.deadline),
            (None, None) => None,
        }
        .unwrap_or(DEFAULT_DEADLINE_S);
        Ok(i64::try_from(seconds.saturating_mul(1000)).unwrap_or(i64::MAX))
    }

    /// A worker's attempt ended with `outcome` (as its shim recorded it), then its
    /// schedule's follow-up fires, as after a local run. `lost`: the worker cancelled it
    /// after a whole lease without studiod, so unless a person cancelled it meanwhile it
    /// is `worker_lost` (and fires no follow-up, as a lost local job fires none). `false`
    /// when its lease is not the worker's any more: nothing is recorded.
    pub(crate) async fn attempt_finished(
        self: &Arc<Self>,
        worker: &WorkerRow,
        run_id: &str,
        fence: i64,
        (outcome, lost): (&Outcome, bool),
    ) -> Result<bool, StoreError> {
        let reason = self
            .active()
            .get(run_id)
            .and_then(|a| a.cancel_reason.clone());
        let lost = lost && reason.is_none() && outcome.ending == Ending::Cancelled;
        let (status, reason) = if lost {
            (RunStatus::Failed, WORKER_LOST.to_owned())
        } else {
            settle(outcome, reason)
        };
        let mut finish = finish_of(outcome);
        // A worker's word: tails no longer than a shim's own.
        for text in [&mut finish.stdout_tail, &mut finish.stderr_tail]
            .into_iter()
            .flatten()
        {
            keep_end(text, TAIL_BYTES);
        }
        let ended = Ended {
            status,
            reason: &reason,
            finish: &finish,
        };
        let Some(row) = self.record_end(worker, run_id, fence, ended).await? else {
            return Ok(false);
        };
        if !lost && let Some(schedule) = self.schedule_of(&row).await? {
            self.follow_up(&row, &schedule).await;
        }
        Ok(true)
    }

    /// A worker started nothing for its lease (`reason`: `not_allowed` by its own
    /// allow-list, or `spawn_failed`); `false` when the lease is not its own any more.
    pub(crate) async fn attempt_refused(
        &self,
        worker: &WorkerRow,
        run_id: &str,
        fence: i64,
        reason: &str,
        detail: &str,
    ) -> Result<bool, StoreError> {
        let finish = Finish {
            stderr_tail: Some(format!("[studio worker {}] {detail}\n", worker.name)),
            ..Finish::default()
        };
        let ended = Ended {
            status: RunStatus::Failed,
            reason,
            finish: &finish,
        };
        Ok(self
            .record_end(worker, run_id, fence, ended)
            .await?
            .is_some())
    }

    /// Records a worker's attempt's end under its fence: the ended run, or `None` when
    /// superseded.
    async fn record_end(
        &self,
        worker: &WorkerRow,
        run_id: &str,
        fence: i64,
        ended: Ended<'_>,
    ) -> Result<Option<RunRow>, StoreError> {
        let Some((row, events)) = self
            .store
            .remote_finished(run_id, (&worker.id, fence), ended, now_ms())
            .await?
        else {
            return Ok(None);
        };
        self.publish_all(events);
        self.active().remove(run_id);
        self.tasks_changed();
        Ok(Some(row))
    }

    /// Appends a chunk of a worker's attempt's output to the run's log at `offset` (what
    /// the log already holds is skipped, nothing is kept past the log cap); `false` when
    /// its lease is not the worker's any more.
    pub(crate) async fn attempt_log(
        &self,
        worker: &WorkerRow,
        run_id: &str,
        fence: i64,
        (stream, offset): (LogStream, u64),
        data: &[u8],
    ) -> Result<bool, StoreError> {
        if !self.store.holds(run_id, &worker.id, fence).await? {
            return Ok(false);
        }
        let name = match stream {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        };
        let path = self.run_log(run_id, name);
        let cap = self.config.log_cap;
        let data = data.to_vec();
        let written = tokio::task::spawn_blocking(move || append_at(&path, offset, &data, cap))
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r);
        if let Err(e) = written {
            tracing::warn!(run = %run_id, error = %e, "cannot write a worker's log chunk");
        }
        Ok(true)
    }

    /// Revokes worker `id` for `by`: its certificate admits it no more, its open stream
    /// ends, and its running attempts end `worker_lost` (their retry policy decides).
    pub(crate) async fn revoke_worker(
        &self,
        id: &str,
        by: &Actor,
    ) -> Result<WorkerRow, EngineError> {
        let note = Note {
            by,
            kind: Kind::WorkerRevoked,
            object: format!("worker:{id}"),
            schedule_id: None,
            detail: json!({}),
        };
        let Some(worker) = self.store.revoke_worker(id, &note, now_ms()).await? else {
            return match self.store.worker(id).await? {
                Some(worker) => Ok(worker),
                None => Err(EngineError::WorkerNotFound),
            };
        };
        for run in self.store.worker_attempts(id).await? {
            self.lose(&run, "the worker running it was revoked").await?;
        }
        self.work_signal.send_modify(|n| *n += 1);
        Ok(worker)
    }

    /// Ends a remote attempt `worker_lost`; its task's retry policy decides what follows.
    async fn lose(&self, run: &RunRow, why: &str) -> Result<(), StoreError> {
        tracing::warn!(run = %run.id, worker = ?run.worker_id, why, "attempt lost");
        self.fail(
            run,
            RunStatus::Running,
            WORKER_LOST,
            format!("[studio] {why}\n"),
        )
        .await?;
        self.active().remove(&run.id);
        self.tasks_changed();
        Ok(())
    }

    /// The lease reaper: sleeps until the earliest lease of a running remote attempt
    /// ends, and ends the attempts whose lease ran out.
    pub(super) async fn leases_forever(self: Arc<Self>) {
        let stop = self.stop.clone();
        loop {
            let wait = match self.expire_leases().await {
                Ok(Some(at)) => {
                    let ms = u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0);
                    IDLE.min(Duration::from_millis(ms + 1))
                }
                Ok(None) => IDLE,
                Err(error) => {
                    tracing::error!(error = %chain(&error), "lease reaper pass failed");
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                () = self.lease_wake.notified() => {}
                () = tokio::time::sleep(wait) => {}
                () = stop.triggered() => return,
            }
        }
    }

    /// Ends every remote attempt whose lease has run out; when the next lease ends.
    async fn expire_leases(&self) -> Result<Option<i64>, StoreError> {
        let now = now_ms();
        for run_id in self.store.expired_leases(now).await? {
            if let Some((run, events)) = self.store.expire_lease(&run_id, now).await? {
                tracing::warn!(run = %run.id, worker = ?run.worker_id, "lease expired");
                self.publish_all(events);
                self.active().remove(&run.id);
                self.tasks_changed();
            }
        }
        self.store.next_lease_expiry().await
    }

    /// Something a worker may claim changed: the built-in worker and every remote
    /// worker's stream look again, here and (on a shared database) in every other
    /// studiod.
    pub(super) fn tasks_changed(&self) {
        self.work_arrived();
        if self.store.shared_url().is_some() {
            let store = self.store.clone();
            let sender = self.store.member().to_owned();
            tokio::spawn(async move {
                if let Err(error) = store.announce_work(&sender).await {
                    tracing::warn!(error = %crate::error::chain(&error), "cannot announce work");
                }
            });
        }
    }

    /// Work may be claimable: this process's claimers look again.
    pub(super) fn work_arrived(&self) {
        self.task_wake.notify_one();
        self.work_signal.send_modify(|n| *n += 1);
    }

    /// The label sets the queue is served by: the built-in worker's and each enrolled,
    /// unrevoked worker's (whether connected or not: it may come back).
    pub(crate) async fn served_label_sets(&self) -> Result<Vec<Vec<String>>, StoreError> {
        let mut sets = vec![self.local_labels().to_vec()];
        for worker in self.store.workers().await? {
            if worker.revoked_at_ms.is_none() {
                sets.push(worker.serving());
            }
        }
        Ok(sets)
    }
}

/// The longest output tail kept from a worker's report (a shim keeps 64 KiB).
const TAIL_BYTES: usize = 64 * 1024;

/// Cuts `text` to its last `max` bytes, on a character boundary.
fn keep_end(text: &mut String, max: usize) {
    if text.len() > max {
        let mut start = text.len() - max;
        while !text.is_char_boundary(start) {
            start += 1;
        }
        text.drain(..start);
    }
}

/// Labels sorted, deduplicated and joined by `,`.
pub(crate) fn labels_key(labels: &[String]) -> String {
    let mut labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    labels.sort_unstable();
    labels.dedup();
    labels.join(",")
}

/// Writes `data`, which starts at `offset` of the stream, to the end of the log at
/// `path`: the part the log already has is skipped, a chunk past its end (a gap) is
/// refused, and nothing goes past `cap` bytes.
fn append_at(path: &std::path::Path, offset: u64, data: &[u8], cap: u64) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let len = file.seek(SeekFrom::End(0))?;
    if offset > len {
        return Err(std::io::Error::other(format!(
            "a chunk at {offset} would leave a gap after {len} bytes"
        )));
    }
    let skip = usize::try_from(len - offset).unwrap_or(usize::MAX);
    let room = usize::try_from(cap.saturating_sub(len)).unwrap_or(usize::MAX);
    let fresh = data.get(skip..).unwrap_or_default();
    file.write_all(&fresh[..fresh.len().min(room)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_chunk_is_appended_once_and_within_the_cap() {
        let dir = std::env::temp_dir().join(format!("studio-log-{}", uuid::Uuid::now_v7()));
        let path = dir.join("stdout.log");
        append_at(&path, 0, b"hello ", 100).expect("first");
        // Sent again after a reconnect, then the rest.
        append_at(&path, 0, b"hello ", 100).expect("again");
        append_at(&path, 3, b"lo world", 100).expect("overlap");
        assert_eq!(std::fs::read(&path).expect("log"), b"hello world");
        assert!(append_at(&path, 50, b"gap", 100).is_err());
        append_at(&path, 11, &[b'x'; 200], 20).expect("capped");
        assert_eq!(std::fs::read(&path).expect("log").len(), 20);
        std::fs::remove_dir_all(dir).expect("clean");
    }

    #[test]
    fn a_reported_tail_keeps_its_end_on_a_character_boundary() {
        let mut text = format!("{}é!", "x".repeat(10));
        keep_end(&mut text, 2);
        assert_eq!(text, "!");
        let mut short = "ok".to_owned();
        keep_end(&mut short, 10);
        assert_eq!(short, "ok");
    }

    #[test]
    fn a_labels_key_is_sorted_and_unique() {
        let labels = ["gpu", "linux", "gpu"].map(String::from);
        assert_eq!(labels_key(&labels), "gpu,linux");
        assert_eq!(labels_key(&[]), "");
    }
}
