//! Remote workers (docs/TASKS.md, "Workers"): one-time join tokens (digests only), the
//! enrolled workers bound to their certificates, and the fenced writes of an attempt a
//! worker holds: its lease's renewal, its start and its end. Each of these checks, in the
//! statement that writes, that the run is still running under that worker and that
//! fencing token; a superseded report writes nothing.

use serde_json::json;
use sqlx::{Any, Row, Transaction, any::AnyRow};

use super::{
    SchedStore,
    audit::{self, Note},
    dialect,
    events::{append_event, run_event},
    runs::{Finish, Step, run_by_id, step_in},
    tasks::{lease_run, task_event_in},
};
use crate::{
    scheduling::model::{EventRow, RunRow, RunStatus},
    store::StoreError,
};

const WORKER_COLUMNS: &str = "id, name, labels, offered, capacity, version, cert_sha256, \
    cert_serial, cert_not_after_ms, enrolled_at_ms, last_seen_at_ms, revoked_at_ms";

/// Whether a run is still running under a worker with a fence (`id`, `worker`, `fence`).
const HELD: &str =
    "SELECT 1 FROM runs WHERE id = $1 AND worker_id = $2 AND fence = $3 AND status = 'running'";

/// The built-in worker's id in `runs.worker_id` (its attempts are followed by pidfd and
/// have no lease to renew).
pub(crate) const BUILTIN: &str = "builtin";

/// One enrolled worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerRow {
    pub id: String,
    pub name: String,
    /// The labels its join token granted, sorted and joined by `,`.
    pub labels: String,
    /// What it offered at its last `Register` (a subset of `labels`).
    pub offered: Option<String>,
    pub capacity: i64,
    pub version: Option<String>,
    pub cert_sha256: String,
    pub cert_serial: String,
    pub cert_not_after_ms: i64,
    pub enrolled_at_ms: i64,
    pub last_seen_at_ms: Option<i64>,
    pub revoked_at_ms: Option<i64>,
}

impl WorkerRow {
    /// The labels it serves now: what it offered, or else what it was granted.
    pub(crate) fn serving(&self) -> Vec<String> {
        split(self.offered.as_deref().unwrap_or(&self.labels))
    }
}

/// A labels key (`a,b`) as a list.
pub(crate) fn split(key: &str) -> Vec<String> {
    key.split(',')
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn worker_from(r: &AnyRow) -> Result<WorkerRow, sqlx::Error> {
    Ok(WorkerRow {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        labels: r.try_get("labels")?,
        offered: r.try_get("offered")?,
        capacity: r.try_get("capacity")?,
        version: r.try_get("version")?,
        cert_sha256: r.try_get("cert_sha256")?,
        cert_serial: r.try_get("cert_serial")?,
        cert_not_after_ms: r.try_get("cert_not_after_ms")?,
        enrolled_at_ms: r.try_get("enrolled_at_ms")?,
        last_seen_at_ms: r.try_get("last_seen_at_ms")?,
        revoked_at_ms: r.try_get("revoked_at_ms")?,
    })
}

/// A worker about to be enrolled with its issued certificate.
#[derive(Debug, Clone)]
pub(crate) struct NewWorker {
    pub id: String,
    pub name: String,
    pub cert_sha256: String,
    pub cert_serial: String,
    pub cert_not_after_ms: i64,
}

/// An attempt's end as its worker reported it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ended<'a> {
    pub status: RunStatus,
    pub reason: &'a str,
    pub finish: &'a Finish,
}

/// A row of the audit trail written by studiod itself (no principal): a worker's join.
async fn append_system(
    tx: &mut Transaction<'_, Any>,
    kind: &str,
    object: &str,
    detail: &serde_json::Value,
    epoch: &str,
    at_ms: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO admin_events (at_ms, kind, epoch, object, detail) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(at_ms)
    .bind(kind)
    .bind(epoch)
    .bind(object)
    .bind(detail.to_string())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The fenced check of a report: the run, when it is still running under `worker` with
/// `fence`.
async fn held_in(
    tx: &mut Transaction<'_, Any>,
    run_id: &str,
    worker: &str,
    fence: i64,
) -> Result<Option<RunRow>, sqlx::Error> {
    let held: Option<i64> = sqlx::query_scalar(HELD)
        .bind(run_id)
        .bind(worker)
        .bind(fence)
        .fetch_optional(&mut **tx)
        .await?;
    match held {
        Some(_) => run_by_id(tx, run_id).await,
        None => Ok(None),
    }
}

impl SchedStore {
    /// Records a join token's digest with its labels and expiry, and who made it.
    pub(crate) async fn create_join_token(
        &self,
        digest: &str,
        labels_key: &str,
        expires_at_ms: i64,
        note: &Note<'_>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO worker_join_tokens (digest, labels, created_by, created_at_ms, \
             expires_at_ms) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(digest)
        .bind(labels_key)
        .bind(&note.by.principal)
        .bind(now_ms)
        .bind(expires_at_ms)
        .execute(&mut *tx)
        .await?;
        audit::append(&mut tx, note, now_ms).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Whether the join token `digest` could enrol a worker now (known, unused,
    /// unexpired): read before any certificate is signed for it.
    pub(crate) async fn join_token_usable(
        &self,
        digest: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM worker_join_tokens WHERE digest = $1 AND used_at_ms IS NULL \
             AND expires_at_ms > $2",
        )
        .bind(digest)
        .bind(now_ms)
        .fetch_optional(&self.pool)
        .await?;
        Ok(found.is_some())
    }

    /// Uses the join token `digest` (once, before its expiry) to enrol `worker` with the
    /// token's labels; `None` when the token is unknown, used or expired.
    pub(crate) async fn join_worker(
        &self,
        digest: &str,
        worker: &NewWorker,
        epoch: &str,
        now_ms: i64,
    ) -> Result<Option<WorkerRow>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let labels: Option<(String, Option<String>)> = sqlx::query_as(
            "UPDATE worker_join_tokens SET used_at_ms = $1, worker_id = $2 \
             WHERE digest = $3 AND used_at_ms IS NULL AND expires_at_ms > $1 \
             RETURNING labels, created_by",
        )
        .bind(now_ms)
        .bind(&worker.id)
        .bind(digest)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((labels, created_by)) = labels else {
            return Ok(None);
        };
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO workers (id, name, labels, cert_sha256, cert_serial, cert_not_after_ms, \
             enrolled_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {WORKER_COLUMNS}"
        )))
        .bind(&worker.id)
        .bind(&worker.name)
        .bind(&labels)
        .bind(&worker.cert_sha256)
        .bind(&worker.cert_serial)
        .bind(worker.cert_not_after_ms)
        .bind(now_ms)
        .fetch_one(&mut *tx)
        .await?;
        let detail =
            json!({ "name": worker.name, "labels": split(&labels), "token_by": created_by });
        let object = format!("worker:{}", worker.id);
        append_system(
            &mut tx,
            crate::audit::Kind::WorkerJoined.as_str(),
            &object,
            &detail,
            epoch,
            now_ms,
        )
        .await?;
        tx.commit().await?;
        Ok(Some(worker_from(&row)?))
    }

    /// The enrolled worker whose certificate has this SHA-256.
    pub(crate) async fn worker_by_cert(&self, sha: &str) -> Result<Option<WorkerRow>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {WORKER_COLUMNS} FROM workers WHERE cert_sha256 = $1"
        )))
        .bind(sha)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(worker_from).transpose()?)
    }

    pub(crate) async fn worker(&self, id: &str) -> Result<Option<WorkerRow>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {WORKER_COLUMNS} FROM workers WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(worker_from).transpose()?)
    }

    /// Every enrolled worker, oldest first.
    pub(crate) async fn workers(&self) -> Result<Vec<WorkerRow>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {WORKER_COLUMNS} FROM workers ORDER BY enrolled_at_ms, id"
        )))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(worker_from).collect::<Result<_, _>>()?)
    }

    /// Records what a (not revoked) worker offers now; the worker after.
    pub(crate) async fn register_worker(
        &self,
        id: &str,
        offered_key: &str,
        capacity: i64,
        version: &str,
        now_ms: i64,
    ) -> Result<Option<WorkerRow>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE workers SET offered = $1, capacity = $2, version = $3, last_seen_at_ms = $4 \
             WHERE id = $5 AND revoked_at_ms IS NULL RETURNING {WORKER_COLUMNS}"
        )))
        .bind(offered_key)
        .bind(capacity)
        .bind(version)
        .bind(now_ms)
        .bind(id)
        .fetch_optional(&self.writer)
        .await?;
        Ok(row.as_ref().map(worker_from).transpose()?)
    }

    /// Revokes a worker (its certificate admits it no more) with the audit row of who
    /// did; the worker after, `None` when there is no such worker or it was revoked.
    pub(crate) async fn revoke_worker(
        &self,
        id: &str,
        note: &Note<'_>,
        now_ms: i64,
    ) -> Result<Option<WorkerRow>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE workers SET revoked_at_ms = $1 WHERE id = $2 AND revoked_at_ms IS NULL \
             RETURNING {WORKER_COLUMNS}"
        )))
        .bind(now_ms)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        audit::append(&mut tx, note, now_ms).await?;
        tx.commit().await?;
        Ok(Some(worker_from(&row)?))
    }

    /// The attempts running under `worker`.
    pub(crate) async fn worker_attempts(&self, worker: &str) -> Result<Vec<RunRow>, StoreError> {
        Ok(self
            .active_runs()
            .await?
            .into_iter()
            .filter(|r| {
                r.status() == Some(RunStatus::Running) && r.worker_id.as_deref() == Some(worker)
            })
            .collect())
    }

    /// How many attempts run under each worker.
    pub(crate) async fn attempts_by_worker(&self) -> Result<Vec<(String, i64)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT worker_id, COUNT(*) FROM runs WHERE status = 'running' \
             AND worker_id IS NOT NULL GROUP BY worker_id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Renews the leases `worker` names (run, fence) that are still its own, until
    /// `until_ms`, and notes that it was seen; the runs renewed.
    pub(crate) async fn renew_leases(
        &self,
        worker: &str,
        held: &[(String, i64)],
        until_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let mut renewed = Vec::with_capacity(held.len());
        for (run_id, fence) in held {
            let done = sqlx::query(
                "UPDATE runs SET lease_expires_at_ms = $1 WHERE id = $2 AND worker_id = $3 \
                 AND fence = $4 AND status = 'running'",
            )
            .bind(until_ms)
            .bind(run_id)
            .bind(worker)
            .bind(fence)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 1 {
                renewed.push(run_id.clone());
            }
        }
        sqlx::query("UPDATE workers SET last_seen_at_ms = $1 WHERE id = $2")
            .bind(now_ms)
            .bind(worker)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(renewed)
    }

    /// A worker's attempt started (its job's leader is `pid` on the worker's machine):
    /// stamped dispatched, its lease renewed, its task `running`. `None` when the run is
    /// not this worker's under this fence any more; a repeated report changes nothing.
    pub(crate) async fn remote_started(
        &self,
        run_id: &str,
        (worker, fence): (&str, i64),
        pid: u32,
        (lease_until_ms, deadline_ms): (i64, i64),
        now_ms: i64,
    ) -> Result<Option<Vec<EventRow>>, StoreError> {
        let mut tx = self.writer.begin().await?;
        if held_in(&mut tx, run_id, worker, fence).await?.is_none() {
            return Ok(None);
        }
        let stamped = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE runs SET dispatched_at_ms = $1, pid = $2, lease_expires_at_ms = $3, \
             deadline_at_ms = $1 + $4 WHERE id = $5 AND dispatched_at_ms IS NULL RETURNING {}",
            super::runs::RUN_COLUMNS
        )))
        .bind(now_ms)
        .bind(i64::from(pid))
        .bind(lease_until_ms)
        .bind(deadline_ms)
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await?;
        let mut events = Vec::new();
        if let Some(row) = stamped {
            let run = super::runs::run_from(&row)?;
            if let Some(task_id) = &run.task_id {
                let task = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE tasks SET status = 'running', updated_at_ms = $1 WHERE id = $2 \
                     AND last_run_id = $3 AND status = 'leased' RETURNING {}",
                    super::tasks::TASK_COLUMNS
                )))
                .bind(now_ms)
                .bind(task_id)
                .bind(run_id)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some(task) = task {
                    events.push(task_event_in(&mut tx, &task, now_ms).await?);
                }
            }
            events.push(append_event(&mut tx, "run", &run_event(&run), now_ms).await?);
        }
        tx.commit().await?;
        Ok(Some(events))
    }

    /// A worker's attempt ended as `ended`: recorded when the run is still this worker's
    /// under this fence (its task follows, in the same transaction); `None` otherwise.
    pub(crate) async fn remote_finished(
        &self,
        run_id: &str,
        (worker, fence): (&str, i64),
        ended: Ended<'_>,
        now_ms: i64,
    ) -> Result<Option<(RunRow, Vec<EventRow>)>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let Some(before) = held_in(&mut tx, run_id, worker, fence).await? else {
            return Ok(None);
        };
        if before.dispatched_at_ms.is_none() {
            // Ended before its start was reported (a job that failed to spawn).
            sqlx::query("UPDATE runs SET dispatched_at_ms = $1 WHERE id = $2")
                .bind(now_ms)
                .bind(run_id)
                .execute(&mut *tx)
                .await?;
        }
        let step = Step {
            from: RunStatus::Running,
            to: ended.status,
            reason: Some(ended.reason),
            finish: Some(ended.finish),
            count: false,
        };
        let mut events = Vec::new();
        let Some(row) = step_in(&mut tx, run_id, &step, now_ms, &mut events).await? else {
            return Ok(None);
        };
        events.push(append_event(&mut tx, "run", &run_event(&row), now_ms).await?);
        tx.commit().await?;
        Ok(Some((row, events)))
    }

    /// The queued runs of schedules with a target (the oldest `limit`), each with its
    /// schedule's spec. Queued runs are few: the walk is `runs_active`.
    pub(crate) async fn targeted_candidates(
        &self,
        limit: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT r.id, s.spec FROM runs r JOIN schedules s ON s.id = r.schedule_id \
             WHERE r.status = 'queued' AND json_extract(s.spec, '$.target') IS NOT NULL \
             ORDER BY r.created_at_ms, r.id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Claims a queued run of a schedule with a target for `worker` (compare-and-set
    /// from `queued`): `running` under a lease of `lease_ms` with a fresh fencing token;
    /// the run, its fence and its events. `None` when another claim took it first.
    pub(crate) async fn claim_targeted(
        &self,
        run_id: &str,
        worker: &str,
        lease_ms: i64,
        now_ms: i64,
    ) -> Result<Option<(RunRow, i64, Vec<EventRow>)>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let mut events = Vec::new();
        let step = Step {
            from: RunStatus::Queued,
            to: RunStatus::Running,
            reason: None,
            finish: None,
            count: false,
        };
        if step_in(&mut tx, run_id, &step, now_ms, &mut events)
            .await?
            .is_none()
        {
            return Ok(None);
        }
        let fence = lease_run(&mut tx, run_id, worker, now_ms.saturating_add(lease_ms)).await?;
        let Some(run) = run_by_id(&mut tx, run_id).await? else {
            return Ok(None);
        };
        events.push(append_event(&mut tx, "run", &run_event(&run), now_ms).await?);
        tx.commit().await?;
        Ok(Some((run, fence, events)))
    }

    /// The remote attempts whose lease ended before `now_ms`.
    pub(crate) async fn expired_leases(&self, now_ms: i64) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(dialect::adapt(
            self.dialect,
            "SELECT id FROM runs INDEXED BY runs_leases WHERE status = 'running' \
             AND worker_id <> 'builtin' AND lease_expires_at_ms < $1 ORDER BY lease_expires_at_ms",
        ))
        .bind(now_ms)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Ends a remote attempt whose lease ran out (still unrenewed in this transaction):
    /// `failed`, reason `worker_lost`; its task follows. `None` when it was renewed or
    /// ended meanwhile.
    pub(crate) async fn expire_lease(
        &self,
        run_id: &str,
        now_ms: i64,
    ) -> Result<Option<(RunRow, Vec<EventRow>)>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let expired: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM runs WHERE id = $1 AND status = 'running' AND worker_id <> 'builtin' \
             AND lease_expires_at_ms < $2",
        )
        .bind(run_id)
        .bind(now_ms)
        .fetch_optional(&mut *tx)
        .await?;
        if expired.is_none() {
            return Ok(None);
        }
        let finish = Finish {
            stderr_tail: Some(
                "[studio] the worker's lease ran out: it stopped renewing it (killed, cut off \
                 or suspended)\n"
                    .into(),
            ),
            ..Finish::default()
        };
        let step = Step {
            from: RunStatus::Running,
            to: RunStatus::Failed,
            reason: Some("worker_lost"),
            finish: Some(&finish),
            count: false,
        };
        let mut events = Vec::new();
        let Some(row) = step_in(&mut tx, run_id, &step, now_ms, &mut events).await? else {
            return Ok(None);
        };
        events.push(append_event(&mut tx, "run", &run_event(&row), now_ms).await?);
        tx.commit().await?;
        Ok(Some((row, events)))
    }

    /// Extends every running remote attempt's lease to at least `until_ms` (a studiod
    /// start gives its workers one lease to reconnect).
    pub(crate) async fn extend_leases(&self, until_ms: i64) -> Result<(), StoreError> {
        sqlx::query(dialect::adapt(
            self.dialect,
            "UPDATE runs INDEXED BY runs_leases SET lease_expires_at_ms = $1 \
             WHERE status = 'running' AND worker_id <> 'builtin' AND lease_expires_at_ms < $1",
        ))
        .bind(until_ms)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// When the earliest lease of a running remote attempt ends.
    pub(crate) async fn next_lease_expiry(&self) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar(dialect::adapt(
            self.dialect,
            "SELECT MIN(lease_expires_at_ms) FROM runs INDEXED BY runs_leases \
             WHERE status = 'running' AND worker_id <> 'builtin'",
        ))
        .fetch_one(&self.pool)
        .await?)
    }

    /// Whether run `run_id` is still running under `worker` with `fence`.
    pub(crate) async fn holds(
        &self,
        run_id: &str,
        worker: &str,
        fence: i64,
    ) -> Result<bool, StoreError> {
        let held: Option<i64> = sqlx::query_scalar(HELD)
            .bind(run_id)
            .bind(worker)
            .bind(fence)
            .fetch_optional(&self.pool)
            .await?;
        Ok(held.is_some())
    }

    /// The fencing token of a run's lease.
    pub(crate) async fn fence_of(&self, run_id: &str) -> Result<Option<i64>, StoreError> {
        Ok(
            sqlx::query_scalar::<_, Option<i64>>("SELECT fence FROM runs WHERE id = $1")
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await?
                .flatten(),
        )
    }
}
