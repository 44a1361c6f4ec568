//! `app.db`: the pools, the embedded migrations and every SQL statement of the attention
//! queue — the operators' dispositions and their append-only history ledger.
//!
//! Invariant: only studio-app opens `app.db`, and nothing outside this module writes SQL.

use std::path::Path;

use sqlx::{Row, any::AnyRow, migrate::MigrateError};

use super::derive::{Disposition, State};

/// The app's migrations, embedded so the binary carries its schema.
const MIGRATIONS: studio_store::Migrations = &[(
    1,
    "attention",
    include_str!("../../../migrations/app/0001_attention.sql"),
)];

#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("database error")]
    Sqlx(#[from] sqlx::Error),
    #[error("migration failed")]
    Migrate(#[from] MigrateError),
    #[error("cannot create the directory of app.db")]
    Dir(#[from] std::io::Error),
    #[error("{0}")]
    Open(studio_store::OpenError),
}

impl From<studio_store::OpenError> for StoreError {
    fn from(e: studio_store::OpenError) -> Self {
        match e {
            studio_store::OpenError::Sqlx(e) => Self::Sqlx(e),
            studio_store::OpenError::Migrate(e) => Self::Migrate(e),
            other => Self::Open(other),
        }
    }
}

impl StoreError {
    /// The error with its causes, for logs and the start-up refusal.
    pub(crate) fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }
}

/// Why a PUT was not applied.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PutError {
    /// The item's disposition was deleted at `tombstone`; the PUT carried no revision, or
    /// an older one, so it may be a delayed retry from before the delete.
    #[error("disposition deleted at revision {tombstone}")]
    Stale { tombstone: i64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for PutError {
    fn from(e: sqlx::Error) -> Self {
        Self::Store(StoreError::Sqlx(e))
    }
}

/// One stored row: an active disposition, or a tombstone (`state` None) keeping the
/// revision of the delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DispositionRow {
    pub(crate) item_id: String,
    pub(crate) state: Option<State>,
    pub(crate) reason: String,
    pub(crate) until_ms: Option<i64>,
    pub(crate) covers_ms: i64,
    pub(crate) revision: i64,
    pub(crate) principal_id: String,
    pub(crate) at_ms: i64,
}

impl DispositionRow {
    /// The active disposition, if this row is not a tombstone.
    pub(crate) fn active(&self) -> Option<Disposition> {
        self.state.map(|state| Disposition {
            state,
            reason: self.reason.clone(),
            until_ms: self.until_ms,
            covers_ms: self.covers_ms,
            revision: self.revision,
            principal_id: self.principal_id.clone(),
            at_ms: self.at_ms,
        })
    }
}

/// A PUT about to be applied.
#[derive(Debug, Clone)]
pub(crate) struct Put<'a> {
    pub(crate) item_id: &'a str,
    pub(crate) state: State,
    pub(crate) reason: &'a str,
    pub(crate) until_ms: Option<i64>,
    pub(crate) covers_ms: i64,
    /// The revision the caller last saw; only consulted against a tombstone.
    pub(crate) revision: Option<i64>,
    pub(crate) principal_id: &'a str,
    pub(crate) now_ms: i64,
}

/// One ledger entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LedgerEntry {
    pub(crate) op: String,
    pub(crate) state: Option<String>,
    pub(crate) reason: String,
    pub(crate) until_ms: Option<i64>,
    pub(crate) covers_ms: Option<i64>,
    pub(crate) revision: i64,
    pub(crate) principal_id: String,
    pub(crate) at_ms: i64,
}

const COLUMNS: &str = "item_id, state, reason, until_ms, covers_ms, revision, principal_id, at_ms";

fn row_from(row: &AnyRow) -> Result<DispositionRow, sqlx::Error> {
    let state: Option<String> = row.try_get("state")?;
    let state = match state {
        Some(s) => Some(State::parse(&s).ok_or_else(|| {
            sqlx::Error::Decode(format!("unknown disposition state {s:?}").into())
        })?),
        None => None,
    };
    Ok(DispositionRow {
        item_id: row.try_get("item_id")?,
        state,
        reason: row.try_get("reason")?,
        until_ms: row.try_get("until_ms")?,
        covers_ms: row.try_get("covers_ms")?,
        revision: row.try_get("revision")?,
        principal_id: row.try_get("principal_id")?,
        at_ms: row.try_get("at_ms")?,
    })
}

/// Readers and the one writer (see `studio_store` for why there is exactly one).
#[derive(Debug, Clone)]
pub(crate) struct Store {
    pools: studio_store::Pools,
}

impl Store {
    /// Opens (creating it and its directory if missing) `app.db` in WAL mode and applies
    /// pending migrations.
    #[tracing::instrument(skip_all, fields(path = %path.display()))]
    pub(crate) async fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        Ok(Self {
            pools: studio_store::open(
                studio_store::Location::File(path),
                studio_store::Schema {
                    sqlite: MIGRATIONS,
                    postgres: &[],
                },
                false,
            )
            .await?,
        })
    }

    pub(crate) async fn close(&self) {
        self.pools.close().await;
    }

    /// Copies `app.db` into the new file `dest` as one snapshot, on a reader; its size.
    pub(crate) async fn backup_into(&self, dest: &Path) -> Result<u64, studio_store::BackupError> {
        studio_store::backup_into(&self.pools.readers, dest).await
    }

    /// Every row, tombstones included (derivation uses the active ones; tombstones give
    /// callers the revision a re-PUT must carry).
    #[tracing::instrument(skip_all)]
    pub(crate) async fn rows(&self) -> Result<Vec<DispositionRow>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM dispositions ORDER BY item_id");
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pools.readers)
            .await?;
        Ok(rows.iter().map(row_from).collect::<Result<_, _>>()?)
    }

    #[cfg(test)]
    pub(crate) async fn row(&self, item_id: &str) -> Result<Option<DispositionRow>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM dispositions WHERE item_id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(item_id)
            .fetch_optional(&self.pools.readers)
            .await?;
        Ok(row.as_ref().map(row_from).transpose()?)
    }

    /// Sets a disposition. An active row is last-writer-wins whatever revision the caller
    /// sent (an operator's own retry looks exactly like a stale revision); a tombstone is
    /// only overwritten by a caller that has seen the delete (revision ≥ the tombstone's).
    #[tracing::instrument(skip_all, fields(item = put.item_id))]
    pub(crate) async fn put(&self, put: &Put<'_>) -> Result<DispositionRow, PutError> {
        let mut tx = self.pools.writer.begin().await?;
        let sql = format!("SELECT {COLUMNS} FROM dispositions WHERE item_id = $1");
        let current = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(put.item_id)
            .fetch_optional(&mut *tx)
            .await?
            .as_ref()
            .map(row_from)
            .transpose()?;
        let revision = match &current {
            None => 1,
            Some(row) if row.state.is_some() => row.revision + 1,
            Some(row) => {
                if put.revision.is_none_or(|r| r < row.revision) {
                    return Err(PutError::Stale {
                        tombstone: row.revision,
                    });
                }
                row.revision + 1
            }
        };
        let state = put.state.as_str();
        sqlx::query(
            "INSERT INTO dispositions \
             (item_id, state, reason, until_ms, covers_ms, revision, principal_id, at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (item_id) DO UPDATE SET state = excluded.state, \
             reason = excluded.reason, until_ms = excluded.until_ms, \
             covers_ms = excluded.covers_ms, revision = excluded.revision, \
             principal_id = excluded.principal_id, at_ms = excluded.at_ms",
        )
        .bind(put.item_id)
        .bind(state)
        .bind(put.reason)
        .bind(put.until_ms)
        .bind(put.covers_ms)
        .bind(revision)
        .bind(put.principal_id)
        .bind(put.now_ms)
        .execute(&mut *tx)
        .await?;
        append(
            &mut tx,
            &Entry {
                item_id: put.item_id,
                op: "put",
                state: Some(state),
                reason: put.reason,
                until_ms: put.until_ms,
                covers_ms: Some(put.covers_ms),
                revision,
                principal_id: put.principal_id,
                at_ms: put.now_ms,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(DispositionRow {
            item_id: put.item_id.to_owned(),
            state: Some(put.state),
            reason: put.reason.to_owned(),
            until_ms: put.until_ms,
            covers_ms: put.covers_ms,
            revision,
            principal_id: put.principal_id.to_owned(),
            at_ms: put.now_ms,
        })
    }

    /// Clears a disposition, leaving a tombstone at the next revision. `None` when the item
    /// never had one; a tombstone is answered as it stands (a retried DELETE changes
    /// nothing and records nothing).
    #[tracing::instrument(skip_all, fields(item = item_id))]
    pub(crate) async fn delete(
        &self,
        item_id: &str,
        reason: &str,
        principal_id: &str,
        now_ms: i64,
    ) -> Result<Option<DispositionRow>, StoreError> {
        let mut tx = self.pools.writer.begin().await?;
        let sql = format!("SELECT {COLUMNS} FROM dispositions WHERE item_id = $1");
        let current = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(item_id)
            .fetch_optional(&mut *tx)
            .await?
            .as_ref()
            .map(row_from)
            .transpose()?;
        let Some(current) = current else {
            return Ok(None);
        };
        if current.state.is_none() {
            return Ok(Some(current));
        }
        let revision = current.revision + 1;
        sqlx::query(
            "UPDATE dispositions SET state = NULL, reason = $1, until_ms = NULL, \
             revision = $2, principal_id = $3, at_ms = $4 WHERE item_id = $5",
        )
        .bind(reason)
        .bind(revision)
        .bind(principal_id)
        .bind(now_ms)
        .bind(item_id)
        .execute(&mut *tx)
        .await?;
        append(
            &mut tx,
            &Entry {
                item_id,
                op: "delete",
                state: None,
                reason,
                until_ms: None,
                covers_ms: None,
                revision,
                principal_id,
                at_ms: now_ms,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(Some(DispositionRow {
            state: None,
            reason: reason.to_owned(),
            until_ms: None,
            revision,
            principal_id: principal_id.to_owned(),
            at_ms: now_ms,
            ..current
        }))
    }

    /// The item's ledger, oldest first.
    #[tracing::instrument(skip_all, fields(item = item_id))]
    pub(crate) async fn history(&self, item_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let rows = sqlx::query(
            "SELECT op, state, reason, until_ms, covers_ms, revision, principal_id, at_ms \
             FROM disposition_history WHERE item_id = $1 ORDER BY id",
        )
        .bind(item_id)
        .fetch_all(&self.pools.readers)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(LedgerEntry {
                    op: r.try_get("op")?,
                    state: r.try_get("state")?,
                    reason: r.try_get("reason")?,
                    until_ms: r.try_get("until_ms")?,
                    covers_ms: r.try_get("covers_ms")?,
                    revision: r.try_get("revision")?,
                    principal_id: r.try_get("principal_id")?,
                    at_ms: r.try_get("at_ms")?,
                })
            })
            .collect()
    }

    /// Tries to rewrite and to erase the ledger; `true` when both were refused.
    #[cfg(test)]
    pub(crate) async fn ledger_refuses_changes(&self) -> bool {
        let update = sqlx::query("UPDATE disposition_history SET reason = 'x'")
            .execute(&self.pools.writer)
            .await;
        let delete = sqlx::query("DELETE FROM disposition_history")
            .execute(&self.pools.writer)
            .await;
        update.is_err() && delete.is_err()
    }
}

/// A ledger entry about to be appended, inside the transaction of the change it records.
struct Entry<'a> {
    item_id: &'a str,
    op: &'a str,
    state: Option<&'a str>,
    reason: &'a str,
    until_ms: Option<i64>,
    covers_ms: Option<i64>,
    revision: i64,
    principal_id: &'a str,
    at_ms: i64,
}

async fn append(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    e: &Entry<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO disposition_history \
         (item_id, op, state, reason, until_ms, covers_ms, revision, principal_id, at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(e.item_id)
    .bind(e.op)
    .bind(e.state)
    .bind(e.reason)
    .bind(e.until_ms)
    .bind(e.covers_ms)
    .bind(e.revision)
    .bind(e.principal_id)
    .bind(e.at_ms)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
