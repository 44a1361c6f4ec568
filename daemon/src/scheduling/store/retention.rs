//! Retention's SQL (docs/OPERATIONS.md, "Retention and archives"): the policy and a row
//! for each pass; what a pass may prune; each chunk read as rows to archive, then deleted
//! in its own short transaction that first checks the rows are still those archived (a
//! chunk that changed meanwhile is left for the next pass); the evidence checkpoint; the
//! WAL checkpoint; and putting archived rows back.
//!
//! Rows travel as JSON objects of their columns (integer, real, text or null), read with
//! `SELECT *`, so an archive holds every column a table has at the time.

use serde_json::{Map, Value};
use sqlx::{Any, AnyConnection, Column, Row, Transaction, TypeInfo, ValueRef, any::AnyRow};
use studio_api::types::{RetentionPolicy, WalCheckpoint};
use studio_evidence::{GENESIS, digest_of};

use studio_store::Dialect;

use super::{SchedStore, audit::Note, dialect};
use crate::store::StoreError;

/// A table's rows as JSON objects.
pub(crate) type Rows = Vec<Map<String, Value>>;

/// Run statuses no run leaves.
const FINISHED_RUN: &str =
    "('completed', 'failed', 'timed_out', 'cancelled', 'skipped', 'denied', 'expired')";
/// Task statuses no task leaves.
const FINISHED_TASK: &str =
    "('completed', 'failed', 'timed_out', 'cancelled', 'denied', 'expired')";

/// The most candidates one pass takes of each kind; the next pass goes on from there.
pub(crate) const MAX_CANDIDATES: i64 = 250_000;

/// The policy as stored.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PolicyRow {
    pub policy: RetentionPolicy,
    /// `api` or `config`.
    pub source: String,
    pub updated_at_ms: i64,
    pub updated_by: Option<String>,
}

/// One pass as stored.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PassRow {
    pub id: i64,
    pub trigger: String,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    pub outcome: String,
    pub error: Option<String>,
    pub archive_dir: Option<String>,
    pub pruned: std::collections::BTreeMap<String, u64>,
    pub archives: u64,
    pub chunks: u64,
    pub longest_chunk_ms: f64,
    pub checkpoint: Option<WalCheckpoint>,
}

/// A chunk as read: the ids it prunes, the rows it deletes by table, and the preimages of
/// the columns it nulls in rows it keeps.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Chunk {
    pub ids: Vec<String>,
    pub tables: Vec<(&'static str, Rows)>,
    pub preimages: Vec<(&'static str, Rows)>,
}

impl Chunk {
    /// Rows deleted, by table.
    pub(crate) fn counts(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.tables
            .iter()
            .map(|(t, rows)| (*t, u64::try_from(rows.len()).unwrap_or(u64::MAX)))
    }
}

/// What a chunk's transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deleted {
    /// Committed.
    Done,
    /// Its rows changed after they were read: nothing was written.
    Changed,
}

/// An evidence chunk: the rows, and the chain hash before the first.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EvidenceChunk {
    pub rows: Rows,
    pub previous: [u8; 32],
    pub first_seq: i64,
    pub last_seq: i64,
    pub last_chain: String,
}

/// Why a restore wrote nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RestoreError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Exists(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for RestoreError {
    fn from(e: sqlx::Error) -> Self {
        Self::Store(e.into())
    }
}

/// One row as a JSON object of its columns.
pub(crate) fn row_map(row: &AnyRow) -> Result<Map<String, Value>, sqlx::Error> {
    let mut out = Map::new();
    for (i, column) in row.columns().iter().enumerate() {
        let raw = row.try_get_raw(i)?;
        let value = if raw.is_null() {
            Value::Null
        } else {
            match raw.type_info().name() {
                // The `Any` driver's names: SQLite's INTEGER and PostgreSQL's BIGINT are
                // both read as BIGINT, REAL and DOUBLE PRECISION as DOUBLE.
                "BIGINT" | "INTEGER" | "SMALLINT" => Value::from(row.try_get::<i64, _>(i)?),
                "DOUBLE" | "REAL" => serde_json::Number::from_f64(row.try_get::<f64, _>(i)?)
                    .map_or(Value::Null, Value::Number),
                "TEXT" => Value::from(row.try_get::<String, _>(i)?),
                other => {
                    return Err(sqlx::Error::Protocol(format!(
                        "column {} holds {other}, which retention does not archive",
                        column.name()
                    )));
                }
            }
        };
        out.insert(column.name().to_owned(), value);
    }
    Ok(out)
}

async fn maps(
    conn: &mut AnyConnection,
    sql: sqlx::AssertSqlSafe<String>,
    ids: &str,
    more: Option<&str>,
) -> Result<Rows, sqlx::Error> {
    let mut q = sqlx::query(sql).bind(ids);
    if let Some(more) = more {
        q = q.bind(more);
    }
    q.fetch_all(conn).await?.iter().map(row_map).collect()
}

fn json_ids(ids: &[String]) -> String {
    Value::from(ids.to_vec()).to_string()
}

/// The rows a chunk of runs (`?1`) and tasks (`?2`) deletes, and the references to them
/// it nulls, read in `conn`.
async fn read_runs_chunk(
    conn: &mut AnyConnection,
    runs: &str,
    tasks: &str,
) -> Result<Chunk, sqlx::Error> {
    const IDS: &str = "(SELECT value FROM json_each($1))";
    let tables = vec![
        (
            "runs",
            maps(
                conn,
                sqlx::AssertSqlSafe(format!("SELECT * FROM runs WHERE id IN {IDS} ORDER BY id")),
                runs,
                None,
            )
            .await?,
        ),
        (
            "run_transitions",
            maps(
                conn,
                sqlx::AssertSqlSafe(format!(
                    "SELECT * FROM run_transitions WHERE run_id IN {IDS} ORDER BY id"
                )),
                runs,
                None,
            )
            .await?,
        ),
        (
            "approvals",
            maps(
                conn,
                sqlx::AssertSqlSafe(format!(
                    "SELECT * FROM approvals WHERE run_id IN {IDS} ORDER BY id"
                )),
                runs,
                None,
            )
            .await?,
        ),
        (
            "tasks",
            maps(
                conn,
                sqlx::AssertSqlSafe(
                    "SELECT * FROM tasks WHERE id IN (SELECT value FROM json_each($2)) ORDER BY id"
                        .to_owned(),
                ),
                runs,
                Some(tasks),
            )
            .await?,
        ),
    ];
    let preimages = vec![
        (
            "runs",
            maps(
                conn,
                sqlx::AssertSqlSafe(format!(
                    "SELECT id, chain_parent_id, replaces_run_id FROM runs WHERE id IN \
                     (SELECT id FROM runs WHERE chain_parent_id IS NOT NULL \
                      AND chain_parent_id IN {IDS} \
                      UNION SELECT id FROM runs WHERE replaces_run_id IS NOT NULL \
                      AND replaces_run_id IN {IDS}) \
                     AND id NOT IN {IDS} ORDER BY id"
                )),
                runs,
                None,
            )
            .await?,
        ),
        (
            "notify_outbox",
            maps(
                conn,
                sqlx::AssertSqlSafe(format!(
                    "SELECT id, run_id FROM notify_outbox WHERE run_id IS NOT NULL \
                     AND run_id IN {IDS} ORDER BY id"
                )),
                runs,
                None,
            )
            .await?,
        ),
    ];
    Ok(Chunk {
        ids: Vec::new(),
        tables,
        preimages,
    })
}

async fn read_notifications_chunk(
    conn: &mut AnyConnection,
    ids: &str,
) -> Result<Chunk, sqlx::Error> {
    const IDS: &str = "(SELECT value FROM json_each($1))";
    Ok(Chunk {
        ids: Vec::new(),
        tables: vec![
            (
                "notify_outbox",
                maps(
                    conn,
                    sqlx::AssertSqlSafe(format!(
                        "SELECT * FROM notify_outbox WHERE id IN {IDS} ORDER BY id"
                    )),
                    ids,
                    None,
                )
                .await?,
            ),
            (
                "notify_attempts",
                maps(
                    conn,
                    sqlx::AssertSqlSafe(format!(
                        "SELECT * FROM notify_attempts WHERE delivery_id IN {IDS} \
                         ORDER BY delivery_id, n"
                    )),
                    ids,
                    None,
                )
                .await?,
            ),
        ],
        preimages: Vec::new(),
    })
}

fn text(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
}

impl SchedStore {
    /// The policy set through the API or the configuration (`None` before either).
    pub(crate) async fn retention_policy(&self) -> Result<Option<PolicyRow>, StoreError> {
        let row: Option<(String, String, i64, Option<String>)> = sqlx::query_as(
            "SELECT policy, source, updated_at_ms, updated_by FROM retention_policy WHERE id = 1",
        )
        .fetch_optional(&self.pool)
        .await?;
        row.map(|(policy, source, updated_at_ms, updated_by)| {
            let policy =
                serde_json::from_str(&policy).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
            Ok(PolicyRow {
                policy,
                source,
                updated_at_ms,
                updated_by,
            })
        })
        .transpose()
    }

    /// Stores the policy with its source, and its audit row when one is given.
    pub(in crate::scheduling) async fn set_retention_policy(
        &self,
        policy: &RetentionPolicy,
        source: &str,
        updated_by: Option<&str>,
        note: Option<&Note<'_>>,
        at_ms: i64,
    ) -> Result<(), StoreError> {
        let text = serde_json::to_string(policy).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO retention_policy (id, policy, source, updated_at_ms, updated_by) \
             VALUES (1, $1, $2, $3, $4) ON CONFLICT (id) DO UPDATE SET policy = $1, \
             source = $2, updated_at_ms = $3, updated_by = $4",
        )
        .bind(&text)
        .bind(source)
        .bind(at_ms)
        .bind(updated_by)
        .execute(&mut *tx)
        .await?;
        if let Some(note) = note {
            super::audit::append(&mut tx, note, at_ms).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Starts a pass's row; its id.
    pub(in crate::scheduling) async fn begin_pass(
        &self,
        trigger: &str,
        archive_dir: Option<&str>,
        at_ms: i64,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "INSERT INTO retention_passes (trigger, started_at_ms, outcome, archive_dir) \
             VALUES ($1, $2, 'running', $3) RETURNING id",
        )
        .bind(trigger)
        .bind(at_ms)
        .bind(archive_dir)
        .fetch_one(&self.writer)
        .await?)
    }

    /// Ends a pass's row, with the audit rows of the pass and of its checkpoint.
    pub(in crate::scheduling) async fn finish_pass(
        &self,
        pass: &PassRow,
        notes: &[Note<'_>],
    ) -> Result<(), StoreError> {
        let pruned = serde_json::to_string(&pass.pruned).unwrap_or_else(|_| "{}".into());
        let checkpoint = pass
            .checkpoint
            .as_ref()
            .and_then(|c| serde_json::to_string(c).ok());
        let at_ms = pass.finished_at_ms.unwrap_or(pass.started_at_ms);
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "UPDATE retention_passes SET finished_at_ms = $1, outcome = $2, error = $3, pruned = $4, \
             archives = $5, chunks = $6, longest_chunk_ms = $7, checkpoint = $8 WHERE id = $9",
        )
        .bind(pass.finished_at_ms)
        .bind(&pass.outcome)
        .bind(&pass.error)
        .bind(pruned)
        .bind(i64::try_from(pass.archives).unwrap_or(i64::MAX))
        .bind(i64::try_from(pass.chunks).unwrap_or(i64::MAX))
        .bind(pass.longest_chunk_ms)
        .bind(checkpoint)
        .bind(pass.id)
        .execute(&mut *tx)
        .await?;
        for note in notes {
            super::audit::append(&mut tx, note, at_ms).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The latest passes, newest first.
    pub(crate) async fn retention_passes(&self, limit: i64) -> Result<Vec<PassRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, trigger, started_at_ms, finished_at_ms, outcome, error, archive_dir, \
             pruned, archives, chunks, longest_chunk_ms, checkpoint FROM retention_passes \
             ORDER BY id DESC LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let pruned: String = r.try_get("pruned")?;
                let checkpoint: Option<String> = r.try_get("checkpoint")?;
                Ok(PassRow {
                    id: r.try_get("id")?,
                    trigger: r.try_get("trigger")?,
                    started_at_ms: r.try_get("started_at_ms")?,
                    finished_at_ms: r.try_get("finished_at_ms")?,
                    outcome: r.try_get("outcome")?,
                    error: r.try_get("error")?,
                    archive_dir: r.try_get("archive_dir")?,
                    pruned: serde_json::from_str(&pruned).unwrap_or_default(),
                    archives: u64::try_from(r.try_get::<i64, _>("archives")?).unwrap_or(0),
                    chunks: u64::try_from(r.try_get::<i64, _>("chunks")?).unwrap_or(0),
                    longest_chunk_ms: r.try_get("longest_chunk_ms")?,
                    checkpoint: checkpoint.and_then(|c| serde_json::from_str(&c).ok()),
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }

    /// When the last pass ended, and when the last checkpoint ran (for readiness).
    pub(crate) async fn retention_marks(&self) -> Result<(Option<i64>, Option<i64>), StoreError> {
        let pass: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(finished_at_ms) FROM retention_passes WHERE outcome <> 'running'",
        )
        .fetch_one(&self.pool)
        .await?;
        let checkpoint: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(finished_at_ms) FROM retention_passes WHERE checkpoint IS NOT NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((pass, checkpoint))
    }

    /// Marks passes a stopped studiod left `running` as failed (at start).
    pub(in crate::scheduling) async fn end_interrupted_passes(
        &self,
        now_ms: i64,
    ) -> Result<u64, StoreError> {
        Ok(sqlx::query(
            "UPDATE retention_passes SET outcome = 'failed', finished_at_ms = $1, \
             error = 'studiod stopped during the pass' WHERE outcome = 'running'",
        )
        .bind(now_ms)
        .execute(&self.writer)
        .await?
        .rows_affected())
    }

    /// Finished runs of schedules (and of deleted schedules, grouped by name) that the
    /// policy prunes, oldest first: finished before `cutoff_ms`, not among the last `keep`
    /// of their schedule, and older than their schedule's rate-limit window (which counts
    /// them). Runs of tasks go with their task.
    pub(in crate::scheduling) async fn run_candidates(
        &self,
        cutoff_ms: i64,
        keep: i64,
        now_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT c.id FROM (SELECT id, status, schedule_id, created_at_ms, \
             COALESCE(finished_at_ms, created_at_ms) AS done_ms, \
             ROW_NUMBER() OVER (PARTITION BY COALESCE(schedule_id, '~' || \
             COALESCE(schedule_name, '')) ORDER BY created_at_ms DESC, id DESC) AS rn \
             FROM runs WHERE task_id IS NULL) AS c \
             LEFT JOIN schedules AS s ON s.id = c.schedule_id \
             WHERE c.rn > $1 AND c.status IN {FINISHED_RUN} AND c.done_ms < $2 \
             AND c.created_at_ms < $3 - 1000 * COALESCE(CAST(json_extract(s.spec, \
             '$.policies.rate_limit.window_seconds') AS BIGINT), 0) \
             ORDER BY c.created_at_ms, c.id LIMIT $4"
        )))
        .bind(keep)
        .bind(cutoff_ms)
        .bind(now_ms)
        .bind(MAX_CANDIDATES)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Finished tasks the policy prunes, oldest first, each with its attempts' run ids.
    pub(in crate::scheduling) async fn task_candidates(
        &self,
        cutoff_ms: i64,
        keep: i64,
    ) -> Result<Vec<(String, Vec<String>)>, StoreError> {
        let rows: Vec<(String, Option<String>)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT t.id, (SELECT json_group_array(r.id) FROM runs AS r WHERE r.task_id = t.id) \
             FROM (SELECT id, status, created_at_ms, COALESCE(finished_at_ms, updated_at_ms) \
             AS done_ms, ROW_NUMBER() OVER (ORDER BY created_at_ms DESC, id DESC) AS rn \
             FROM tasks) AS t WHERE t.rn > $1 AND t.status IN {FINISHED_TASK} \
             AND t.done_ms < $2 ORDER BY t.created_at_ms, t.id LIMIT $3"
        )))
        .bind(keep)
        .bind(cutoff_ms)
        .bind(MAX_CANDIDATES)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, runs)| {
                let runs = runs
                    .and_then(|r| serde_json::from_str(&r).ok())
                    .unwrap_or_default();
                (id, runs)
            })
            .collect())
    }

    /// Reads a chunk of runs and tasks (the tasks' runs among `runs`).
    pub(in crate::scheduling) async fn read_runs_chunk(
        &self,
        runs: &[String],
        tasks: &[String],
    ) -> Result<Chunk, StoreError> {
        let mut conn = self.pool.acquire().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let mut chunk = read_runs_chunk(&mut tx, &json_ids(runs), &json_ids(tasks)).await?;
        tx.commit().await?;
        chunk.ids = runs.to_vec();
        Ok(chunk)
    }

    /// Deletes a chunk read by [`Self::read_runs_chunk`] if its rows are still those, and
    /// nulls the references kept rows make to its runs.
    pub(in crate::scheduling) async fn delete_runs_chunk(
        &self,
        chunk: &Chunk,
        tasks: &[String],
    ) -> Result<Deleted, StoreError> {
        let (runs, tasks) = (json_ids(&chunk.ids), json_ids(tasks));
        let mut tx = self.writer.begin().await?;
        let now = read_runs_chunk(&mut tx, &runs, &tasks).await?;
        let unfinished: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM runs WHERE (id IN (SELECT value FROM json_each($1)) \
             OR task_id IN (SELECT value FROM json_each($2))) AND status NOT IN {FINISHED_RUN}"
        )))
        .bind(&runs)
        .bind(&tasks)
        .fetch_one(&mut *tx)
        .await?;
        let rows_of_tasks: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE task_id IN (SELECT value FROM json_each($2)) \
             AND id NOT IN (SELECT value FROM json_each($1))",
        )
        .bind(&runs)
        .bind(&tasks)
        .fetch_one(&mut *tx)
        .await?;
        if now.tables != chunk.tables
            || now.preimages != chunk.preimages
            || unfinished > 0
            || rows_of_tasks > 0
        {
            return Ok(Deleted::Changed);
        }
        sqlx::query("DELETE FROM tasks WHERE id IN (SELECT value FROM json_each($1))")
            .bind(&tasks)
            .execute(&mut *tx)
            .await?;
        for sql in [
            "DELETE FROM run_transitions WHERE run_id IN (SELECT value FROM json_each($1))",
            "DELETE FROM approvals WHERE run_id IN (SELECT value FROM json_each($1))",
            "DELETE FROM runs WHERE id IN (SELECT value FROM json_each($1))",
            "UPDATE runs SET chain_parent_id = NULL WHERE chain_parent_id IS NOT NULL \
             AND chain_parent_id IN (SELECT value FROM json_each($1))",
            "UPDATE runs SET replaces_run_id = NULL WHERE replaces_run_id IS NOT NULL \
             AND replaces_run_id IN (SELECT value FROM json_each($1))",
            "UPDATE notify_outbox SET run_id = NULL WHERE run_id IS NOT NULL \
             AND run_id IN (SELECT value FROM json_each($1))",
        ] {
            sqlx::query(sql).bind(&runs).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(Deleted::Done)
    }

    /// Delivered notifications that ended before `delivered_before`, and dead ones that
    /// ended before `dead_before` (either `None` keeps them), oldest first.
    pub(in crate::scheduling) async fn notification_candidates(
        &self,
        delivered_before: Option<i64>,
        dead_before: Option<i64>,
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM (SELECT id, updated_at_ms FROM notify_outbox \
             WHERE status = 'delivered' AND updated_at_ms < $1 \
             UNION ALL SELECT id, updated_at_ms FROM notify_outbox \
             WHERE status = 'dead' AND updated_at_ms < $2) AS d \
             ORDER BY updated_at_ms, id LIMIT $3",
        )
        .bind(delivered_before.unwrap_or(i64::MIN))
        .bind(dead_before.unwrap_or(i64::MIN))
        .bind(MAX_CANDIDATES)
        .fetch_all(&self.pool)
        .await?)
    }

    pub(in crate::scheduling) async fn read_notifications_chunk(
        &self,
        ids: &[String],
    ) -> Result<Chunk, StoreError> {
        let mut conn = self.pool.acquire().await?;
        let mut chunk = read_notifications_chunk(&mut conn, &json_ids(ids)).await?;
        chunk.ids = ids.to_vec();
        Ok(chunk)
    }

    pub(in crate::scheduling) async fn delete_notifications_chunk(
        &self,
        chunk: &Chunk,
    ) -> Result<Deleted, StoreError> {
        let ids = json_ids(&chunk.ids);
        let mut tx = self.writer.begin().await?;
        let now = read_notifications_chunk(&mut tx, &ids).await?;
        let still_ended = now.tables.first().is_some_and(|(_, rows)| {
            rows.iter()
                .all(|r| text(r.get("status")).is_some_and(|s| s != "pending"))
        });
        if now.tables != chunk.tables || !still_ended {
            return Ok(Deleted::Changed);
        }
        for sql in [
            "DELETE FROM notify_attempts WHERE delivery_id IN (SELECT value FROM json_each($1))",
            "DELETE FROM notify_outbox WHERE id IN (SELECT value FROM json_each($1))",
        ] {
            sqlx::query(sql).bind(&ids).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(Deleted::Done)
    }

    /// The next evidence rows that may go, oldest first (at most `limit`): sealed before
    /// `cutoff_ms`, about a run that is gone (or none), and a prefix of the log — the first
    /// row that must stay ends it. `None` when no row may go.
    pub(in crate::scheduling) async fn evidence_chunk(
        &self,
        cutoff_ms: i64,
        limit: i64,
    ) -> Result<Option<EvidenceChunk>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let heads: Vec<(i64, i64, i64)> = sqlx::query_as(
            "SELECT e.seq, e.at_ms, CASE WHEN e.run_id IS NULL OR NOT EXISTS \
             (SELECT 1 FROM runs AS r WHERE r.id = e.run_id) THEN 1 ELSE 0 END FROM evidence AS e \
             ORDER BY e.seq LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let take = heads
            .iter()
            .take_while(|(_, at, gone)| *at < cutoff_ms && *gone != 0)
            .count();
        let Some(&(last_seq, _, _)) = take.checked_sub(1).and_then(|i| heads.get(i)) else {
            return Ok(None);
        };
        let first_seq = heads[0].0;
        let rows = sqlx::query("SELECT * FROM evidence WHERE seq BETWEEN $1 AND $2 ORDER BY seq")
            .bind(first_seq)
            .bind(last_seq)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(row_map)
            .collect::<Result<Rows, _>>()?;
        let previous: Option<String> = sqlx::query_scalar(
            "SELECT chain_sha256 FROM evidence_checkpoint WHERE through_seq = $1",
        )
        .bind(first_seq - 1)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        let previous = match previous {
            Some(hash) => digest_of(&hash).ok_or_else(|| {
                sqlx::Error::Protocol("the evidence checkpoint has no chain hash".into())
            })?,
            None if first_seq == 1 => GENESIS,
            None => {
                return Err(sqlx::Error::Protocol(format!(
                    "evidence row {first_seq} follows no stored row nor the checkpoint"
                ))
                .into());
            }
        };
        let last_chain = rows
            .last()
            .and_then(|r| text(r.get("chain_sha256")))
            .unwrap_or_default()
            .to_owned();
        Ok(Some(EvidenceChunk {
            rows,
            previous,
            first_seq,
            last_seq,
            last_chain,
        }))
    }

    /// Moves the checkpoint to the chunk's last row and deletes the chunk's rows, if the
    /// log still starts where the chunk does.
    pub(in crate::scheduling) async fn delete_evidence_chunk(
        &self,
        chunk: &EvidenceChunk,
        at_ms: i64,
    ) -> Result<Deleted, StoreError> {
        let mut tx = self.writer.begin().await?;
        let first: Option<i64> = sqlx::query_scalar("SELECT MIN(seq) FROM evidence")
            .fetch_one(&mut *tx)
            .await?;
        if first != Some(chunk.first_seq) {
            return Ok(Deleted::Changed);
        }
        sqlx::query(
            "INSERT INTO evidence_checkpoint (id, through_seq, chain_sha256, at_ms) \
             VALUES (1, $1, $2, $3) ON CONFLICT (id) DO UPDATE SET through_seq = $1, \
             chain_sha256 = $2, at_ms = $3",
        )
        .bind(chunk.last_seq)
        .bind(&chunk.last_chain)
        .bind(at_ms)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM evidence WHERE seq <= $1")
            .bind(chunk.last_seq)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Deleted::Done)
    }

    /// The bytes of run logs still kept, as the runs record them.
    pub(in crate::scheduling) async fn kept_log_bytes(&self) -> Result<u64, StoreError> {
        let total: i64 = sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(COALESCE(stdout_bytes, 0) + COALESCE(stderr_bytes, 0)), 0) \
             AS BIGINT) FROM runs WHERE logs_pruned_at_ms IS NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(u64::try_from(total).unwrap_or(0))
    }

    /// The oldest finished runs whose logs are kept (at most `limit`), with their bytes.
    pub(in crate::scheduling) async fn oldest_logs(
        &self,
        limit: i64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT id, COALESCE(stdout_bytes, 0) + COALESCE(stderr_bytes, 0) FROM runs \
             WHERE logs_pruned_at_ms IS NULL AND finished_at_ms IS NOT NULL \
             AND status IN {FINISHED_RUN} ORDER BY finished_at_ms, id LIMIT $1"
        )))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, bytes)| (id, u64::try_from(bytes).unwrap_or(0)))
            .collect())
    }

    /// Marks the logs of `ids` pruned; the ids it marked (those not marked already).
    pub(in crate::scheduling) async fn mark_logs_pruned(
        &self,
        ids: &[String],
        at_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "UPDATE runs SET logs_pruned_at_ms = $2 WHERE id IN \
             (SELECT value FROM json_each($1)) AND logs_pruned_at_ms IS NULL RETURNING id",
        )
        .bind(json_ids(ids))
        .bind(at_ms)
        .fetch_all(&self.writer)
        .await?)
    }

    /// Which of `ids` name a run (in batches, for the sweep of log folders left by a
    /// pass that stopped between a chunk's commit and the removal of its folders).
    pub(in crate::scheduling) async fn runs_that_exist(
        &self,
        ids: &[String],
    ) -> Result<Vec<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT id FROM runs WHERE id IN (SELECT value FROM json_each($1))")
                .bind(json_ids(ids))
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// `PRAGMA wal_checkpoint(TRUNCATE)` on the writer: (busy, log frames, checkpointed);
    /// `None` on PostgreSQL, which checkpoints its own log.
    pub(in crate::scheduling) async fn checkpoint_wal(
        &self,
    ) -> Result<Option<(bool, i64, i64)>, StoreError> {
        if self.dialect == Dialect::Postgres {
            return Ok(None);
        }
        let (busy, log, done): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
            .fetch_one(&self.writer)
            .await?;
        Ok(Some((busy != 0, log, done)))
    }

    /// Puts archived rows back in one transaction: every row is inserted (any that is
    /// there already refuses the whole restore), the counts their insertion adds to
    /// rollups that kept counting them are taken back, and each preimage's columns are
    /// set back on the row that still exists.
    pub(in crate::scheduling) async fn restore_rows(
        &self,
        tables: &[(String, Rows)],
        preimages: &[(String, Rows)],
        note: &Note<'_>,
        at_ms: i64,
    ) -> Result<(Vec<(String, u64)>, Vec<(String, u64)>), RestoreError> {
        let mut tx = self.writer.begin().await?;
        let mut inserted = Vec::new();
        for (table, rows) in tables {
            let columns = restorable_columns(&mut tx, table).await?;
            for row in rows {
                insert_row(&mut tx, table, &columns, row).await?;
                if table == "runs" {
                    take_back_rollups(&mut tx, row).await?;
                }
            }
            inserted.push((table.clone(), rows.len() as u64));
        }
        let mut set_back = Vec::new();
        for (table, rows) in preimages {
            let mut n = 0;
            for row in rows {
                n += set_back_row(&mut tx, table, row).await?;
            }
            set_back.push((table.clone(), n));
        }
        super::audit::append(&mut tx, note, at_ms).await?;
        tx.commit().await?;
        Ok((inserted, set_back))
    }
}

/// The tables a restore may insert into, and the columns of each.
async fn restorable_columns(
    tx: &mut Transaction<'_, Any>,
    table: &str,
) -> Result<Vec<(String, Option<String>)>, RestoreError> {
    const TABLES: [&str; 6] = [
        "runs",
        "run_transitions",
        "approvals",
        "tasks",
        "notify_outbox",
        "notify_attempts",
    ];
    let Some(table) = TABLES.iter().find(|t| **t == table) else {
        return Err(RestoreError::Invalid(format!(
            "an archive's rows of {table:?} are not restored"
        )));
    };
    Ok(live_columns(tx, table).await?)
}

/// A table's columns from the live schema, each with the type a bound value is cast to on
/// PostgreSQL (`None` on SQLite, whose column affinity converts a bound value itself).
/// `table` is one of ours, never an archive's text.
async fn live_columns(
    tx: &mut Transaction<'_, Any>,
    table: &str,
) -> Result<Vec<(String, Option<String>)>, sqlx::Error> {
    Ok(match dialect::of(tx) {
        Dialect::Sqlite => sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!(
            "SELECT name FROM pragma_table_info('{table}')"
        )))
        .fetch_all(&mut **tx)
        .await?
        .into_iter()
        .map(|name| (name, None))
        .collect(),
        Dialect::Postgres => sqlx::query_as::<_, (String, String)>(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 \
             ORDER BY ordinal_position",
        )
        .bind(table)
        .fetch_all(&mut **tx)
        .await?
        .into_iter()
        .map(|(name, ty)| (name, Some(ty)))
        .collect(),
    })
}

/// The `n`th mark, cast to `ty` where the database needs it.
fn mark(n: usize, ty: Option<&str>) -> String {
    match ty {
        Some(ty) => format!("CAST(${n} AS {ty})"),
        None => format!("${n}"),
    }
}

async fn insert_row(
    tx: &mut Transaction<'_, Any>,
    table: &str,
    columns: &[(String, Option<String>)],
    row: &Map<String, Value>,
) -> Result<(), RestoreError> {
    let mut names = Vec::with_capacity(row.len());
    let mut marks = Vec::with_capacity(row.len());
    for name in row.keys() {
        // Only names the table has reach the statement: an archive names nothing else.
        let Some((known, ty)) = columns.iter().find(|(c, _)| c == name) else {
            return Err(RestoreError::Invalid(format!(
                "{table} has no column {name:?}"
            )));
        };
        names.push(known.as_str());
        marks.push(mark(marks.len() + 1, ty.as_deref()));
    }
    let marks = marks.join(", ");
    let sql = format!(
        "INSERT INTO {table} ({}) VALUES ({marks})",
        names.join(", ")
    );
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for name in &names {
        let value = &row[*name];
        // A run whose schedule is gone keeps its name, not a dangling reference.
        let value = if table == "runs" && *name == "schedule_id" {
            schedule_or_null(tx, value).await?
        } else {
            value.clone()
        };
        // On PostgreSQL every value goes as text that its mark casts to the column's type:
        // rows bind NULLs and values to the same statement, whose parameter types
        // PostgreSQL keeps from the first (see `super::real`).
        let as_text = columns.iter().any(|(_, ty)| ty.is_some());
        q = match value {
            Value::Null if as_text => q.bind(None::<String>),
            Value::Number(n) if as_text => q.bind(n.to_string()),
            Value::Null => q.bind(None::<i64>),
            Value::Number(n) if n.is_i64() => q.bind(n.as_i64()),
            Value::Number(n) => q.bind(n.as_f64()),
            Value::String(s) => q.bind(s),
            other => {
                return Err(RestoreError::Invalid(format!(
                    "{table}.{name} holds {other}, not a column's value"
                )));
            }
        };
    }
    match q.execute(&mut **tx).await {
        Ok(_) => Ok(()),
        Err(e) if super::is_unique_violation(&e) => {
            let key = row
                .get("id")
                .or_else(|| row.get("delivery_id"))
                .map(Value::to_string)
                .unwrap_or_default();
            Err(RestoreError::Exists(format!(
                "{table} already holds the row {key} (or one with its unique key): \
                 nothing was restored"
            )))
        }
        Err(e) => Err(e.into()),
    }
}

async fn schedule_or_null(tx: &mut Transaction<'_, Any>, id: &Value) -> Result<Value, sqlx::Error> {
    let Some(id) = id.as_str() else {
        return Ok(Value::Null);
    };
    let found: Option<String> = sqlx::query_scalar("SELECT id FROM schedules WHERE id = $1")
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?;
    Ok(found.map_or(Value::Null, Value::String))
}

/// Inserting a run counts it in the hourly counts and its schedule's spend, which kept
/// counting it when it was pruned: the insertion's additions are taken back.
async fn take_back_rollups(
    tx: &mut Transaction<'_, Any>,
    run: &Map<String, Value>,
) -> Result<(), sqlx::Error> {
    let created = run
        .get("created_at_ms")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    sqlx::query(
        "UPDATE run_counts_hourly SET runs = runs - 1 WHERE hour_ms = $1 - $1 % 3600000 \
         AND status = $2",
    )
    .bind(created)
    .bind(text(run.get("status")))
    .execute(&mut **tx)
    .await?;
    if let (Some(cost), Some(schedule)) = (
        run.get("cost_usd").and_then(Value::as_f64),
        text(run.get("schedule_id")),
    ) {
        sqlx::query("UPDATE schedules SET spend_usd = spend_usd - $1 WHERE id = $2")
            .bind(cost)
            .bind(schedule)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// Sets back the columns a prune changed on a row it kept; 1 when the row is there.
async fn set_back_row(
    tx: &mut Transaction<'_, Any>,
    table: &str,
    row: &Map<String, Value>,
) -> Result<u64, RestoreError> {
    // The columns a prune changes, by table: nothing else is written from an archive.
    let columns: &[&str] = match table {
        "runs" => &["chain_parent_id", "replaces_run_id", "logs_pruned_at_ms"],
        "notify_outbox" => &["run_id"],
        _ => {
            return Err(RestoreError::Invalid(format!(
                "an archive's preimages of {table:?} are not restored"
            )));
        }
    };
    let Some(id) = text(row.get("id")) else {
        return Err(RestoreError::Invalid(format!(
            "a preimage of {table} has no id"
        )));
    };
    let mut touched = 0;
    for (name, value) in row {
        if name == "id" {
            continue;
        }
        let Some(column) = columns.iter().find(|c| **c == name) else {
            return Err(RestoreError::Invalid(format!(
                "a preimage of {table} names {name:?}, which a prune never changes"
            )));
        };
        let value = match value {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            other => {
                return Err(RestoreError::Invalid(format!(
                    "a preimage of {table}.{name} holds {other}"
                )));
            }
        };
        let ty = live_columns(tx, table)
            .await?
            .into_iter()
            .find(|(c, _)| c == column)
            .and_then(|(_, ty)| ty);
        let done = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE {table} SET {column} = {} WHERE id = $2",
            mark(1, ty.as_deref())
        )))
        .bind(value)
        .bind(id)
        .execute(&mut **tx)
        .await?;
        touched = touched.max(done.rows_affected());
    }
    Ok(touched)
}
