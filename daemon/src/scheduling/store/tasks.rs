//! The `tasks` table (docs/TASKS.md): a submission with its idempotency and its waiter
//! cap, the candidates a worker may claim and the claim itself (the task leased and its
//! attempt's run written with a fresh fencing token, in one transaction), a task
//! following its latest attempt's status, a queued task's cancel, and the reads. Every
//! change writes its event (`event: task`) in its transaction.

use serde_json::Value;
use sqlx::{Any, Row, Transaction, any::AnyRow};
use studio_api::{TaskEvent, TaskStatus};
use studio_schedule::{RetryOn, RetryPolicy, ScheduleSpec, TaskSpec};

use super::{
    SchedStore,
    approvals::{self, Consumed},
    audit::{self, Note},
    dialect,
    events::{append_event, run_event},
    is_unique_violation,
    runs::{Attempt, NewRun, insert_run, record_transition, run_by_id},
    statement::Statement,
    workers::BUILTIN,
};
use crate::scheduling::approval::NewApproval;
use crate::{
    scheduling::model::{EventRow, RunKind, RunRow, RunStatus},
    store::StoreError,
};

/// How many tasks may wait per running holder of a concurrency key, times its limit
/// (the seeds' waiter cap), before a submission is refused `429 queue_full`.
pub(crate) const WAITER_CAP_MULTIPLIER: i64 = 10;
/// The most queued tasks a claim looks past in one priority level of one label set for
/// one whose concurrency key is free (a latency bound: a later claim resumes the order).
const CLAIM_SCAN: i64 = 64;

pub(super) const TASK_COLUMNS: &str = "id, idempotency_key, spec, spec_sha256, labels_key, priority, \
    concurrency_key, concurrency_limit, status, reason, attempts, max_attempts, \
    next_attempt_at_ms, last_run_id, submitted_by, approval_id, created_at_ms, updated_at_ms, \
    finished_at_ms";

/// One task as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskRow {
    pub id: String,
    pub idempotency_key: Option<String>,
    /// The submitted spec, canonical JSON.
    pub spec: String,
    pub spec_sha256: String,
    pub labels_key: String,
    pub priority: i64,
    pub concurrency_key: Option<String>,
    pub concurrency_limit: Option<i64>,
    pub status: String,
    pub reason: Option<String>,
    pub attempts: i64,
    pub max_attempts: i64,
    pub next_attempt_at_ms: Option<i64>,
    pub last_run_id: Option<String>,
    pub submitted_by: Option<String>,
    pub approval_id: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub finished_at_ms: Option<i64>,
}

impl TaskRow {
    pub(crate) fn status(&self) -> Option<TaskStatus> {
        TaskStatus::parse(&self.status)
    }
}

fn task_from(r: &AnyRow) -> Result<TaskRow, sqlx::Error> {
    Ok(TaskRow {
        id: r.try_get("id")?,
        idempotency_key: r.try_get("idempotency_key")?,
        spec: r.try_get("spec")?,
        spec_sha256: r.try_get("spec_sha256")?,
        labels_key: r.try_get("labels_key")?,
        priority: r.try_get("priority")?,
        concurrency_key: r.try_get("concurrency_key")?,
        concurrency_limit: r.try_get("concurrency_limit")?,
        status: r.try_get("status")?,
        reason: r.try_get("reason")?,
        attempts: r.try_get("attempts")?,
        max_attempts: r.try_get("max_attempts")?,
        next_attempt_at_ms: r.try_get("next_attempt_at_ms")?,
        last_run_id: r.try_get("last_run_id")?,
        submitted_by: r.try_get("submitted_by")?,
        approval_id: r.try_get("approval_id")?,
        created_at_ms: r.try_get("created_at_ms")?,
        updated_at_ms: r.try_get("updated_at_ms")?,
        finished_at_ms: r.try_get("finished_at_ms")?,
    })
}

/// The event of a task row just written in `tx`.
pub(super) async fn task_event_in(
    tx: &mut Transaction<'_, Any>,
    row: &AnyRow,
    now_ms: i64,
) -> Result<EventRow, sqlx::Error> {
    let task = task_from(row)?;
    append_event(tx, "task", &task_event(&task), now_ms).await
}

fn task_event(t: &TaskRow) -> Value {
    serde_json::to_value(TaskEvent {
        id: t.id.clone(),
        status: t.status().unwrap_or(TaskStatus::Failed),
        reason: t.reason.clone(),
        attempts: t.attempts,
        last_run_id: t.last_run_id.clone(),
    })
    .unwrap_or(Value::Null)
}

/// A task about to be submitted.
#[derive(Debug, Clone)]
pub(crate) struct NewTask {
    pub id: String,
    pub idempotency_key: Option<String>,
    pub spec: String,
    pub spec_sha256: String,
    pub labels_key: String,
    pub priority: i64,
    pub concurrency: Option<(String, i64)>,
    pub submitted_by: String,
    /// The request a person must grant before the task is queued.
    pub approval: Option<NewApproval>,
}

/// What a submission did.
#[derive(Debug)]
pub(crate) enum Submitted {
    Created(Box<TaskRow>, Vec<EventRow>),
    /// The idempotency key named this task, with the same spec.
    Existing(Box<TaskRow>),
    /// The idempotency key names this task, with another spec.
    Conflict(Box<TaskRow>),
    /// The concurrency key's queue is over its waiter cap.
    QueueFull,
}

/// A queued task a worker may claim: the head of one priority level of one label set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub id: String,
    pub priority: i64,
}

/// Whether a worker with `labels` serves tasks that need `key`'s labels.
pub(crate) fn serves(labels: &[String], key: &str) -> bool {
    key.split(',')
        .filter(|l| !l.is_empty())
        .all(|needed| labels.iter().any(|l| l == needed))
}

async fn task_in(tx: &mut Transaction<'_, Any>, id: &str) -> Result<Option<TaskRow>, sqlx::Error> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1"
    )))
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?;
    row.as_ref().map(task_from).transpose()
}

async fn by_key(tx: &mut Transaction<'_, Any>, key: &str) -> Result<Option<TaskRow>, sqlx::Error> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE idempotency_key = $1"
    )))
    .bind(key)
    .fetch_optional(&mut **tx)
    .await?;
    row.as_ref().map(task_from).transpose()
}

/// The reasons a run ends `failed` with when whatever ran it went away (its shim, its
/// studiod, its machine, its worker's lease), not the job itself.
const WORKER_LOST: [&str; 6] = [
    "worker_lost",
    "shim_lost",
    "daemon_lost",
    "host_rebooted",
    "stale",
    "launch_uncertain",
];

/// What `retry.on` calls an attempt's end, if it names one.
fn outcome(run: &RunRow) -> Option<RetryOn> {
    match run.status()? {
        RunStatus::TimedOut => Some(RetryOn::TimedOut),
        RunStatus::Failed if WORKER_LOST.contains(&run.reason.as_deref().unwrap_or_default()) => {
            Some(RetryOn::WorkerLost)
        }
        RunStatus::Failed => Some(RetryOn::Failed),
        _ => None,
    }
}

/// When the next attempt is due after `run`, the `attempts`-th, ended, if `retry` asks
/// for one: a random instant up to the backoff's ceiling (full jitter).
fn next_attempt(retry: &RetryPolicy, attempts: i64, run: &RunRow, now_ms: i64) -> Option<i64> {
    let ended = outcome(run)?;
    if !retry.on.contains(&ended) || attempts >= i64::from(retry.max_attempts) {
        return None;
    }
    if ended == RetryOn::Failed
        && !retry.exit_codes.is_empty()
        && !run.exit_code.is_some_and(|c| retry.exit_codes.contains(&c))
    {
        return None;
    }
    let n = u32::try_from(attempts).unwrap_or(u32::MAX);
    let ceiling = u64::try_from(retry.backoff.ceiling_ms(n)).unwrap_or(0);
    let draw = u64::from_le_bytes(studio_contract::secret::random_bytes::<8>());
    let wait = i64::try_from(draw % (ceiling + 1)).unwrap_or(0);
    Some(now_ms.saturating_add(wait))
}

/// A task follows its latest attempt: `running` while the attempt runs, then the
/// attempt's end — or `retry_wait` until its next attempt when its retry policy asks for
/// one. An older attempt (replaced) moves nothing. Called by every status change of a
/// run, in its transaction.
pub(super) async fn follow(
    tx: &mut Transaction<'_, Any>,
    run: &RunRow,
    now_ms: i64,
    events: &mut Vec<EventRow>,
) -> Result<(), sqlx::Error> {
    let Some(task_id) = &run.task_id else {
        return Ok(());
    };
    let Some(status) = run.status() else {
        return Ok(());
    };
    let Some(task) = task_in(tx, task_id).await? else {
        return Ok(());
    };
    if task.last_run_id.as_deref() != Some(run.id.as_str()) {
        return Ok(());
    }
    let mut to = match status {
        // Granted: the task waits for a worker, with this run as its next attempt.
        RunStatus::Queued if run.worker_id.is_none() => TaskStatus::Queued,
        RunStatus::Queued => TaskStatus::Leased,
        RunStatus::Running => TaskStatus::Running,
        RunStatus::Completed => TaskStatus::Completed,
        RunStatus::TimedOut => TaskStatus::TimedOut,
        RunStatus::Cancelled => TaskStatus::Cancelled,
        RunStatus::AwaitingApproval => TaskStatus::AwaitingApproval,
        RunStatus::Denied => TaskStatus::Denied,
        RunStatus::Expired => TaskStatus::Expired,
        RunStatus::Failed | RunStatus::Skipped => TaskStatus::Failed,
    };
    let mut next = None;
    if to.is_terminal()
        && let Ok(spec) = serde_json::from_str::<TaskSpec>(&task.spec)
        && let Some(retry) = &spec.retry
        && let Some(at) = next_attempt(retry, task.attempts, run, now_ms)
    {
        to = TaskStatus::RetryWait;
        next = Some(at);
    }
    if task.status() == Some(to) {
        return Ok(());
    }
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE tasks SET status = $1, reason = $2, updated_at_ms = $3, \
         next_attempt_at_ms = $4, \
         finished_at_ms = CASE WHEN $5 THEN $3 ELSE finished_at_ms END \
         WHERE id = $6 AND last_run_id = $7 RETURNING {TASK_COLUMNS}"
    )))
    .bind(to.as_str())
    .bind(&run.reason)
    .bind(now_ms)
    .bind(next)
    .bind(to.is_terminal())
    .bind(task_id)
    .bind(&run.id)
    .fetch_optional(&mut **tx)
    .await?;
    if let Some(row) = row {
        let task = task_from(&row)?;
        events.push(append_event(tx, "task", &task_event(&task), now_ms).await?);
    }
    Ok(())
}

/// When the next attempt of a schedule's occurrence is due after `run` ended, if the
/// schedule's `policies.retry` asks for one; recorded on the run. A follow-up (`chain`)
/// and a task's attempt are not a schedule's occurrence.
pub(super) async fn schedule_retry(
    tx: &mut Transaction<'_, Any>,
    run: &RunRow,
    now_ms: i64,
) -> Result<Option<i64>, sqlx::Error> {
    let Some(schedule_id) = &run.schedule_id else {
        return Ok(None);
    };
    if run.task_id.is_some() || run.kind == RunKind::Chain.as_str() || outcome(run).is_none() {
        return Ok(None);
    }
    let spec: Option<String> = sqlx::query_scalar("SELECT spec FROM schedules WHERE id = $1")
        .bind(schedule_id)
        .fetch_optional(&mut **tx)
        .await?;
    let Some(retry) = spec
        .and_then(|s| serde_json::from_str::<ScheduleSpec>(&s).ok())
        .and_then(|s| s.policies.retry)
    else {
        return Ok(None);
    };
    let Some(at) = next_attempt(&retry, run.attempt, run, now_ms) else {
        return Ok(None);
    };
    sqlx::query("UPDATE runs SET retry_at_ms = $1 WHERE id = $2")
        .bind(at)
        .bind(&run.id)
        .execute(&mut **tx)
        .await?;
    Ok(Some(at))
}

/// The next fencing token: every lease takes a larger one than any before.
pub(super) async fn next_fence(tx: &mut Transaction<'_, Any>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("UPDATE fences SET last = last + 1 RETURNING last")
        .fetch_one(&mut **tx)
        .await
}

/// Puts run `run_id` under `worker`'s lease until `until_ms`, with the next fencing
/// token; the token.
pub(super) async fn lease_run(
    tx: &mut Transaction<'_, Any>,
    run_id: &str,
    worker: &str,
    until_ms: i64,
) -> Result<i64, sqlx::Error> {
    let fence = next_fence(tx).await?;
    sqlx::query(
        "UPDATE runs SET worker_id = $1, fence = $2, lease_expires_at_ms = $3 WHERE id = $4",
    )
    .bind(worker)
    .bind(fence)
    .bind(until_ms)
    .bind(run_id)
    .execute(&mut **tx)
    .await?;
    Ok(fence)
}

/// A replacement of a task's never-launched attempt becomes its latest.
pub(super) async fn replace_attempt(
    tx: &mut Transaction<'_, Any>,
    task_id: &str,
    old_run: &str,
    new_run: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE tasks SET last_run_id = $1 WHERE id = $2 AND last_run_id = $3")
        .bind(new_run)
        .bind(task_id)
        .bind(old_run)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The distinct label sets of the queued tasks: a skip scan of `tasks_queued`, one seek
/// per set (named, or the planner prefers `tasks_by_status` and reads every queued row).
const QUEUED_LABEL_SETS: &str = "WITH RECURSIVE k(key) AS ( \
    SELECT MIN(labels_key) FROM tasks INDEXED BY tasks_queued WHERE status = 'queued' \
    UNION ALL \
    SELECT (SELECT MIN(labels_key) FROM tasks INDEXED BY tasks_queued \
            WHERE status = 'queued' AND labels_key > k.key) \
    FROM k WHERE k.key IS NOT NULL) \
    SELECT key FROM k WHERE key IS NOT NULL";

/// The oldest queued task of one label set (`?1`) and priority (`?2`) among its first
/// `?3` whose concurrency key is below its limit: one seek of `tasks_queued`.
const LEVEL_HEAD: &str = "SELECT t.id, t.priority FROM (SELECT id, priority, concurrency_key, \
    concurrency_limit, created_at_ms FROM tasks INDEXED BY tasks_queued \
    WHERE status = 'queued' AND labels_key = $1 AND priority = $2 \
    ORDER BY created_at_ms, id LIMIT $3) t \
    WHERE t.concurrency_key IS NULL OR (SELECT COUNT(*) FROM tasks h \
    WHERE h.concurrency_key = t.concurrency_key \
    AND h.status IN ('leased', 'running')) < t.concurrency_limit \
    ORDER BY t.created_at_ms, t.id LIMIT 1";

/// Filters of the tasks list; newest first, before the cursor `(created_at_ms, id)`.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskFilter {
    pub statuses: Vec<TaskStatus>,
    /// Tasks that need this label.
    pub label: Option<String>,
    pub before: Option<(i64, String)>,
    pub limit: i64,
}

impl SchedStore {
    /// Submits a task: the existing one for a known idempotency key (or a conflict when
    /// its spec differs), a refusal when its concurrency key's queue is full, else the
    /// new `queued` row with its audit row and event, in one transaction.
    pub(in crate::scheduling) async fn submit_task(
        &self,
        new: &NewTask,
        note: &Note<'_>,
        now_ms: i64,
    ) -> Result<Submitted, StoreError> {
        let _timed = self.timed();
        let mut tx = self.writer.begin().await?;
        if let Some(key) = &new.idempotency_key
            && let Some(found) = by_key(&mut tx, key).await?
        {
            return Ok(same_or_conflict(found, new));
        }
        if let Some((key, limit)) = &new.concurrency {
            let (holders, waiters): (i64, i64) = sqlx::query_as(
                "SELECT COUNT(*) FILTER (WHERE status IN ('leased', 'running')), \
                 COUNT(*) FILTER (WHERE status IN ('queued', 'retry_wait')) \
                 FROM tasks WHERE concurrency_key = $1",
            )
            .bind(key)
            .fetch_one(&mut *tx)
            .await?;
            if holders > 0 && waiters >= limit * WAITER_CAP_MULTIPLIER {
                return Ok(Submitted::QueueFull);
            }
        }
        let inserted = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO tasks (id, idempotency_key, spec, spec_sha256, labels_key, priority, \
             concurrency_key, concurrency_limit, status, submitted_by, created_at_ms, \
             updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             RETURNING {TASK_COLUMNS}"
        )))
        .bind(&new.id)
        .bind(&new.idempotency_key)
        .bind(&new.spec)
        .bind(&new.spec_sha256)
        .bind(&new.labels_key)
        .bind(new.priority)
        .bind(new.concurrency.as_ref().map(|(k, _)| k))
        .bind(new.concurrency.as_ref().map(|(_, l)| *l))
        .bind(if new.approval.is_some() {
            "awaiting_approval"
        } else {
            "queued"
        })
        .bind(&new.submitted_by)
        .bind(now_ms)
        .bind(now_ms)
        .fetch_one(&mut *tx)
        .await;
        let task = match inserted {
            Ok(row) => task_from(&row)?,
            // Another submission with the key committed first.
            Err(e) if is_unique_violation(&e) => {
                drop(tx);
                let mut tx = self.writer.begin().await?;
                let key = new.idempotency_key.as_deref().unwrap_or_default();
                return match by_key(&mut tx, key).await? {
                    Some(found) => Ok(same_or_conflict(found, new)),
                    None => Err(StoreError::Sqlx(e)),
                };
            }
            Err(e) => return Err(e.into()),
        };
        audit::append(&mut tx, note, now_ms).await?;
        let mut events = Vec::new();
        let task = match &new.approval {
            Some(request) => {
                let (task, raised) = self.await_approval(&mut tx, task, request, now_ms).await?;
                events.extend(raised);
                task
            }
            None => task,
        };
        events.insert(
            0,
            append_event(&mut tx, "task", &task_event(&task), now_ms).await?,
        );
        tx.commit().await?;
        Ok(Submitted::Created(Box::new(task), events))
    }

    /// The first attempt of a task that needs a grant: a run `awaiting_approval` (no
    /// worker yet) and its request, bound to what will run. A grant queues the task with
    /// this run, which the claim then takes over.
    async fn await_approval(
        &self,
        tx: &mut Transaction<'_, Any>,
        task: TaskRow,
        request: &NewApproval,
        now_ms: i64,
    ) -> Result<(TaskRow, Vec<EventRow>), StoreError> {
        let spec: Value = serde_json::from_str(&task.spec).unwrap_or(Value::Null);
        let run = NewRun {
            id: uuid::Uuid::now_v7().to_string(),
            schedule_id: None,
            occurrence_key: None,
            kind: RunKind::Task,
            status: RunStatus::AwaitingApproval,
            reason: None,
            action: spec["action"].to_string(),
            scheduled_at_ms: None,
            counted: false,
            chain_parent_id: None,
            chain_depth: 0,
            replaces_run_id: None,
            follow_ups: None,
            attempt: 1,
            approval: None,
            approval_id: None,
            task: None,
        };
        let mut row = insert_run(tx, &run, &self.member, now_ms).await?;
        sqlx::query("UPDATE runs SET task_id = $1 WHERE id = $2")
            .bind(&task.id)
            .bind(&row.id)
            .execute(&mut **tx)
            .await?;
        row.task_id = Some(task.id.clone());
        let (approval, raised) =
            approvals::raise(tx, &self.evidence_key, &row, request, now_ms).await?;
        row.approval_id = Some(approval.id);
        let updated = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE tasks SET last_run_id = $1 WHERE id = $2 RETURNING {TASK_COLUMNS}"
        )))
        .bind(&row.id)
        .bind(&task.id)
        .fetch_one(&mut **tx)
        .await?;
        let task = task_from(&updated)?;
        super::notify::enqueue_in(tx, &row, now_ms).await?;
        let events = vec![
            raised,
            append_event(tx, "run", &run_event(&row), now_ms).await?,
        ];
        Ok((task, events))
    }

    /// The head of every priority level of every label set `labels` serves, skipping
    /// tasks whose concurrency key is at its limit. Each is an index seek: the cost
    /// follows how many label sets and levels are queued, not how many tasks.
    pub(crate) async fn claim_candidates(
        &self,
        labels: &[String],
    ) -> Result<Vec<Candidate>, StoreError> {
        // The distinct label sets queued, one seek each (a skip scan of `tasks_queued`).
        let keys: Vec<String> = sqlx::query_scalar(dialect::adapt(self.dialect, QUEUED_LABEL_SETS))
            .fetch_all(&self.pool)
            .await?;
        let mut out = Vec::new();
        for key in keys.iter().filter(|k| serves(labels, k)) {
            for priority in (0..=9).rev() {
                let heads = sqlx::query(dialect::adapt(self.dialect, LEVEL_HEAD))
                    .bind(key)
                    .bind(priority)
                    .bind(CLAIM_SCAN)
                    .fetch_optional(&self.pool);
                if let Some(row) = heads.await? {
                    out.push(Candidate {
                        id: row.try_get("id")?,
                        priority: row.try_get("priority")?,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Claims task `id` for `worker` (compare-and-set from `queued`): the task `running`
    /// when the built-in worker claims (it starts at once) or `leased` until a remote
    /// worker reports the start, its attempt's run `running` with a fresh fencing token
    /// and a lease of `lease_ms`, their events. `None` when another claim took it first.
    pub(in crate::scheduling) async fn claim_task(
        &self,
        id: &str,
        worker: &str,
        lease_ms: i64,
        now_ms: i64,
    ) -> Result<Option<(TaskRow, RunRow, Vec<EventRow>)>, StoreError> {
        let mut tx = self.writer.begin().await?;
        // On PostgreSQL several studiod claim at once: the row is locked for this claim,
        // and one another claimer holds is skipped at once rather than waited for (its
        // claim will take it; the caller looks at its next candidate). SQLite's one
        // writer orders claims already.
        if self.dialect == studio_store::Dialect::Postgres {
            let free: Option<i64> = sqlx::query_scalar(
                "SELECT 1 FROM tasks WHERE id = $1 AND status = 'queued' \
                 FOR UPDATE SKIP LOCKED",
            )
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
            if free.is_none() {
                return Ok(None);
            }
        }
        // A granted task's first attempt is waiting already: the claim takes it over.
        let granted: Option<String> = sqlx::query_scalar(
            "SELECT r.id FROM tasks t JOIN runs r ON r.id = t.last_run_id \
             WHERE t.id = $1 AND t.status = 'queued' AND r.status = 'queued' \
             AND r.worker_id IS NULL",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(run_id) = granted {
            return self
                .take_over(tx, id, &run_id, (worker, lease_ms), now_ms)
                .await;
        }
        let run_id = uuid::Uuid::now_v7().to_string();
        let claimed = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE tasks SET status = $1, attempts = attempts + 1, last_run_id = $2, \
             reason = NULL, updated_at_ms = $3 WHERE id = $4 AND status = 'queued' \
             RETURNING {TASK_COLUMNS}"
        )))
        .bind(if worker == BUILTIN {
            "running"
        } else {
            "leased"
        })
        .bind(&run_id)
        .bind(now_ms)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(task) = claimed.as_ref().map(task_from).transpose()? else {
            return Ok(None);
        };
        let fence = next_fence(&mut tx).await?;
        let spec: Value = serde_json::from_str(&task.spec).unwrap_or(Value::Null);
        let run = NewRun {
            id: run_id,
            schedule_id: None,
            occurrence_key: None,
            kind: RunKind::Task,
            status: RunStatus::Running,
            reason: None,
            action: spec["action"].to_string(),
            scheduled_at_ms: None,
            counted: false,
            chain_parent_id: None,
            chain_depth: 0,
            replaces_run_id: None,
            follow_ups: None,
            attempt: task.attempts,
            approval: None,
            approval_id: None,
            task: Some(Attempt {
                task_id: task.id.clone(),
                worker_id: worker.to_owned(),
                fence,
                lease_expires_at_ms: now_ms.saturating_add(lease_ms),
            }),
        };
        let run = insert_run(&mut tx, &run, &self.member, now_ms).await?;
        let events = vec![
            append_event(&mut tx, "task", &task_event(&task), now_ms).await?,
            append_event(&mut tx, "run", &run_event(&run), now_ms).await?,
        ];
        tx.commit().await?;
        Ok(Some((task, run, events)))
    }

    /// The claim of a granted task: its waiting run becomes the attempt (`running`, with
    /// the worker's lease and a fresh fencing token) and the grant is consumed, in `tx`.
    async fn take_over(
        &self,
        mut tx: Transaction<'_, Any>,
        id: &str,
        run_id: &str,
        (worker, lease_ms): (&str, i64),
        now_ms: i64,
    ) -> Result<Option<(TaskRow, RunRow, Vec<EventRow>)>, StoreError> {
        let claimed = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE tasks SET status = $1, attempts = attempts + 1, reason = NULL, \
             updated_at_ms = $2 WHERE id = $3 AND status = 'queued' RETURNING {TASK_COLUMNS}"
        )))
        .bind(if worker == BUILTIN {
            "running"
        } else {
            "leased"
        })
        .bind(now_ms)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(task) = claimed.as_ref().map(task_from).transpose()? else {
            return Ok(None);
        };
        let (consumed, mut events) =
            approvals::consume_in(&mut tx, &self.evidence_key, run_id, now_ms).await?;
        if matches!(consumed, Consumed::Refused) {
            // Not granted after all: nothing runs (the caller looks at the next task).
            return Ok(None);
        }
        let moved =
            sqlx::query("UPDATE runs SET status = 'running', member_id = $1 WHERE id = $2 AND status = 'queued'")
                .bind(&*self.member)
                .bind(run_id)
                .execute(&mut *tx)
                .await?;
        if moved.rows_affected() != 1 {
            return Ok(None);
        }
        lease_run(&mut tx, run_id, worker, now_ms.saturating_add(lease_ms)).await?;
        record_transition(
            &mut tx,
            run_id,
            Some(RunStatus::Queued),
            RunStatus::Running,
            None,
            now_ms,
        )
        .await?;
        let Some(run) = run_by_id(&mut tx, run_id).await? else {
            return Ok(None);
        };
        events.push(append_event(&mut tx, "task", &task_event(&task), now_ms).await?);
        events.push(append_event(&mut tx, "run", &run_event(&run), now_ms).await?);
        tx.commit().await?;
        Ok(Some((task, run, events)))
    }

    /// Queues again the tasks whose next attempt is due; their events.
    pub(in crate::scheduling) async fn release_retries(
        &self,
        now_ms: i64,
    ) -> Result<Vec<EventRow>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE tasks SET status = 'queued', next_attempt_at_ms = NULL, updated_at_ms = $1 \
             WHERE status = 'retry_wait' AND next_attempt_at_ms <= $1 RETURNING {TASK_COLUMNS}"
        )))
        .bind(now_ms)
        .fetch_all(&mut *tx)
        .await?;
        let mut events = Vec::with_capacity(rows.len());
        for row in &rows {
            let task = task_from(row)?;
            events.push(append_event(&mut tx, "task", &task_event(&task), now_ms).await?);
        }
        tx.commit().await?;
        Ok(events)
    }

    /// When the next attempt of a task waiting to retry is due.
    pub(crate) async fn next_retry(&self) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT MIN(next_attempt_at_ms) FROM tasks WHERE status = 'retry_wait'",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// Queues an ended task (failed, timed out, cancelled) for another attempt now, or
    /// one waiting to retry at once, with the audit row of who asked; `None` when it is
    /// neither.
    pub(in crate::scheduling) async fn retry_task(
        &self,
        id: &str,
        note: &Note<'_>,
        now_ms: i64,
    ) -> Result<Option<(TaskRow, EventRow)>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE tasks SET status = 'queued', next_attempt_at_ms = NULL, reason = NULL, \
             finished_at_ms = NULL, updated_at_ms = $1 WHERE id = $2 \
             AND status IN ('failed', 'timed_out', 'cancelled', 'retry_wait') \
             RETURNING {TASK_COLUMNS}"
        )))
        .bind(now_ms)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(task) = row.as_ref().map(task_from).transpose()? else {
            return Ok(None);
        };
        audit::append(&mut tx, note, now_ms).await?;
        let event = append_event(&mut tx, "task", &task_event(&task), now_ms).await?;
        tx.commit().await?;
        Ok(Some((task, event)))
    }

    /// Cancels a task that no attempt holds (`queued`, `retry_wait`), with the audit row
    /// of who asked; `None` when it is neither.
    pub(in crate::scheduling) async fn cancel_queued_task(
        &self,
        id: &str,
        note: &Note<'_>,
        now_ms: i64,
    ) -> Result<Option<(TaskRow, EventRow)>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE tasks SET status = 'cancelled', reason = 'cancelled_by_user', \
             next_attempt_at_ms = NULL, updated_at_ms = $1, finished_at_ms = $1 \
             WHERE id = $2 AND status IN ('queued', 'retry_wait') \
             RETURNING {TASK_COLUMNS}"
        )))
        .bind(now_ms)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(task) = row.as_ref().map(task_from).transpose()? else {
            return Ok(None);
        };
        audit::append(&mut tx, note, now_ms).await?;
        let event = append_event(&mut tx, "task", &task_event(&task), now_ms).await?;
        tx.commit().await?;
        Ok(Some((task, event)))
    }

    pub(crate) async fn task(&self, id: &str) -> Result<Option<TaskRow>, StoreError> {
        let mut tx = self.pool.begin().await?;
        Ok(task_in(&mut tx, id).await?)
    }

    /// Tasks newest first, filtered, after the cursor.
    pub(crate) async fn tasks(&self, f: &TaskFilter) -> Result<Vec<TaskRow>, StoreError> {
        let mut sql = Statement::new(format!("SELECT {TASK_COLUMNS} FROM tasks WHERE TRUE"));
        if !f.statuses.is_empty() {
            let words: Vec<&str> = f.statuses.iter().map(|s| s.as_str()).collect();
            sql.push(" AND status IN (SELECT value FROM json_each(?))")
                .bind(serde_json::to_string(&words).unwrap_or_default());
        }
        if let Some(label) = &f.label {
            sql.push(" AND instr(',' || labels_key || ',', ',' || ? || ',') > 0")
                .bind(label.clone());
        }
        if let Some((at, id)) = &f.before {
            sql.push(" AND (created_at_ms < ? OR (created_at_ms = ? AND id < ?))")
                .bind(*at)
                .bind(*at)
                .bind(id.clone());
        }
        sql.push(" ORDER BY created_at_ms DESC, id DESC LIMIT ?")
            .bind(f.limit);
        let rows = sql.query(self.dialect)?.fetch_all(&self.pool).await?;
        Ok(rows.iter().map(task_from).collect::<Result<_, _>>()?)
    }

    /// The query plans of a claim's reads (for the test that holds them to index seeks).
    #[cfg(test)]
    pub(crate) async fn claim_plan(&self) -> Result<String, StoreError> {
        let mut details = Vec::new();
        for sql in [QUEUED_LABEL_SETS, LEVEL_HEAD] {
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                .bind("linux")
                .bind(5)
                .bind(CLAIM_SCAN)
                .fetch_all(&self.pool)
                .await?;
            for r in &rows {
                details.push(r.try_get::<String, _>("detail")?);
            }
        }
        Ok(details.join("; "))
    }

    /// How many tasks run and how many wait: two ranges of `tasks_by_status`.
    pub(crate) async fn task_census(&self) -> Result<(i64, i64), StoreError> {
        let running: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM tasks WHERE status = 'running'")
                .fetch_one(&self.pool)
                .await?;
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM tasks WHERE status IN ('queued', 'leased', 'retry_wait')",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((running, waiting))
    }

    /// The attempts of a task, in order.
    pub(crate) async fn task_attempts(&self, task_id: &str) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM runs WHERE task_id = $1 ORDER BY attempt, created_at_ms",
        )
        .bind(task_id)
        .fetch_all(&self.pool)
        .await?)
    }
}

fn same_or_conflict(found: TaskRow, new: &NewTask) -> Submitted {
    if found.spec_sha256 == new.spec_sha256 {
        Submitted::Existing(Box::new(found))
    } else {
        Submitted::Conflict(Box::new(found))
    }
}
