//! Notification endpoints, the outbox and its attempts (docs/OPERATIONS.md,
//! "Notifications"). The outbox rows of a run's status change are written by
//! [`enqueue_in`] inside that change's own transaction, so a change is never committed
//! without the notifications it causes, nor the other way round.

use serde_json::json;
use sqlx::{Any, Row, Transaction};
use studio_contract::time::rfc3339;
use studio_schedule::{NotifyOn, NotifyRule};

use super::{SchedStore, audit, audit::Note, dialect};
use crate::{
    scheduling::model::{RunRow, RunStatus},
    secrets::Sealed,
    store::StoreError,
};

/// An endpoint as listed: never its signing secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EndpointRow {
    pub name: String,
    pub url: String,
    pub format: String,
    pub created_at_ms: i64,
    pub created_by: Option<String>,
}

/// What a deletion did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EndpointDeleted {
    Deleted(EndpointRow),
    NotFound,
    /// Named by these schedules and tasks: kept.
    InUse(Vec<String>),
}

/// One delivery and its attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeliveryRow {
    pub id: String,
    pub endpoint: String,
    pub event: String,
    pub run_id: Option<String>,
    pub schedule_id: Option<String>,
    pub task_id: Option<String>,
    pub payload: String,
    pub status: String,
    pub attempts: i64,
    pub next_attempt_at_ms: Option<i64>,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub created_at_ms: i64,
    pub delivered_at_ms: Option<i64>,
}

/// One attempt of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttemptRow {
    pub n: i64,
    pub at_ms: i64,
    pub took_ms: i64,
    pub status: Option<i64>,
    pub detail: Option<String>,
}

/// How an attempt ended, as the sender saw it.
#[derive(Debug, Clone)]
pub(crate) struct Attempted {
    pub took_ms: i64,
    /// The receiver's HTTP status, when one answered.
    pub status: Option<u16>,
    /// Why it failed, or the start of the answer.
    pub detail: Option<String>,
    pub delivered: bool,
    /// When to try again; `None`: no more (dead when not delivered).
    pub retry_at_ms: Option<i64>,
}

/// Which deliveries to list.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeliveryFilter {
    pub run_id: Option<String>,
    pub endpoint: Option<String>,
    pub status: Option<String>,
    pub limit: i64,
}

const DELIVERY_COLUMNS: &str = "id, endpoint, event, run_id, schedule_id, task_id, payload, \
    status, attempts, next_attempt_at_ms, last_status, last_error, created_at_ms, \
    delivered_at_ms";

/// Schedules (by name) and tasks (`task ID`) whose rules send to endpoint `?1`.
const USERS: &str = "\
    SELECT DISTINCT s.name FROM schedules s, json_each(s.spec, '$.notify') j \
      WHERE json_extract(j.value, '$.to') = $1 \
    UNION ALL \
    SELECT DISTINCT 'task ' || t.id FROM tasks t, json_each(t.spec, '$.notify') j \
      WHERE json_extract(j.value, '$.to') = $1 \
      AND t.status IN ('queued', 'leased', 'running', 'retry_wait', 'awaiting_approval') \
    ORDER BY 1";

fn delivery_from(row: &sqlx::any::AnyRow) -> Result<DeliveryRow, sqlx::Error> {
    Ok(DeliveryRow {
        id: row.try_get("id")?,
        endpoint: row.try_get("endpoint")?,
        event: row.try_get("event")?,
        run_id: row.try_get("run_id")?,
        schedule_id: row.try_get("schedule_id")?,
        task_id: row.try_get("task_id")?,
        payload: row.try_get("payload")?,
        status: row.try_get("status")?,
        attempts: row.try_get("attempts")?,
        next_attempt_at_ms: row.try_get("next_attempt_at_ms")?,
        last_status: row.try_get("last_status")?,
        last_error: row.try_get("last_error")?,
        created_at_ms: row.try_get("created_at_ms")?,
        delivered_at_ms: row.try_get("delivered_at_ms")?,
    })
}

/// The event a run's new status is, if any is.
fn event_of(row: &RunRow) -> Option<(NotifyOn, bool)> {
    // (what it is, whether it ends a run of failures)
    match RunStatus::parse(&row.status)? {
        RunStatus::Failed if row.reason.as_deref() == Some("worker_lost") => {
            Some((NotifyOn::WorkerLost, false))
        }
        RunStatus::Failed => Some((NotifyOn::Failed, false)),
        RunStatus::TimedOut => Some((NotifyOn::TimedOut, false)),
        RunStatus::AwaitingApproval => Some((NotifyOn::AwaitingApproval, false)),
        RunStatus::Completed => Some((NotifyOn::SucceededAfterFailure, true)),
        _ => None,
    }
}

/// Writes, in `tx`, the outbox rows that `row`'s new status causes under its schedule's
/// or task's rules, with the failures in a row and each rule's last sending. `true` when
/// a row was written.
pub(super) async fn enqueue_in(
    tx: &mut Transaction<'_, Any>,
    row: &RunRow,
    now_ms: i64,
) -> Result<bool, sqlx::Error> {
    let Some((event, success)) = event_of(row) else {
        return Ok(false);
    };
    // The rules of the task it is an attempt of, else of its schedule; most have none,
    // and cost this one read.
    let (owner, rules): (String, Option<String>) = match (&row.task_id, &row.schedule_id) {
        (Some(task), _) => (
            format!("task:{task}"),
            sqlx::query_scalar("SELECT json_extract(spec, '$.notify') FROM tasks WHERE id = $1")
                .bind(task)
                .fetch_optional(&mut **tx)
                .await?
                .flatten(),
        ),
        (None, Some(schedule)) => (
            format!("schedule:{schedule}"),
            sqlx::query_scalar(
                "SELECT json_extract(spec, '$.notify') FROM schedules WHERE id = $1",
            )
            .bind(schedule)
            .fetch_optional(&mut **tx)
            .await?
            .flatten(),
        ),
        (None, None) => return Ok(false),
    };
    let Some(rules) = rules.and_then(|r| serde_json::from_str::<Vec<NotifyRule>>(&r).ok()) else {
        return Ok(false);
    };
    let before: i64 = sqlx::query_scalar("SELECT failures FROM notify_streaks WHERE owner = $1")
        .bind(&owner)
        .fetch_optional(&mut **tx)
        .await?
        .unwrap_or(0);
    let failures = if event.is_failure() {
        before + 1
    } else if success {
        0
    } else {
        before
    };
    if failures != before {
        sqlx::query(
            "INSERT INTO notify_streaks (owner, failures, updated_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (owner) DO UPDATE SET failures = $2, updated_at_ms = $3",
        )
        .bind(&owner)
        .bind(failures)
        .bind(now_ms)
        .execute(&mut **tx)
        .await?;
    }
    let mut wrote = false;
    for (i, rule) in rules.iter().enumerate() {
        if !rule.on.contains(&event) {
            continue;
        }
        let after = i64::from(rule.after.max(1));
        let rule_index = i64::try_from(i).unwrap_or(i64::MAX);
        let send = if event.is_failure() {
            let last: Option<i64> = sqlx::query_scalar(
                "SELECT last_sent_at_ms FROM notify_sent WHERE owner = $1 AND rule = $2",
            )
            .bind(&owner)
            .bind(rule_index)
            .fetch_optional(&mut **tx)
            .await?;
            failures == after
                || (failures > after
                    && rule
                        .cooldown_ms()
                        .is_some_and(|c| last.is_none_or(|t| now_ms - t >= c)))
        } else if success {
            // A recovery, once the failures had reached the rule's threshold.
            before >= after
        } else {
            true
        };
        if !send {
            continue;
        }
        let id = uuid::Uuid::now_v7().to_string();
        let payload = json!({
            "id": id,
            "event": event.as_str(),
            "occurred_at": rfc3339(now_ms),
            "failures_in_a_row": if success { before } else { failures },
            "run": {
                "id": row.id,
                "status": row.status,
                "reason": row.reason,
                "attempt": row.attempt,
                "exit_code": row.exit_code,
                "error_line": row.error_line,
                "scheduled_at": row.scheduled_at_ms.map(rfc3339),
            },
            "schedule": row.schedule_id.as_ref().map(|id| json!({
                "id": id,
                "name": row.schedule_name,
            })),
            "task": row.task_id.as_ref().map(|id| json!({ "id": id })),
        });
        sqlx::query(
            "INSERT INTO notify_outbox (id, endpoint, event, run_id, schedule_id, task_id, \
             payload, status, next_attempt_at_ms, created_at_ms, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9, $10)",
        )
        .bind(&id)
        .bind(&rule.to)
        .bind(event.as_str())
        .bind(&row.id)
        .bind(&row.schedule_id)
        .bind(&row.task_id)
        .bind(payload.to_string())
        .bind(now_ms)
        .bind(now_ms)
        .bind(now_ms)
        .execute(&mut **tx)
        .await?;
        sqlx::query(
            "INSERT INTO notify_sent (owner, rule, last_sent_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (owner, rule) DO UPDATE SET last_sent_at_ms = $3",
        )
        .bind(&owner)
        .bind(rule_index)
        .bind(now_ms)
        .execute(&mut **tx)
        .await?;
        wrote = true;
    }
    Ok(wrote)
}

impl SchedStore {
    /// Makes endpoint `row` with its sealed signing secret and `note`'s audit row;
    /// `false` when the name is taken (nothing written).
    pub(crate) async fn create_endpoint(
        &self,
        row: &EndpointRow,
        secret: &Sealed,
        note: &Note<'_>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.writer.begin().await?;
        let done = sqlx::query(
            "INSERT INTO notify_endpoints (name, url, format, nonce, ciphertext, \
             created_at_ms, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(&row.name)
        .bind(&row.url)
        .bind(&row.format)
        .bind(&secret.nonce)
        .bind(&secret.ciphertext)
        .bind(row.created_at_ms)
        .bind(&row.created_by)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        audit::append(&mut tx, note, row.created_at_ms).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Every endpoint, by name.
    pub(crate) async fn endpoints(&self) -> Result<Vec<EndpointRow>, StoreError> {
        let rows: Vec<(String, String, String, i64, Option<String>)> = sqlx::query_as(
            "SELECT name, url, format, created_at_ms, created_by FROM notify_endpoints \
             ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(name, url, format, created_at_ms, created_by)| EndpointRow {
                    name,
                    url,
                    format,
                    created_at_ms,
                    created_by,
                },
            )
            .collect())
    }

    /// The names of every endpoint.
    pub(crate) async fn endpoint_names(&self) -> Result<Vec<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT name FROM notify_endpoints ORDER BY name")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// Endpoint `name` with its sealed signing secret.
    pub(crate) async fn endpoint(
        &self,
        name: &str,
    ) -> Result<Option<(EndpointRow, Sealed)>, StoreError> {
        let row = sqlx::query(
            "SELECT name, url, format, nonce, ciphertext, created_at_ms, created_by \
             FROM notify_endpoints WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let endpoint = EndpointRow {
            name: row.try_get("name")?,
            url: row.try_get("url")?,
            format: row.try_get("format")?,
            created_at_ms: row.try_get("created_at_ms")?,
            created_by: row.try_get("created_by")?,
        };
        let sealed = Sealed {
            nonce: row.try_get("nonce")?,
            ciphertext: row.try_get("ciphertext")?,
        };
        Ok(Some((endpoint, sealed)))
    }

    /// Who sends to endpoint `name`.
    pub(crate) async fn endpoint_users(&self, name: &str) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(USERS)
            .bind(name)
            .fetch_all(&self.pool)
            .await?)
    }

    /// Deletes endpoint `name` with `note`'s audit row, unless a rule sends to it.
    pub(crate) async fn delete_endpoint(
        &self,
        name: &str,
        note: &Note<'_>,
        now_ms: i64,
    ) -> Result<EndpointDeleted, StoreError> {
        let mut tx = self.writer.begin().await?;
        let users: Vec<String> = sqlx::query_scalar(USERS)
            .bind(name)
            .fetch_all(&mut *tx)
            .await?;
        if !users.is_empty() {
            return Ok(EndpointDeleted::InUse(users));
        }
        let gone: Option<(String, String, i64, Option<String>)> = sqlx::query_as(
            "DELETE FROM notify_endpoints WHERE name = $1 \
             RETURNING url, format, created_at_ms, created_by",
        )
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((url, format, created_at_ms, created_by)) = gone else {
            return Ok(EndpointDeleted::NotFound);
        };
        audit::append(&mut tx, note, now_ms).await?;
        tx.commit().await?;
        Ok(EndpointDeleted::Deleted(EndpointRow {
            name: name.to_owned(),
            url,
            format,
            created_at_ms,
            created_by,
        }))
    }

    /// Queues a test delivery to `endpoint`; its id.
    pub(crate) async fn enqueue_test(
        &self,
        endpoint: &str,
        now_ms: i64,
    ) -> Result<String, StoreError> {
        let id = uuid::Uuid::now_v7().to_string();
        let payload = json!({
            "id": id,
            "event": "test",
            "occurred_at": rfc3339(now_ms),
            "message": "a test from Studio: this endpoint receives its notifications",
        });
        sqlx::query(
            "INSERT INTO notify_outbox (id, endpoint, event, payload, status, \
             next_attempt_at_ms, created_at_ms, updated_at_ms) \
             VALUES ($1, $2, 'test', $3, 'pending', $4, $5, $6)",
        )
        .bind(&id)
        .bind(endpoint)
        .bind(payload.to_string())
        .bind(now_ms)
        .bind(now_ms)
        .bind(now_ms)
        .execute(&self.writer)
        .await?;
        Ok(id)
    }

    /// The pending deliveries due at `now_ms`, oldest first (at most `limit`).
    pub(crate) async fn due_deliveries(
        &self,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        let rows = sqlx::query(dialect::adapt(
            self.dialect,
            format!(
                "SELECT {DELIVERY_COLUMNS} FROM notify_outbox INDEXED BY notify_due \
                 WHERE status = 'pending' AND next_attempt_at_ms <= $1 \
                 ORDER BY next_attempt_at_ms, id LIMIT $2"
            ),
        ))
        .bind(now_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(delivery_from).collect::<Result<_, _>>()?)
    }

    /// When the next pending delivery is due.
    pub(crate) async fn next_delivery_at(&self) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT MIN(next_attempt_at_ms) FROM notify_outbox WHERE status = 'pending'",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// Records an attempt of delivery `id` and what follows it: delivered, another try
    /// at `retry_at_ms`, or dead.
    pub(crate) async fn record_attempt(
        &self,
        id: &str,
        a: &Attempted,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.writer.begin().await?;
        let n: i64 = sqlx::query_scalar(
            "UPDATE notify_outbox SET attempts = attempts + 1, updated_at_ms = $2, \
             last_status = $3, last_error = CASE WHEN $4 THEN NULL ELSE $5 END, \
             status = CASE WHEN $4 THEN 'delivered' WHEN $6 IS NULL THEN 'dead' \
                           ELSE 'pending' END, \
             next_attempt_at_ms = CASE WHEN $4 THEN NULL ELSE $6 END, \
             delivered_at_ms = CASE WHEN $4 THEN $2 ELSE NULL END \
             WHERE id = $1 AND status = 'pending' RETURNING attempts",
        )
        .bind(id)
        .bind(now_ms)
        .bind(a.status.map(i64::from))
        .bind(a.delivered)
        .bind(&a.detail)
        .bind(a.retry_at_ms)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO notify_attempts (delivery_id, n, at_ms, took_ms, status, detail) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(id)
        .bind(n)
        .bind(now_ms)
        .bind(a.took_ms)
        .bind(a.status.map(i64::from))
        // A receiver's answer is its own bytes.
        .bind(super::without_nul(a.detail.clone()))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Deliveries, newest first.
    pub(crate) async fn deliveries(
        &self,
        f: &DeliveryFilter,
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {DELIVERY_COLUMNS} FROM notify_outbox \
             WHERE ($1 IS NULL OR run_id = $1) AND ($2 IS NULL OR endpoint = $2) \
             AND ($3 IS NULL OR status = $3) \
             ORDER BY created_at_ms DESC, id DESC LIMIT $4"
        )))
        .bind(&f.run_id)
        .bind(&f.endpoint)
        .bind(&f.status)
        .bind(f.limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(delivery_from).collect::<Result<_, _>>()?)
    }

    /// The attempts of delivery `id`, in order.
    pub(crate) async fn attempts_of(&self, id: &str) -> Result<Vec<AttemptRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT n, at_ms, took_ms, status, detail FROM notify_attempts \
             WHERE delivery_id = $1 ORDER BY n",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?;
        let attempt = |row: &sqlx::any::AnyRow| -> Result<AttemptRow, sqlx::Error> {
            Ok(AttemptRow {
                n: row.try_get("n")?,
                at_ms: row.try_get("at_ms")?,
                took_ms: row.try_get("took_ms")?,
                status: row.try_get("status")?,
                detail: row.try_get("detail")?,
            })
        };
        Ok(rows.iter().map(attempt).collect::<Result<_, _>>()?)
    }
}
