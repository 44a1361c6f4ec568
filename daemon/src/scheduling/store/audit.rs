//! The audit rows of the scheduler's writes, appended inside the write's own transaction
//! (so a change and its record commit together or not at all), and the trail's reads.

use serde_json::Value;
use sqlx::{Any, Row, Transaction, any::AnyRow};

use super::SchedStore;
use super::statement::Statement;
use crate::{
    audit::{Actor, Kind},
    store::StoreError,
};

/// One change to record: who made it, what kind, the object ("schedule:ID", "run:ID"),
/// the schedule it concerns, and what to say of it (names and ids, never a value).
#[derive(Debug)]
pub(crate) struct Note<'a> {
    pub by: &'a Actor,
    pub kind: Kind,
    pub object: String,
    pub schedule_id: Option<&'a str>,
    pub detail: Value,
}

impl<'a> Note<'a> {
    pub(crate) fn schedule(by: &'a Actor, kind: Kind, id: &'a str, detail: Value) -> Self {
        Self {
            by,
            kind,
            object: format!("schedule:{id}"),
            schedule_id: Some(id),
            detail,
        }
    }

    pub(crate) fn run(
        by: &'a Actor,
        kind: Kind,
        run_id: &str,
        schedule_id: Option<&'a str>,
        detail: Value,
    ) -> Self {
        Self {
            by,
            kind,
            object: format!("run:{run_id}"),
            schedule_id,
            detail,
        }
    }
}

pub(super) async fn append(
    tx: &mut Transaction<'_, Any>,
    note: &Note<'_>,
    at_ms: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO admin_events (at_ms, kind, epoch, principal_id, role, origin, object, \
         schedule_id, detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(at_ms)
    .bind(note.kind.as_str())
    .bind(&note.by.epoch)
    .bind(note.by.recorded().0)
    .bind(note.by.recorded().1)
    .bind(note.by.origin.as_deref())
    .bind(&note.object)
    .bind(note.schedule_id)
    .bind(note.detail.to_string())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// One stored row of the trail.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AuditRow {
    pub id: i64,
    pub at_ms: i64,
    pub kind: String,
    pub epoch: String,
    pub principal_id: Option<String>,
    pub role: Option<String>,
    pub origin: Option<String>,
    pub object: Option<String>,
    pub schedule_id: Option<String>,
    pub detail: String,
}

/// What `GET /api/audit` filters on; rows come newest first, before `before_id`.
#[derive(Debug, Default)]
pub(crate) struct AuditFilter<'a> {
    pub schedule_id: Option<&'a str>,
    pub object: Option<&'a str>,
    pub principal: Option<&'a str>,
    pub kinds: &'a [&'a str],
    pub since_ms: Option<i64>,
    pub before_id: Option<i64>,
    pub limit: i64,
}

fn audit_from(r: &AnyRow) -> Result<AuditRow, sqlx::Error> {
    Ok(AuditRow {
        id: r.try_get("id")?,
        at_ms: r.try_get("at_ms")?,
        kind: r.try_get("kind")?,
        epoch: r.try_get("epoch")?,
        principal_id: r.try_get("principal_id")?,
        role: r.try_get("role")?,
        origin: r.try_get("origin")?,
        object: r.try_get("object")?,
        schedule_id: r.try_get("schedule_id")?,
        detail: r.try_get("detail")?,
    })
}

impl SchedStore {
    /// Records a change that writes nothing else (a cancel asked of a running run: the
    /// run's own end is written when its process has gone).
    pub(in crate::scheduling) async fn append_audit(
        &self,
        note: &Note<'_>,
        at_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.writer.begin().await?;
        append(&mut tx, note, at_ms).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Who asked for a run by hand (its `run_triggered` row's principal), if anyone did:
    /// a run the clock fired, or a follow-up, is nobody's.
    pub(crate) async fn run_requester(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        let who: Option<Option<String>> = sqlx::query_scalar(
            "SELECT principal_id FROM admin_events WHERE object = $1 AND kind = 'run_triggered' \
             ORDER BY id LIMIT 1",
        )
        .bind(format!("run:{run_id}"))
        .fetch_optional(&self.pool)
        .await?;
        Ok(who.flatten())
    }

    /// One page of the trail, newest first. Each filter given narrows it; the statement
    /// names only those, so SQLite picks the index of the narrowest.
    pub(crate) async fn audit(&self, f: &AuditFilter<'_>) -> Result<Vec<AuditRow>, StoreError> {
        let mut sql = Statement::new(
            "SELECT id, at_ms, kind, epoch, principal_id, role, origin, object, schedule_id, \
             detail FROM admin_events WHERE TRUE",
        );
        if let Some(v) = f.schedule_id {
            sql.push(" AND schedule_id = ?").bind(v.to_owned());
        }
        if let Some(v) = f.object {
            sql.push(" AND object = ?").bind(v.to_owned());
        }
        if let Some(v) = f.principal {
            sql.push(" AND principal_id = ?").bind(v.to_owned());
        }
        if !f.kinds.is_empty() {
            sql.push(" AND kind IN (");
            for (i, k) in f.kinds.iter().enumerate() {
                sql.push(if i == 0 { "?" } else { ", ?" })
                    .bind((*k).to_owned());
            }
            sql.push(")");
        }
        if let Some(v) = f.since_ms {
            sql.push(" AND at_ms >= ?").bind(v);
        }
        if let Some(v) = f.before_id {
            sql.push(" AND id < ?").bind(v);
        }
        sql.push(" ORDER BY id DESC LIMIT ?").bind(f.limit);
        let rows = sql.query(self.dialect)?.fetch_all(&self.pool).await?;
        Ok(rows.iter().map(audit_from).collect::<Result<_, _>>()?)
    }
}
