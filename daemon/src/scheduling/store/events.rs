//! The event log: appending an event inside the transaction of the change it records,
//! the payloads of run and schedule events (the API's types), and reading and pruning
//! the log.

use serde_json::Value;
use sqlx::{Any, Row, Transaction};
use studio_api::{RunEvent, ScheduleEvent, ScheduleOp};

use super::SchedStore;
use crate::{
    scheduling::model::{EventRow, RunRow, ScheduleRow},
    store::StoreError,
};

pub(super) async fn append_event(
    tx: &mut Transaction<'_, Any>,
    kind: &str,
    data: &Value,
    now_ms: i64,
) -> Result<EventRow, sqlx::Error> {
    let data = data.to_string();
    let seq: i64 = sqlx::query_scalar(
        "INSERT INTO events (at_ms, kind, data) VALUES ($1, $2, $3) RETURNING seq",
    )
    .bind(now_ms)
    .bind(kind)
    .bind(&data)
    .fetch_one(&mut **tx)
    .await?;
    Ok(EventRow {
        seq,
        kind: kind.to_owned(),
        data,
    })
}

pub(super) fn run_event(run: &RunRow) -> Value {
    let core = run.core();
    event_data(&RunEvent {
        id: core.id,
        schedule_id: core.schedule_id,
        schedule_name: core.schedule_name,
        kind: core.kind,
        status: core.status,
        reason: core.reason,
        error_line: core.error_line,
    })
}

/// An event's payload as stored (and streamed): one of the API's event types.
fn event_data(payload: &impl serde::Serialize) -> Value {
    serde_json::to_value(payload).unwrap_or(Value::Null)
}

pub(super) fn schedule_event(row: &ScheduleRow, op: ScheduleOp) -> Value {
    event_data(&ScheduleEvent {
        id: row.id.clone(),
        name: row.name.clone(),
        op,
        enabled: row.enabled,
        next_fire_at: row.next_fire_at_ms.map(studio_contract::time::rfc3339),
    })
}

impl SchedStore {
    pub(crate) async fn events_after(
        &self,
        seq: i64,
        limit: i64,
    ) -> Result<Vec<EventRow>, StoreError> {
        let rows =
            sqlx::query("SELECT seq, kind, data FROM events WHERE seq > $1 ORDER BY seq LIMIT $2")
                .bind(seq)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .iter()
            .map(|r| {
                Ok(EventRow {
                    seq: r.try_get("seq")?,
                    kind: r.try_get("kind")?,
                    data: r.try_get("data")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()?)
    }

    pub(crate) async fn latest_event_seq(&self) -> Result<i64, StoreError> {
        let seq: Option<i64> = sqlx::query_scalar("SELECT MAX(seq) FROM events")
            .fetch_one(&self.pool)
            .await?;
        Ok(seq.unwrap_or(0))
    }

    /// Keeps the newest `keep` events.
    pub(in crate::scheduling) async fn prune_events(&self, keep: i64) -> Result<u64, StoreError> {
        let done =
            sqlx::query("DELETE FROM events WHERE seq <= (SELECT MAX(seq) FROM events) - $1")
                .bind(keep)
                .execute(&self.writer)
                .await?;
        Ok(done.rows_affected())
    }
}
