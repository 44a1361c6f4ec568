//! The schedules table: rows written with their events (insert, compare-and-set update,
//! delete), the queue's cursors, the derived cadence, and the reads the API and the
//! engine make of schedules and their rollups (spend, health counts).

use sqlx::{Any, Row, Transaction, any::AnyRow};
use studio_api::ScheduleOp;

use super::{
    SchedStore,
    approvals::restate,
    audit::{self, Note},
    dialect,
    events::{append_event, schedule_event},
    is_unique_violation,
    statement::Statement,
};
use crate::{
    audit::{Actor, Kind},
    scheduling::{
        health::health_sql,
        model::{EventRow, Outcome, RunMark, ScheduleRow, ScheduleStats},
    },
    store::StoreError,
};

const SCHEDULE_COLUMNS: &str = "id, name, spec, enabled, trigger_kind, timezone, \
    timezone_source, anchor_ms, next_fire_at_ms, last_fired_at_ms, cadence_ms, max_runs, \
    runs_counted, created_at_ms, updated_at_ms, revision, managed_by, owner_key, source";

/// The rollup columns the database keeps on each schedule (read, never written from Rust).
/// [`SchedStore::up_next`]'s statement.
pub(in crate::scheduling) const UP_NEXT: &str = "SELECT id, name, next_fire_at_ms FROM schedules INDEXED BY schedules_due \
    WHERE enabled = 1 AND next_fire_at_ms IS NOT NULL ORDER BY next_fire_at_ms, name LIMIT $1";

const STATS_COLUMNS: &str = "has_runs, last_outcome, last_outcome_at_ms, spend_usd, recent_runs";

/// [`SchedStore::list_schedules`]'s statement for `f` (health as of `now_ms`). It names
/// only the filters given (fixed fragments; values are bound), as the runs list does: a
/// condition written `(? IS NULL OR …)` costs its evaluation on every
/// row scanned. In name order through `schedules_health`, whose columns answer every
/// condition, so a row is read from the table only once it matched.
pub(in crate::scheduling) fn list_sql(f: &ScheduleFilter<'_>, now_ms: i64) -> Statement {
    let mut sql = Statement::new(format!(
        "SELECT {SCHEDULE_COLUMNS}, {STATS_COLUMNS} FROM schedules INDEXED BY schedules_health \
         WHERE TRUE"
    ));
    if let Some(enabled) = f.enabled {
        sql.push(" AND enabled = ?").bind(i64::from(enabled));
    }
    if let Some(query) = f.query {
        sql.push(" AND instr(lower(name), lower(?)) > 0")
            .bind(query.to_owned());
    }
    if let Some(after) = f.after_name {
        sql.push(" AND name > ?").bind(after.to_owned());
    }
    if !f.health.is_empty() {
        sql.push(&format!(
            " AND ({}) IN (SELECT value FROM json_each(?))",
            health_sql("?")
        ))
        .bind(now_ms)
        .bind(serde_json::to_string(f.health).unwrap_or_else(|_| "[]".into()));
    }
    sql.push(" ORDER BY name LIMIT ?").bind(f.limit);
    sql
}

/// [`SchedStore::health_counts`]'s statement (`$1` now). Health is computed once per
/// row in the subquery (its `LIMIT -1` keeps SQLite from folding it into the grouping,
/// which computes it again per row and sorts wider records: 3.4 ms against 1.3 ms for
/// 10,000 schedules), from `schedules_health` alone (migration 0014).
pub(in crate::scheduling) fn health_counts_sql() -> String {
    format!(
        "SELECT health, COUNT(*) FROM (SELECT {} AS health FROM schedules LIMIT -1) AS h \
         GROUP BY 1",
        health_sql("$1")
    )
}

fn schedule_from(r: &AnyRow) -> Result<ScheduleRow, sqlx::Error> {
    Ok(ScheduleRow {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        spec: r.try_get("spec")?,
        enabled: r.try_get::<i64, _>("enabled")? != 0,
        trigger_kind: r.try_get("trigger_kind")?,
        timezone: r.try_get("timezone")?,
        timezone_source: r.try_get("timezone_source")?,
        anchor_ms: r.try_get("anchor_ms")?,
        next_fire_at_ms: r.try_get("next_fire_at_ms")?,
        last_fired_at_ms: r.try_get("last_fired_at_ms")?,
        cadence_ms: r.try_get("cadence_ms")?,
        max_runs: r.try_get("max_runs")?,
        runs_counted: r.try_get("runs_counted")?,
        created_at_ms: r.try_get("created_at_ms")?,
        updated_at_ms: r.try_get("updated_at_ms")?,
        revision: r.try_get("revision")?,
        managed_by: r.try_get("managed_by")?,
        owner_key: r.try_get("owner_key")?,
        source: r.try_get("source")?,
        stats: stats_from(r)?,
    })
}

fn stats_from(r: &AnyRow) -> Result<ScheduleStats, sqlx::Error> {
    let status: Option<String> = r.try_get("last_outcome")?;
    let at: Option<i64> = r.try_get("last_outcome_at_ms")?;
    Ok(ScheduleStats {
        has_runs: r.try_get::<i64, _>("has_runs")? != 0,
        last_outcome: status
            .zip(at)
            .map(|(status, at_ms)| Outcome { status, at_ms }),
        spend_usd: r.try_get("spend_usd")?,
        recent: recent_from(r.try_get("recent_runs")?)?,
    })
}

/// A schedule's `recent_runs`, newest first: the order of an aggregate's input is
/// SQLite's choice, so the marks are sorted here.
fn recent_from(json: &str) -> Result<Vec<RunMark>, sqlx::Error> {
    let mut marks: Vec<RunMark> =
        serde_json::from_str(json).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    marks.sort_unstable_by(|a, b| (b.created_at_ms, &b.id).cmp(&(a.created_at_ms, &a.id)));
    Ok(marks)
}

/// What `GET /api/schedules` filters on.
#[derive(Debug, Default)]
pub(crate) struct ScheduleFilter<'a> {
    pub enabled: Option<bool>,
    pub query: Option<&'a str>,
    pub after_name: Option<&'a str>,
    /// Health names (see [`super::health::HEALTHS`]); empty for any.
    pub health: &'a [&'a str],
    pub limit: i64,
}

/// Inserts a schedule row; `false` when its name is taken (nothing written).
pub(super) async fn insert_row(
    tx: &mut Transaction<'_, Any>,
    row: &ScheduleRow,
) -> Result<bool, sqlx::Error> {
    let inserted = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO schedules ({SCHEDULE_COLUMNS}) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)"
    )))
    .bind(&row.id)
    .bind(&row.name)
    .bind(&row.spec)
    .bind(i64::from(row.enabled))
    .bind(&row.trigger_kind)
    .bind(&row.timezone)
    .bind(&row.timezone_source)
    .bind(row.anchor_ms)
    .bind(row.next_fire_at_ms)
    .bind(row.last_fired_at_ms)
    .bind(row.cadence_ms)
    .bind(row.max_runs)
    .bind(row.runs_counted)
    .bind(row.created_at_ms)
    .bind(row.updated_at_ms)
    .bind(row.revision)
    .bind(&row.managed_by)
    .bind(&row.owner_key)
    .bind(&row.source)
    .execute(&mut **tx)
    .await;
    match inserted {
        Err(e) if is_unique_violation(&e) => Ok(false),
        other => other.map(|_| true),
    }
}

/// Replaces a schedule's authored fields if its revision is still `expected_revision`
/// (the counters the engine owns, `runs_counted` and `last_fired_at_ms`, are left alone).
pub(super) async fn update_row(
    tx: &mut Transaction<'_, Any>,
    row: &ScheduleRow,
    expected_revision: i64,
) -> Result<bool, sqlx::Error> {
    let updated = sqlx::query(
        "UPDATE schedules SET name = $1, spec = $2, enabled = $3, trigger_kind = $4, timezone = $5, \
         timezone_source = $6, anchor_ms = $7, next_fire_at_ms = $8, cadence_ms = $9, max_runs = $10, \
         updated_at_ms = $11, revision = $12, managed_by = $13, owner_key = $14, source = $15 \
         WHERE id = $16 AND revision = $17",
    )
    .bind(&row.name)
    .bind(&row.spec)
    .bind(i64::from(row.enabled))
    .bind(&row.trigger_kind)
    .bind(&row.timezone)
    .bind(&row.timezone_source)
    .bind(row.anchor_ms)
    .bind(row.next_fire_at_ms)
    .bind(row.cadence_ms)
    .bind(row.max_runs)
    .bind(row.updated_at_ms)
    .bind(row.revision)
    .bind(&row.managed_by)
    .bind(&row.owner_key)
    .bind(&row.source)
    .bind(&row.id)
    .bind(expected_revision)
    .execute(&mut **tx)
    .await?;
    Ok(updated.rows_affected() == 1)
}

/// A schedule write that can collide on the name.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    #[error("a schedule named {0:?} exists")]
    NameTaken(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for WriteError {
    fn from(e: sqlx::Error) -> Self {
        Self::Store(StoreError::from(e))
    }
}

impl SchedStore {
    #[tracing::instrument(skip_all, fields(name = %row.name))]
    pub(in crate::scheduling) async fn insert_schedule(
        &self,
        row: &ScheduleRow,
        note: Option<&Note<'_>>,
    ) -> Result<EventRow, WriteError> {
        let mut tx = self.writer.begin().await?;
        if !insert_row(&mut tx, row).await? {
            return Err(WriteError::NameTaken(row.name.clone()));
        }
        if let Some(note) = note {
            audit::append(&mut tx, note, row.updated_at_ms).await?;
        }
        let event = append_event(
            &mut tx,
            "schedule",
            &schedule_event(row, ScheduleOp::Created),
            row.updated_at_ms,
        )
        .await?;
        tx.commit().await?;
        Ok(event)
    }

    /// Replaces a schedule's row if its revision is still `expected_revision`.
    #[tracing::instrument(skip_all, fields(id = %row.id))]
    pub(in crate::scheduling) async fn update_schedule(
        &self,
        row: &ScheduleRow,
        expected_revision: i64,
        note: Option<&Note<'_>>,
    ) -> Result<Option<Vec<EventRow>>, WriteError> {
        let mut tx = self.writer.begin().await?;
        let updated = match update_row(&mut tx, row, expected_revision).await {
            Err(e) if is_unique_violation(&e) => {
                return Err(WriteError::NameTaken(row.name.clone()));
            }
            other => other?,
        };
        if !updated {
            return Ok(None);
        }
        if let Some(note) = note {
            audit::append(&mut tx, note, row.updated_at_ms).await?;
        }
        let mut events = vec![
            append_event(
                &mut tx,
                "schedule",
                &schedule_event(row, ScheduleOp::Updated),
                row.updated_at_ms,
            )
            .await?,
        ];
        // Open approval requests follow the change of what would run.
        let spec = serde_json::from_str(&row.spec).ok();
        let key = &self.evidence_key;
        events.extend(restate(&mut tx, key, &row.id, spec.as_ref(), row.updated_at_ms).await?);
        tx.commit().await?;
        Ok(Some(events))
    }

    #[tracing::instrument(skip_all, fields(id))]
    pub(in crate::scheduling) async fn delete_schedule(
        &self,
        id: &str,
        now_ms: i64,
        by: Option<&Actor>,
    ) -> Result<Option<Vec<EventRow>>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let Some(row) = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {SCHEDULE_COLUMNS}, {STATS_COLUMNS} FROM schedules WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(None);
        };
        let row = schedule_from(&row)?;
        sqlx::query("DELETE FROM schedules WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if let Some(by) = by {
            let detail = serde_json::json!({ "name": row.name });
            let note = Note::schedule(by, Kind::ScheduleDeleted, id, detail);
            audit::append(&mut tx, &note, now_ms).await?;
        }
        let mut events = vec![
            append_event(
                &mut tx,
                "schedule",
                &schedule_event(&row, ScheduleOp::Deleted),
                now_ms,
            )
            .await?,
        ];
        // Its open approval requests end with it, and their runs.
        events.extend(restate(&mut tx, &self.evidence_key, id, None, now_ms).await?);
        tx.commit().await?;
        Ok(Some(events))
    }

    /// Every schedule, ordered by name (declarations plan and export against all of them).
    pub(crate) async fn all_schedules(&self) -> Result<Vec<ScheduleRow>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {SCHEDULE_COLUMNS}, {STATS_COLUMNS} FROM schedules ORDER BY name"
        )))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(schedule_from).collect::<Result<_, _>>()?)
    }

    pub(crate) async fn schedule(&self, id: &str) -> Result<Option<ScheduleRow>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {SCHEDULE_COLUMNS}, {STATS_COLUMNS} FROM schedules WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(schedule_from).transpose()?)
    }

    /// Schedules ordered by name, after `after_name`, optionally filtered (health as of
    /// `now_ms`).
    pub(crate) async fn list_schedules(
        &self,
        f: &ScheduleFilter<'_>,
        now_ms: i64,
    ) -> Result<Vec<ScheduleRow>, StoreError> {
        let rows = list_sql(f, now_ms)
            .query(self.dialect)?
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(schedule_from).collect::<Result<_, _>>()?)
    }

    /// Every enabled schedule with something armed: the engine's queue at start.
    pub(crate) async fn armed(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, next_fire_at_ms FROM schedules WHERE enabled = 1 AND next_fire_at_ms IS NOT NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("next_fire_at_ms")?)))
            .collect::<Result<_, sqlx::Error>>()?)
    }

    /// Moves a cursor from `expected` to `next` without a run (a disarm, a re-arm).
    pub(in crate::scheduling) async fn move_cursor(
        &self,
        id: &str,
        expected: i64,
        next: Option<i64>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE schedules SET next_fire_at_ms = $1 WHERE id = $2 AND next_fire_at_ms = $3",
        )
        .bind(next)
        .bind(id)
        .bind(expected)
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The reported spend of a schedule's runs (its rollup; 0 for an unknown schedule).
    pub(crate) async fn spend(&self, schedule_id: &str) -> Result<f64, StoreError> {
        let spend: Option<f64> =
            sqlx::query_scalar("SELECT spend_usd FROM schedules WHERE id = $1")
                .bind(schedule_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(spend.unwrap_or(0.0))
    }

    /// The id of the schedule named `name`.
    pub(crate) async fn schedule_id_named(&self, name: &str) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT id FROM schedules WHERE name = $1")
                .bind(name)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// The `limit` soonest next fires of enabled schedules: `(id, name, at_ms)`, ties by
    /// name, read in `schedules_due`'s order (nothing sorted).
    pub(crate) async fn up_next(
        &self,
        limit: i64,
    ) -> Result<Vec<(String, String, i64)>, StoreError> {
        Ok(sqlx::query_as(dialect::adapt(self.dialect, UP_NEXT))
            .bind(limit)
            .fetch_all(&self.pool)
            .await?)
    }

    /// How SQLite runs `sql` (its `params` parameters bound to NULL): one line per step.
    #[cfg(test)]
    pub(crate) async fn plan(&self, sql: &str, params: usize) -> Vec<String> {
        let explain = format!("EXPLAIN QUERY PLAN {sql}");
        let mut query = sqlx::query_as(sqlx::AssertSqlSafe(explain));
        for _ in 0..params {
            query = query.bind(None::<i64>);
        }
        let rows: Vec<(i64, i64, i64, String)> = query.fetch_all(&self.pool).await.expect("a plan");
        rows.into_iter().map(|r| r.3).collect()
    }

    /// Each project (the part of a name before its first `/`) with its number of
    /// schedules, by name: one pass over `schedules_health`, however many there are.
    pub(crate) async fn projects(&self) -> Result<Vec<(String, i64)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT substr(name, 1, instr(name, '/') - 1) AS project, COUNT(*) \
             FROM schedules WHERE instr(name, '/') > 1 GROUP BY 1 ORDER BY 1",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// How many schedules have each health at `now_ms` (healths with none left out).
    pub(crate) async fn health_counts(
        &self,
        now_ms: i64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        Ok(
            sqlx::query_as(dialect::adapt(self.dialect, health_counts_sql()))
                .bind(now_ms)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// Schedules whose cadence was never derived (stored before it existed), with their
    /// spec, for the engine to fill in.
    pub(crate) async fn schedules_without_cadence(&self) -> Result<Vec<ScheduleRow>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {SCHEDULE_COLUMNS}, {STATS_COLUMNS} FROM schedules \
             WHERE cadence_ms IS NULL AND trigger_kind <> 'at'"
        )))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(schedule_from).collect::<Result<_, _>>()?)
    }

    /// Records a schedule's derived cadence (not a revision: the spec is unchanged).
    pub(in crate::scheduling) async fn set_cadence(
        &self,
        id: &str,
        cadence_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE schedules SET cadence_ms = $1 WHERE id = $2 AND cadence_ms IS NULL")
            .bind(cadence_ms)
            .bind(id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }
}
