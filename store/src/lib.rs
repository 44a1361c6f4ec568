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

/// Whether `e` says the disk (or the filesystem's quota) is full: SQLite's
/// `SQLITE_FULL`, or `ENOSPC` from the file system. Such a write changed nothing, and
/// the same write succeeds once space returns.
pub fn is_disk_full(e: &sqlx::Error) -> bool {
    const SQLITE_FULL: &str = "13";
    const ENOSPC: i32 = 28;
    match e {
        sqlx::Error::Database(d) => {
            d.code().as_deref() == Some(SQLITE_FULL) || d.message().contains("disk is full")
        }
        sqlx::Error::Io(io) => io.raw_os_error() == Some(ENOSPC),
        _ => false,
    }
}

/// Why a backup was not made.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0} exists already: a backup never overwrites")]
    Exists(String),
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
    #[error("cannot make the copy durable: {0}")]
    Io(#[from] std::io::Error),
}

/// Copies the database behind `readers` into the new file `dest` as one consistent
/// snapshot (SQLite's `VACUUM INTO`, on a read connection: writers go on meanwhile), then
/// fsyncs it and its directory. `dest` must not exist. Its size in bytes.
pub async fn backup_into(readers: &SqlitePool, dest: &Path) -> Result<u64, BackupError> {
    if dest.exists() {
        return Err(BackupError::Exists(dest.display().to_string()));
    }
    sqlx::query("VACUUM INTO ?")
        .bind(dest.to_string_lossy().into_owned())
        .execute(readers)
        .await?;
    let file = std::fs::File::open(dest)?;
    file.sync_all()?;
    if let Some(dir) = dest.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(file.metadata()?.len())
}

/// The directory a backup goes to: `dir` must be absolute; it is made (0700) if missing.
/// Why not, in words for the caller's `dir` field.
pub fn backup_dir(dir: &str) -> Result<std::path::PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    let path = std::path::PathBuf::from(dir);
    if !path.is_absolute() || dir.contains('\0') {
        return Err("must be an absolute directory".into());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&path)
        .map_err(|e| format!("cannot make the directory: {e}"))?;
    Ok(path)
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
        // A COMMIT that fails (a full disk: SQLITE_FULL) can leave the connection inside
        // a transaction; the next "transaction" would then be a savepoint within it, and
        // its "commit" would reach no reader and no disk. Such a connection is closed, not
        // reused: the next write gets a fresh one.
        .after_release(|conn, _| {
            Box::pin(async move { Ok(!sqlx::Connection::is_in_transaction(conn)) })
        })
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

    /// A backup is one snapshot taken on a reader while the writer goes on, and never
    /// overwrites a file.
    #[tokio::test]
    async fn a_backup_is_a_consistent_copy_made_beside_writes() {
        let dir = std::env::temp_dir().join(format!("studio-backup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let pools = open(&dir.join("live.db"), SCHEMA, true)
            .await
            .expect("open");
        let writer = pools.writer.clone();
        let writes = tokio::spawn(async move {
            for i in 0..500 {
                sqlx::query("INSERT INTO t (x) VALUES (?)")
                    .bind(i)
                    .execute(&writer)
                    .await
                    .expect("write");
            }
        });
        let dest = dir.join("copy.db");
        let bytes = backup_into(&pools.readers, &dest).await.expect("backup");
        writes.await.expect("writes");
        assert!(bytes > 0);
        assert!(matches!(
            backup_into(&pools.readers, &dest).await,
            Err(BackupError::Exists(_))
        ));
        let copy = open(&dest, SCHEMA, true).await.expect("the copy opens");
        let ok: String = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(&copy.readers)
            .await
            .expect("check");
        assert_eq!(ok, "ok");
        let (n, top): (i64, Option<i64>) = sqlx::query_as("SELECT COUNT(*), MAX(x) FROM t")
            .fetch_one(&copy.readers)
            .await
            .expect("count");
        // A prefix of the writes: rows 0..n exactly, whatever n the snapshot caught.
        assert_eq!(top.map_or(0, |t| t + 1), n);
        copy.close().await;
        pools.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

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
