//! The databases Studio's processes open: a SQLite file in WAL mode (the embedded
//! default) or a PostgreSQL database (studiod's state in a fleet), migrations embedded in
//! the binary for each, and two pools — readers and exactly one writer — through sqlx's
//! `Any` driver, so one store module serves both (see [`Dialect`]).
//!
//! Invariant: every write goes through [`Pools::writer`], a single connection, so writes
//! queue asynchronously and in order instead of colliding in SQLite's busy handler, which
//! sleeps in millisecond steps (measured: 124 ms p50 scheduler lateness at 100 fires/s
//! before this rule). Readers are opened read-only, so a write on them fails loudly.
//! On PostgreSQL the one writer keeps one process's writes in the same order; what orders
//! several processes is the database's own locking (docs/FLEETS.md).

use std::{borrow::Cow, path::Path};

use sqlx::{
    AnyConnection, AnyPool, SqlSafeStr,
    any::{AnyConnectOptions, AnyPoolOptions},
    migrate::{MigrateError, Migration, MigrationType, Migrator},
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
    #[error("the database's path must be UTF-8")]
    Path,
    #[error("the database URL is not one sqlx can read")]
    Url,
    #[error("this store is kept in SQLite only")]
    NoPostgresSchema,
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
    #[error("the state is kept in PostgreSQL: back it up with pg_dump or the server's own backups")]
    NotAFile,
}

/// Copies the database behind `readers` into the new file `dest` as one consistent
/// snapshot (SQLite's `VACUUM INTO`, on a read connection: writers go on meanwhile), then
/// fsyncs it and its directory. `dest` must not exist. Its size in bytes.
pub async fn backup_into(readers: &AnyPool, dest: &Path) -> Result<u64, BackupError> {
    if dest.exists() {
        return Err(BackupError::Exists(dest.display().to_string()));
    }
    sqlx::query("VACUUM INTO $1")
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

/// Which SQL a database speaks. Most statements are one text for both (placeholders are
/// `$1`, `$2`, … which SQLite reads as PostgreSQL does); where they differ, the store
/// module asks its pools' dialect for the right text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// A PostgreSQL database's URL (`postgres://user:password@host:port/db?…`). It may hold
/// a password, so it is shown (`Debug`, `Display`) without one.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    /// `text` if it is a `postgres://` or `postgresql://` URL naming a host; why not.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let rest = text
            .strip_prefix("postgres://")
            .or_else(|| text.strip_prefix("postgresql://"))
            .ok_or("must be a postgres:// URL")?;
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        let host = authority.rsplit('@').next().unwrap_or_default();
        let socket = rest
            .split_once('?')
            .is_some_and(|(_, q)| q.contains("host="));
        if (host.is_empty() && !socket) || text.chars().any(char::is_whitespace) {
            return Err("must name a host (postgres://user@host:port/database)".into());
        }
        Ok(Self(text.to_owned()))
    }

    /// The URL itself, password included: only for connecting.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The same server, user and options, database `name`.
    pub fn with_database(&self, name: &str) -> Self {
        let (scheme, rest) = self.0.split_once("://").unwrap_or(("postgres", &self.0));
        let (before_query, query) = rest
            .split_once('?')
            .map_or((rest, None), |(a, q)| (a, Some(q)));
        let authority = before_query.split('/').next().unwrap_or_default();
        Self(match query {
            Some(q) => format!("{scheme}://{authority}/{name}?{q}"),
            None => format!("{scheme}://{authority}/{name}"),
        })
    }
}

/// Creates the empty database `name` (lowercase ASCII letters, digits and `_`, starting
/// with a letter) on the server of `server`, connecting to `server`'s own database to do
/// so; the new database's URL. For test suites and first set-ups.
pub async fn create_database(server: &DatabaseUrl, name: &str) -> Result<DatabaseUrl, sqlx::Error> {
    use sqlx::Connection;
    let plain = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !plain || name.len() > 63 {
        return Err(sqlx::Error::Configuration(
            format!("{name:?} is not a plain database name").into(),
        ));
    }
    sqlx::any::install_default_drivers();
    let mut admin = AnyConnection::connect(server.expose()).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await?;
    admin.close().await?;
    Ok(server.with_database(name))
}

impl std::fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (scheme, rest) = self.0.split_once("://").unwrap_or(("postgres", &self.0));
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let tail = tail.split('?').next().unwrap_or_default();
        match authority.rsplit_once('@') {
            Some((user, host)) => {
                let user = user.split(':').next().unwrap_or_default();
                write!(f, "{scheme}://{user}@{host}{tail}")
            }
            None => write!(f, "{scheme}://{authority}{tail}"),
        }
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DatabaseUrl({self})")
    }
}

/// Where a store's database is: a SQLite file, or a PostgreSQL server's URL.
#[derive(Debug, Clone, Copy)]
pub enum Location<'a> {
    File(&'a Path),
    Postgres(&'a DatabaseUrl),
}

/// The store's migrations for each dialect (one list each, embedded).
#[derive(Debug, Clone, Copy)]
pub struct Schema {
    pub sqlite: Migrations,
    pub postgres: Migrations,
}

/// The two pools on one database, and its dialect.
#[derive(Debug, Clone)]
pub struct Pools {
    pub readers: AnyPool,
    pub writer: AnyPool,
    pub dialect: Dialect,
    /// The PostgreSQL database's URL, for what needs a connection of its own (a
    /// listener for notifications); `None` for a SQLite file.
    pub url: Option<DatabaseUrl>,
}

impl Pools {
    pub async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }
}

/// Opens the database at `at` and applies its pending migrations through the writer,
/// then opens the readers. A SQLite file is created if missing and kept in WAL mode;
/// its readers are read-only connections. A PostgreSQL database must exist; its readers
/// are sessions whose transactions are read-only.
pub async fn open(
    at: Location<'_>,
    schema: Schema,
    foreign_keys: bool,
) -> Result<Pools, OpenError> {
    sqlx::any::install_default_drivers();
    let (dialect, write_url, read_url, migrations) = match at {
        Location::File(path) => {
            let file = sqlite_path(path)?;
            (
                Dialect::Sqlite,
                format!("sqlite://{file}?mode=rwc"),
                format!("sqlite://{file}?mode=ro"),
                schema.sqlite,
            )
        }
        Location::Postgres(url) => {
            if schema.postgres.is_empty() {
                return Err(OpenError::NoPostgresSchema);
            }
            (
                Dialect::Postgres,
                url.expose().to_owned(),
                url.expose().to_owned(),
                schema.postgres,
            )
        }
    };
    let write_options: AnyConnectOptions = write_url.parse().map_err(|_| OpenError::Url)?;
    let read_options: AnyConnectOptions = read_url.parse().map_err(|_| OpenError::Url)?;
    let writer = AnyPoolOptions::new()
        .max_connections(1)
        .after_connect(move |conn, _| {
            Box::pin(async move { session(conn, dialect, foreign_keys, true).await })
        })
        // A COMMIT that fails (a full disk: SQLITE_FULL) can leave the connection inside
        // a transaction; the next "transaction" would then be a savepoint within it, and
        // its "commit" would reach no reader and no disk. Such a connection is closed, not
        // reused: the next write gets a fresh one.
        .after_release(|conn, _| {
            Box::pin(async move { Ok(!sqlx::Connection::is_in_transaction(conn)) })
        })
        .connect_with(write_options)
        .await?;
    migrator(migrations).run(&writer).await?;
    let readers = AnyPoolOptions::new()
        .max_connections(READERS)
        .after_connect(move |conn, _| {
            Box::pin(async move { session(conn, dialect, foreign_keys, false).await })
        })
        .connect_with(read_options)
        .await?;
    Ok(Pools {
        readers,
        writer,
        dialect,
        url: match at {
            Location::Postgres(url) => Some(url.clone()),
            Location::File(_) => None,
        },
    })
}

/// A new connection's settings. SQLite: WAL (the writer sets it once for the file),
/// `synchronous = NORMAL` (durable at each checkpoint, never corrupt), a 5 s busy
/// timeout, foreign keys as asked. PostgreSQL: a reader's transactions are read-only, so
/// a write on a reader fails loudly there too.
async fn session(
    conn: &mut AnyConnection,
    dialect: Dialect,
    foreign_keys: bool,
    writer: bool,
) -> Result<(), sqlx::Error> {
    use sqlx::Executor;
    let sql = match (dialect, writer) {
        (Dialect::Sqlite, true) => format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000; \
             PRAGMA foreign_keys = {}",
            if foreign_keys { "ON" } else { "OFF" }
        ),
        (Dialect::Sqlite, false) => format!(
            "PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = {}",
            if foreign_keys { "ON" } else { "OFF" }
        ),
        (Dialect::Postgres, true) => return Ok(()),
        (Dialect::Postgres, false) => "SET default_transaction_read_only = on".to_owned(),
    };
    conn.execute(sqlx::AssertSqlSafe(sql)).await?;
    Ok(())
}

/// `path` as a SQLite URL's path: absolute, UTF-8, every byte but the plainest
/// percent-encoded (a `?` or `#` in a folder's name stays part of the name).
fn sqlite_path(path: &Path) -> Result<String, OpenError> {
    let text = path.to_str().ok_or(OpenError::Path)?;
    let absolute = if path.is_absolute() {
        Cow::Borrowed(text)
    } else {
        let path = std::path::absolute(path).map_err(|_| OpenError::Path)?;
        Cow::Owned(path.to_str().ok_or(OpenError::Path)?.to_owned())
    };
    let mut out = String::with_capacity(absolute.len());
    for b in absolute.bytes() {
        if b.is_ascii_alphanumeric() || b"/._~-".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(out)
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

    const SCHEMA: Schema = Schema {
        sqlite: &[(1, "t", "CREATE TABLE t (x INTEGER NOT NULL);")],
        postgres: &[],
    };

    /// A backup is one snapshot taken on a reader while the writer goes on, and never
    /// overwrites a file.
    #[tokio::test]
    async fn a_backup_is_a_consistent_copy_made_beside_writes() {
        let dir = std::env::temp_dir().join(format!("studio-backup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let pools = open(Location::File(&dir.join("live.db")), SCHEMA, true)
            .await
            .expect("open");
        let writer = pools.writer.clone();
        let writes = tokio::spawn(async move {
            for i in 0..500 {
                sqlx::query("INSERT INTO t (x) VALUES ($1)")
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
        let copy = open(Location::File(&dest), SCHEMA, true)
            .await
            .expect("the copy opens");
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

    #[test]
    fn a_database_url_is_shown_without_its_password() {
        let url =
            DatabaseUrl::parse("postgres://studio:s3cret@db.internal:5432/studio?sslmode=require")
                .expect("a URL");
        assert_eq!(url.to_string(), "postgres://studio@db.internal:5432/studio");
        assert!(!format!("{url:?}").contains("s3cret"));
        assert!(url.expose().contains("s3cret"));
        assert_eq!(
            url.with_database("other").expose(),
            "postgres://studio:s3cret@db.internal:5432/other?sslmode=require"
        );
        assert!(DatabaseUrl::parse("postgres:///studio?host=/run/postgresql").is_ok());
        for bad in [
            "mysql://h/db",
            "postgres://",
            "postgres:///db",
            "postgres://h /db",
            "",
        ] {
            assert!(DatabaseUrl::parse(bad).is_err(), "{bad}");
        }
    }

    /// A file whose path holds URL syntax (`?`, `#`, `%`, spaces) opens as itself.
    #[tokio::test]
    async fn a_path_with_url_syntax_names_that_file() {
        let dir = std::env::temp_dir().join(format!("studio store ?#% {}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("a?b#c%20d.db");
        let pools = open(Location::File(&path), SCHEMA, true)
            .await
            .expect("open");
        pools.close().await;
        assert!(path.is_file(), "the file is where its path says");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn migrates_once_and_readers_cannot_write() {
        let dir = std::env::temp_dir().join(format!("studio-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("t.db");
        let pools = open(Location::File(&path), SCHEMA, true)
            .await
            .expect("open");
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
        let again = open(Location::File(&path), SCHEMA, true)
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
