//! SQLite as Studio's processes open it: one file in WAL mode, migrations embedded in the
//! binary, and two pools — read-only readers and exactly one writer.
//!
//! Invariant: every write goes through [`Pools::writer`], a single connection, so writes
//! queue asynchronously and in order instead of colliding in SQLite's busy handler, which
//! sleeps in millisecond steps (measured: 124 ms p50 scheduler lateness at 100 fires/s
//! before this rule). Readers are opened read-only, so a write on them fails loudly.

use std::{borrow::Cow, path::Path, time::Duration};

use sqlx::{
    SqlSafeStr,
    migrate::{MigrateError, Migration, MigrationType, Migrator},
    sqlite::{
        SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
    },
};

/// `(version, description, SQL)`, embedded with `include_str!`.
pub type Migrations = &'static [(i64, &'static str, &'static str)];

/// How many read connections a store keeps.
const READERS: u32 = 4;

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
    #[error(transparent)]
    Migrate(#[from] MigrateError),
}

/// The two pools on one database file.
#[derive(Debug, Clone)]
pub struct Pools {
    pub readers: SqlitePool,
    pub writer: SqlitePool,
}

impl Pools {
    pub async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }
}

/// Opens (creating if missing) `path` in WAL mode, applies pending `migrations` through
/// the writer, then opens the readers.
pub async fn open(
    path: &Path,
    migrations: Migrations,
    foreign_keys: bool,
) -> Result<Pools, OpenError> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(foreign_keys);
    let writer = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options.clone())
        .await?;
    migrator(migrations).run(&writer).await?;
    let readers = SqlitePoolOptions::new()
        .max_connections(READERS)
        .connect_with(options.read_only(true))
        .await?;
    Ok(Pools { readers, writer })
}

fn migrator(migrations: Migrations) -> Migrator {
    Migrator::with_migrations(
        migrations
            .iter()
            .map(|(version, description, sql)| {
                Migration::new(
                    *version,
                    Cow::Borrowed(*description),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: Migrations = &[(1, "t", "CREATE TABLE t (x INTEGER NOT NULL);")];

    #[tokio::test]
    async fn migrates_once_and_readers_cannot_write() {
        let dir = std::env::temp_dir().join(format!("studio-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("t.db");
        let pools = open(&path, SCHEMA, true).await.expect("open");
        sqlx::query("INSERT INTO t (x) VALUES (1)")
            .execute(&pools.writer)
            .await
            .expect("the writer writes");
        assert!(
            sqlx::query("INSERT INTO t (x) VALUES (2)")
                .execute(&pools.readers)
                .await
                .is_err(),
            "readers are read-only"
        );
        pools.close().await;
        let again = open(&path, SCHEMA, true)
            .await
            .expect("reopen: migrations already applied");
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM t")
            .fetch_one(&again.readers)
            .await
            .expect("count");
        assert_eq!(n, 1);
        again.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
