//! `state.db`: the connection pool, the embedded migrations and every SQL statement the
//! daemon runs. Nothing outside this module writes SQL, so a PostgreSQL store can later
//! stand beside this one behind the same methods.

mod apps;
mod identity;

pub(crate) use apps::{AppRow, NewApp};
pub(crate) use identity::{PRINCIPALS_CHANNEL, TokenKind};
use sqlx::{AnyPool, Row, any::AnyRow, migrate::MigrateError};
use studio_contract::{role::Role, secret::Digest};

/// The daemon's schema in each dialect.
const SCHEMA: studio_store::Schema = studio_store::Schema {
    sqlite: MIGRATIONS,
    postgres: POSTGRES_MIGRATIONS,
};

/// The same schema on PostgreSQL: today's tables at once, then each later step
/// (`migrations/postgres/`, held to the SQLite schema by a test).
const POSTGRES_MIGRATIONS: studio_store::Migrations = &[
    (
        1,
        "schema",
        include_str!("../../migrations/postgres/0001_schema.sql"),
    ),
    (
        2,
        "sqlite functions",
        include_str!("../../migrations/postgres/0002_sqlite_functions.sql"),
    ),
    (
        3,
        "cluster",
        include_str!("../../migrations/postgres/0003_cluster.sql"),
    ),
    (
        4,
        "cluster identity",
        include_str!("../../migrations/postgres/0004_cluster_identity.sql"),
    ),
    (
        5,
        "apps",
        include_str!("../../migrations/postgres/0005_apps.sql"),
    ),
];

/// The daemon's migrations, embedded so the binary carries its schema.
const MIGRATIONS: studio_store::Migrations = &[
    (
        1,
        "epochs principals admin events",
        include_str!("../../migrations/daemon/0001_epochs_principals_admin_events.sql"),
    ),
    (
        2,
        "schedules runs events",
        include_str!("../../migrations/daemon/0002_schedules_runs_events.sql"),
    ),
    (
        3,
        "declarations",
        include_str!("../../migrations/daemon/0003_declarations.sql"),
    ),
    (
        4,
        "run rollups",
        include_str!("../../migrations/daemon/0004_run_rollups.sql"),
    ),
    (
        5,
        "run list indexes",
        include_str!("../../migrations/daemon/0005_run_list_indexes.sql"),
    ),
    (
        6,
        "schedule cadence",
        include_str!("../../migrations/daemon/0006_schedule_cadence.sql"),
    ),
    (
        7,
        "command allowlist",
        include_str!("../../migrations/daemon/0007_command_allowlist.sql"),
    ),
    (
        8,
        "session expiry",
        include_str!("../../migrations/daemon/0008_session_expiry.sql"),
    ),
    (
        9,
        "run attempt",
        include_str!("../../migrations/daemon/0009_run_attempt.sql"),
    ),
    (
        10,
        "run process identity",
        include_str!("../../migrations/daemon/0010_run_process_identity.sql"),
    ),
    (
        11,
        "run names and error lines",
        include_str!("../../migrations/daemon/0011_run_names_and_error_lines.sql"),
    ),
    (
        12,
        "run strip index",
        include_str!("../../migrations/daemon/0012_run_strip_index.sql"),
    ),
    (
        13,
        "due index by name",
        include_str!("../../migrations/daemon/0013_due_index_by_name.sql"),
    ),
    (
        14,
        "schedule list rollups",
        include_str!("../../migrations/daemon/0014_schedule_list_rollups.sql"),
    ),
    (
        15,
        "principal roles",
        include_str!("../../migrations/daemon/0015_principal_roles.sql"),
    ),
    (
        16,
        "principal devices",
        include_str!("../../migrations/daemon/0016_principal_devices.sql"),
    ),
    (
        17,
        "audit trail",
        include_str!("../../migrations/daemon/0017_audit_trail.sql"),
    ),
    (
        18,
        "run approval statuses",
        include_str!("../../migrations/daemon/0018_run_approval_statuses.sql"),
    ),
    (
        19,
        "approvals and evidence",
        include_str!("../../migrations/daemon/0019_approvals_evidence.sql"),
    ),
    (
        20,
        "tasks",
        include_str!("../../migrations/daemon/0020_tasks.sql"),
    ),
    (
        21,
        "run retries",
        include_str!("../../migrations/daemon/0021_run_retries.sql"),
    ),
    (
        22,
        "workers",
        include_str!("../../migrations/daemon/0022_workers.sql"),
    ),
    (
        23,
        "secrets",
        include_str!("../../migrations/daemon/0023_secrets.sql"),
    ),
    (
        24,
        "health probe",
        include_str!("../../migrations/daemon/0024_health.sql"),
    ),
    (
        25,
        "notifications",
        include_str!("../../migrations/daemon/0025_notifications.sql"),
    ),
    (
        26,
        "retention",
        include_str!("../../migrations/daemon/0026_retention.sql"),
    ),
    (
        27,
        "cluster",
        include_str!("../../migrations/daemon/0027_cluster.sql"),
    ),
    (
        28,
        "cluster identity",
        include_str!("../../migrations/daemon/0028_cluster_identity.sql"),
    ),
    (
        29,
        "apps",
        include_str!("../../migrations/daemon/0029_apps.sql"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error")]
    Sqlx(#[from] sqlx::Error),
    #[error("migration failed")]
    Migrate(#[from] MigrateError),
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

/// A principal as recorded (no secret, only what classifies and lists it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PrincipalRow {
    pub id: String,
    pub epoch: String,
    pub kind: String,
    pub origin: String,
    pub role: Role,
    /// "Firefox 133 on Windows" (`studio_contract::device`), if its header named one.
    pub device: Option<String>,
    pub decision_expires_at_ms: i64,
    /// When the admission token stops being accepted.
    pub expires_at_ms: i64,
    pub created_at_ms: i64,
    pub last_seen_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

/// An audit row of a change someone made outside the scheduler (sessions, roles).
pub(crate) struct ChangeRecord<'a> {
    pub at_ms: i64,
    pub kind: &'a str,
    pub by: &'a crate::audit::Actor,
    /// `session:ID`.
    pub object: &'a str,
    pub detail: &'a str,
}

/// A principal about to be recorded.
pub(crate) struct NewPrincipal<'a> {
    pub id: &'a str,
    pub epoch: &'a str,
    pub kind: &'a str,
    pub origin: &'a str,
    pub role: Role,
    pub device: Option<&'a str>,
    pub token_digest: &'a Digest,
    pub decision_digest: &'a Digest,
    pub decision_expires_at_ms: i64,
    pub expires_at_ms: i64,
    pub now_ms: i64,
}

/// One audit row.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EventRow {
    pub at_ms: i64,
    pub kind: String,
    pub epoch: String,
    pub principal_id: Option<String>,
    pub detail: String,
}

const PRINCIPAL_COLUMNS: &str = "id, epoch, kind, origin, role, device, decision_expires_at_ms, \
     expires_at_ms, created_at_ms, last_seen_at_ms, revoked_at_ms";

fn principal_from(row: &AnyRow) -> Result<PrincipalRow, sqlx::Error> {
    Ok(PrincipalRow {
        id: row.try_get("id")?,
        epoch: row.try_get("epoch")?,
        kind: row.try_get("kind")?,
        origin: row.try_get("origin")?,
        role: {
            let role: String = row.try_get("role")?;
            Role::parse(&role)
                .ok_or_else(|| sqlx::Error::Decode(format!("unknown role {role:?}").into()))?
        },
        device: row.try_get("device")?,
        decision_expires_at_ms: row.try_get("decision_expires_at_ms")?,
        expires_at_ms: row.try_get("expires_at_ms")?,
        created_at_ms: row.try_get("created_at_ms")?,
        last_seen_at_ms: row.try_get("last_seen_at_ms")?,
        revoked_at_ms: row.try_get("revoked_at_ms")?,
    })
}

/// Readers and the one writer (see `studio_store` for why there is exactly one).
#[derive(Debug, Clone)]
pub(crate) struct Store {
    pools: studio_store::Pools,
}

impl Store {
    /// Opens (creating if missing) the SQLite file in WAL mode and applies pending
    /// migrations.
    #[cfg(test)]
    #[tracing::instrument(skip_all, fields(path = %path.display()))]
    pub async fn open(path: &std::path::Path) -> Result<Self, StoreError> {
        Self::open_at(studio_store::Location::File(path)).await
    }

    /// Opens the database at `at` (a SQLite file, or a PostgreSQL database that exists)
    /// and applies pending migrations.
    pub async fn open_at(at: studio_store::Location<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            pools: studio_store::open(at, SCHEMA, true).await?,
        })
    }

    /// The SQL its database speaks.
    pub(crate) fn dialect(&self) -> studio_store::Dialect {
        self.pools.dialect
    }

    /// The PostgreSQL database's URL (`None` for a SQLite file).
    pub(crate) fn url(&self) -> Option<&studio_store::DatabaseUrl> {
        self.pools.url.as_ref()
    }

    /// The reader pool, for the scheduler's own store module.
    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pools.readers
    }

    /// The one writer connection.
    pub(crate) fn writer(&self) -> &AnyPool {
        &self.pools.writer
    }

    pub async fn close(&self) {
        self.pools.close().await;
    }

    #[tracing::instrument(skip_all)]
    pub async fn stop_epoch(&self, epoch: &str, now_ms: i64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE epochs SET stopped_at_ms = $1 WHERE epoch = $2 AND stopped_at_ms IS NULL",
        )
        .bind(now_ms)
        .bind(epoch)
        .execute(&self.pools.writer)
        .await?;
        Ok(())
    }

    /// On a database several studiod share: records the digest of each key (`name`,
    /// `digest`) the first member brought, and answers the name of the first key of
    /// `keys` whose digest differs from the one recorded (`None`: all are the cluster's).
    #[tracing::instrument(skip_all)]
    pub async fn differing_key<'a>(
        &self,
        keys: &[(&'a str, String)],
    ) -> Result<Option<&'a str>, StoreError> {
        for (name, digest) in keys {
            let fact = format!("cluster_key:{name}");
            sqlx::query(
                "INSERT INTO daemon_facts (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            )
            .bind(&fact)
            .bind(digest)
            .execute(&self.pools.writer)
            .await?;
            let recorded: String =
                sqlx::query_scalar("SELECT value FROM daemon_facts WHERE name = $1")
                    .bind(&fact)
                    .fetch_one(&self.pools.writer)
                    .await?;
            if recorded != *digest {
                return Ok(Some(name));
            }
        }
        Ok(None)
    }

    /// Every recorded epoch but `current`: their codes and tokens answer `epoch_ended`.
    #[tracing::instrument(skip_all)]
    pub async fn past_epochs(&self, current: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT epoch FROM epochs WHERE epoch <> $1 ORDER BY started_at_ms")
            .bind(current)
            .fetch_all(&self.pools.readers)
            .await?;
        rows.iter()
            .map(|r| r.try_get("epoch").map_err(StoreError::from))
            .collect()
    }

    #[tracing::instrument(skip_all, fields(principal = p.id))]
    pub async fn insert_principal(&self, p: &NewPrincipal<'_>) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO principals (id, epoch, kind, origin, role, device, token_digest, \
             decision_digest, decision_expires_at_ms, expires_at_ms, created_at_ms, \
             last_seen_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(p.id)
        .bind(p.epoch)
        .bind(p.kind)
        .bind(p.origin)
        .bind(p.role.as_str())
        .bind(p.device)
        .bind(&p.token_digest[..])
        .bind(&p.decision_digest[..])
        .bind(p.decision_expires_at_ms)
        .bind(p.expires_at_ms)
        .bind(p.now_ms)
        .bind(p.now_ms)
        .execute(&self.pools.writer)
        .await?;
        Ok(())
    }

    /// Sets the role of a current-epoch, unrevoked principal; `false` when there is none.
    #[tracing::instrument(skip_all, fields(principal = id))]
    pub async fn set_principal_role(
        &self,
        id: &str,
        epoch: &str,
        role: Role,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE principals SET role = $1 WHERE id = $2 AND epoch = $3 \
             AND revoked_at_ms IS NULL AND expires_at_ms > $4",
        )
        .bind(role.as_str())
        .bind(id)
        .bind(epoch)
        .bind(now_ms)
        .execute(&self.pools.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    #[tracing::instrument(skip_all, fields(principal = id))]
    pub async fn principal(&self, id: &str) -> Result<Option<PrincipalRow>, StoreError> {
        let sql = format!("SELECT {PRINCIPAL_COLUMNS} FROM principals WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pools.readers)
            .await?;
        Ok(row.as_ref().map(principal_from).transpose()?)
    }

    /// Every principal minted in `epoch`, oldest first.
    #[tracing::instrument(skip_all)]
    pub async fn principals_of_epoch(&self, epoch: &str) -> Result<Vec<PrincipalRow>, StoreError> {
        let sql = format!(
            "SELECT {PRINCIPAL_COLUMNS} FROM principals WHERE epoch = $1 ORDER BY created_at_ms, id"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(epoch)
            .fetch_all(&self.pools.readers)
            .await?;
        Ok(rows.iter().map(principal_from).collect::<Result<_, _>>()?)
    }

    /// Marks a principal revoked; `false` when it was unknown or already revoked.
    #[tracing::instrument(skip_all, fields(principal = id))]
    pub async fn revoke_principal(
        &self,
        id: &str,
        reason: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE principals SET revoked_at_ms = $1, revoked_reason = $2 \
             WHERE id = $3 AND revoked_at_ms IS NULL",
        )
        .bind(now_ms)
        .bind(reason)
        .bind(id)
        .execute(&self.pools.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    #[tracing::instrument(skip_all, fields(principal = id))]
    pub async fn touch_principal(&self, id: &str, now_ms: i64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE principals SET last_seen_at_ms = $1 WHERE id = $2 AND last_seen_at_ms < $3",
        )
        .bind(now_ms)
        .bind(id)
        .bind(now_ms)
        .execute(&self.pools.writer)
        .await?;
        Ok(())
    }

    /// Appends a change made by `by` to `object` (a session's revocation, its role).
    #[tracing::instrument(skip_all, fields(kind = r.kind))]
    pub async fn append_change(&self, r: &ChangeRecord<'_>) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO admin_events (at_ms, kind, epoch, principal_id, role, origin, object, \
             detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(r.at_ms)
        .bind(r.kind)
        .bind(&r.by.epoch)
        .bind(&r.by.principal)
        .bind(r.by.role.as_str())
        .bind(r.by.origin.as_deref())
        .bind(r.object)
        .bind(r.detail)
        .execute(&self.pools.writer)
        .await?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(kind = kind))]
    pub async fn append_event(
        &self,
        at_ms: i64,
        kind: &str,
        epoch: &str,
        principal_id: Option<&str>,
        detail: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO admin_events (at_ms, kind, epoch, principal_id, detail) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(at_ms)
        .bind(kind)
        .bind(epoch)
        .bind(principal_id)
        .bind(detail)
        .execute(&self.pools.writer)
        .await?;
        Ok(())
    }

    /// The audit rows of `epoch`, oldest first.
    #[cfg(test)]
    #[tracing::instrument(skip_all)]
    pub async fn events_of_epoch(&self, epoch: &str) -> Result<Vec<EventRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT at_ms, kind, epoch, principal_id, detail FROM admin_events \
             WHERE epoch = $1 ORDER BY id",
        )
        .bind(epoch)
        .fetch_all(&self.pools.readers)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(EventRow {
                    at_ms: r.try_get("at_ms")?,
                    kind: r.try_get("kind")?,
                    epoch: r.try_get("epoch")?,
                    principal_id: r.try_get("principal_id")?,
                    detail: r.try_get("detail")?,
                })
            })
            .collect()
    }

    #[cfg(test)]
    pub(crate) async fn raw_delete_event_is_refused(&self) -> bool {
        sqlx::query("DELETE FROM admin_events")
            .execute(&self.pools.writer)
            .await
            .is_err()
    }

    #[cfg(test)]
    pub(crate) async fn epoch_stopped_at(&self, epoch: &str) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query("SELECT stopped_at_ms FROM epochs WHERE epoch = $1")
            .bind(epoch)
            .fetch_one(&self.pools.readers)
            .await?;
        Ok(row.try_get("stopped_at_ms")?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;

    fn principal<'a>(
        id: &'a str,
        epoch: &'a str,
        t: &'a Digest,
        d: &'a Digest,
    ) -> NewPrincipal<'a> {
        NewPrincipal {
            id,
            epoch,
            kind: "browser",
            origin: "http://127.0.0.1:8765",
            role: Role::Operator,
            device: Some("Firefox 133 on Windows"),
            token_digest: t,
            decision_digest: d,
            decision_expires_at_ms: 5_000,
            expires_at_ms: 9_000,
            now_ms: 1_000,
        }
    }

    /// Rows stored before the rollups existed are summed into them by the migration.
    #[tokio::test]
    async fn the_rollup_migration_backfills_stored_runs() {
        let dir = TempDir::new("backfill");
        let path = dir.path().join("state.db");
        let before = studio_store::open(
            studio_store::Location::File(&path),
            studio_store::Schema {
                sqlite: &MIGRATIONS[..3],
                postgres: &[],
            },
            true,
        )
        .await
        .expect("open at 0003");
        sqlx::query(
            "INSERT INTO schedules (id, name, spec, enabled, trigger_kind, anchor_ms, \
             created_at_ms, updated_at_ms) VALUES ('s', 's', '{}', 1, 'every', 0, 0, 0), \
             ('idle', 'idle', '{}', 1, 'every', 0, 0, 0)",
        )
        .execute(&before.writer)
        .await
        .expect("schedules");
        sqlx::query(
            "INSERT INTO runs (id, schedule_id, kind, status, action, created_at_ms, \
             finished_at_ms, cost_usd) VALUES \
             ('r1', 's', 'scheduled', 'failed', '{}', 3600000, 3600010, 0.5), \
             ('r2', 's', 'manual', 'completed', '{}', 3600020, 3600030, NULL), \
             ('r3', 's', 'chain', 'failed', '{}', 7200000, 7200040, 0.25), \
             ('r4', 's', 'scheduled', 'running', '{}', 7200050, NULL, NULL)",
        )
        .execute(&before.writer)
        .await
        .expect("runs");
        before.close().await;

        let after = studio_store::open(
            studio_store::Location::File(&path),
            studio_store::Schema {
                sqlite: MIGRATIONS,
                postgres: &[],
            },
            true,
        )
        .await
        .expect("migrate to 0004");
        type Stats = (String, i64, Option<String>, Option<i64>, f64);
        let stats: Vec<Stats> = sqlx::query_as(
            "SELECT id, has_runs, last_outcome, last_outcome_at_ms, spend_usd FROM schedules ORDER BY id",
        )
        .fetch_all(&after.readers)
        .await
        .expect("stats");
        assert_eq!(
            stats,
            [
                ("idle".into(), 0, None, None, 0.0),
                (
                    "s".into(),
                    1,
                    Some("completed".into()),
                    Some(3_600_030),
                    0.75
                ),
            ]
        );
        let hours: Vec<(i64, String, i64)> =
            sqlx::query_as("SELECT hour_ms, status, runs FROM run_counts_hourly ORDER BY 1, 2")
                .fetch_all(&after.readers)
                .await
                .expect("hours");
        assert_eq!(
            hours,
            [
                (3_600_000, "completed".into(), 1),
                (3_600_000, "failed".into(), 1),
                (7_200_000, "failed".into(), 1),
                (7_200_000, "running".into(), 1),
            ]
        );
        after.close().await;
    }

    /// Widening the runs table's statuses rebuilds it: every run, rollup and strip reads
    /// the same after, every index, trigger and view that reads runs is back, and the
    /// new statuses are accepted (an unknown one still is not).
    #[tokio::test]
    async fn the_status_migration_keeps_every_run_and_what_reads_them() {
        let dir = TempDir::new("statuses");
        let path = dir.path().join("state.db");
        let before = studio_store::open(
            studio_store::Location::File(&path),
            studio_store::Schema {
                sqlite: &MIGRATIONS[..17],
                postgres: &[],
            },
            true,
        )
        .await
        .expect("open at 0017");
        sqlx::query(
            "INSERT INTO schedules (id, name, spec, enabled, trigger_kind, anchor_ms, \
             created_at_ms, updated_at_ms) VALUES ('s', 's', '{}', 1, 'every', 0, 0, 0); \
             INSERT INTO runs (id, schedule_id, kind, status, action, created_at_ms, \
             finished_at_ms, cost_usd, error_line, attempt, schedule_name) VALUES \
             ('r1', 's', 'scheduled', 'failed', '{}', 3600000, 3600010, 0.5, 'boom', 1, 's'), \
             ('r2', 's', 'manual', 'completed', '{}', 3600020, 3600030, NULL, NULL, 2, 's'), \
             ('r3', 's', 'scheduled', 'running', '{}', 7200050, NULL, NULL, NULL, 1, 's')",
        )
        .execute(&before.writer)
        .await
        .expect("rows");
        let read = |pool: sqlx::AnyPool| async move {
            type Run = (String, String, Option<String>, i64, Option<f64>);
            let runs: Vec<Run> = sqlx::query_as(
                "SELECT id, status, error_line, attempt, cost_usd FROM runs ORDER BY id",
            )
            .fetch_all(&pool)
            .await
            .expect("runs");
            let rollups: (String, Option<String>, f64) = sqlx::query_as(
                "SELECT recent_runs, last_outcome, spend_usd FROM schedules WHERE id = 's'",
            )
            .fetch_one(&pool)
            .await
            .expect("rollups");
            let objects: Vec<(String, String)> = sqlx::query_as(
                "SELECT type, name FROM sqlite_master WHERE tbl_name IN ('runs', 'schedule_strips') \
                 AND name NOT LIKE 'sqlite_autoindex%' ORDER BY type, name",
            )
            .fetch_all(&pool)
            .await
            .expect("schema");
            (runs, rollups, objects)
        };
        let was = read(before.readers.clone()).await;
        before.close().await;

        let after = studio_store::open(
            studio_store::Location::File(&path),
            studio_store::Schema {
                sqlite: &MIGRATIONS[..18],
                postgres: &[],
            },
            true,
        )
        .await
        .expect("migrate to 0018");
        assert_eq!(read(after.readers.clone()).await, was);
        assert_eq!(
            was.2.iter().filter(|(t, _)| t == "trigger").count(),
            7,
            "{:?}",
            was.2
        );

        // The new statuses are stored, and the strip follows them.
        sqlx::query(
            "INSERT INTO runs (id, schedule_id, kind, status, action, created_at_ms) \
             VALUES ('r4', 's', 'manual', 'awaiting_approval', '{}', 9000000)",
        )
        .execute(&after.writer)
        .await
        .expect("awaiting_approval");
        sqlx::query("UPDATE runs SET status = 'denied', finished_at_ms = 9000001 WHERE id = 'r4'")
            .execute(&after.writer)
            .await
            .expect("denied");
        let strip: String = sqlx::query_scalar("SELECT recent_runs FROM schedules WHERE id = 's'")
            .fetch_one(&after.readers)
            .await
            .expect("strip");
        assert!(strip.contains(r#"["r4","denied",9000000,null]"#), "{strip}");
        let refused = sqlx::query(
            "INSERT INTO runs (id, kind, status, action, created_at_ms) \
             VALUES ('r5', 'manual', 'paused', '{}', 1)",
        )
        .execute(&after.writer)
        .await;
        assert!(refused.is_err(), "an unknown status is refused");
        after.close().await;
    }

    /// Migration 0020 rebuilds `runs` again (a `task` kind, the attempt's task, worker,
    /// fence and lease): every run reads the same after, approvals included, every index,
    /// trigger and view is back, and an attempt of a task is stored.
    #[tokio::test]
    async fn the_task_migration_keeps_every_run_and_what_reads_them() {
        let dir = TempDir::new("tasks");
        let path = dir.path().join("state.db");
        let before = studio_store::open(
            studio_store::Location::File(&path),
            studio_store::Schema {
                sqlite: &MIGRATIONS[..19],
                postgres: &[],
            },
            true,
        )
        .await
        .expect("open at 0019");
        sqlx::query(
            "INSERT INTO schedules (id, name, spec, enabled, trigger_kind, anchor_ms, \
             created_at_ms, updated_at_ms) VALUES ('s', 's', '{}', 1, 'every', 0, 0, 0); \
             INSERT INTO runs (id, schedule_id, kind, status, action, created_at_ms, \
             finished_at_ms, cost_usd, error_line, attempt, schedule_name, approval_id) VALUES \
             ('r1', 's', 'scheduled', 'failed', '{}', 3600000, 3600010, 0.5, 'boom', 1, 's', NULL), \
             ('r2', 's', 'manual', 'awaiting_approval', '{}', 3600020, NULL, NULL, NULL, 1, 's', 'a1')",
        )
        .execute(&before.writer)
        .await
        .expect("rows");
        let read = |pool: sqlx::AnyPool| async move {
            type Run = (String, String, Option<String>, Option<String>, Option<f64>);
            let runs: Vec<Run> = sqlx::query_as(
                "SELECT id, status, error_line, approval_id, cost_usd FROM runs ORDER BY id",
            )
            .fetch_all(&pool)
            .await
            .expect("runs");
            let rollups: (String, Option<String>, f64) = sqlx::query_as(
                "SELECT recent_runs, last_outcome, spend_usd FROM schedules WHERE id = 's'",
            )
            .fetch_one(&pool)
            .await
            .expect("rollups");
            let objects: Vec<(String, String)> = sqlx::query_as(
                "SELECT type, name FROM sqlite_master WHERE tbl_name IN ('runs', 'schedule_strips') \
                 AND name NOT LIKE 'sqlite_autoindex%' \
                 AND name NOT IN ('runs_by_task', 'runs_retry_due', 'runs_leases', \
                 'runs_by_chain_parent', 'runs_by_replaced', 'runs_logs_kept') \
                 ORDER BY type, name",
            )
            .fetch_all(&pool)
            .await
            .expect("schema");
            (runs, rollups, objects)
        };
        let was = read(before.readers.clone()).await;
        before.close().await;
        let after = studio_store::open(
            studio_store::Location::File(&path),
            studio_store::Schema {
                sqlite: MIGRATIONS,
                postgres: &[],
            },
            true,
        )
        .await
        .expect("migrate to 0020");
        assert_eq!(read(after.readers.clone()).await, was);
        sqlx::query(
            "INSERT INTO tasks (id, spec, spec_sha256, status, created_at_ms, updated_at_ms) \
             VALUES ('t1', '{}', 'x', 'leased', 1, 1); \
             INSERT INTO runs (id, kind, status, action, created_at_ms, task_id, worker_id, \
             fence, lease_expires_at_ms) VALUES ('r3', 'task', 'queued', '{}', 1, 't1', \
             'builtin', 1, 30001)",
        )
        .execute(&after.writer)
        .await
        .expect("an attempt of a task");
        let refused = sqlx::query(
            "INSERT INTO tasks (id, spec, spec_sha256, status, created_at_ms, updated_at_ms) \
             VALUES ('t2', '{}', 'x', 'paused', 1, 1)",
        )
        .execute(&after.writer)
        .await;
        assert!(refused.is_err(), "an unknown task status is refused");
        after.close().await;
    }

    /// Principals paired before tokens expired get their 30 days from when they paired.
    #[tokio::test]
    async fn the_expiry_migration_backfills_paired_principals() {
        let dir = TempDir::new("expiry");
        let path = dir.path().join("state.db");
        let before = studio_store::open(
            studio_store::Location::File(&path),
            studio_store::Schema {
                sqlite: &MIGRATIONS[..6],
                postgres: &[],
            },
            true,
        )
        .await
        .expect("open at 0006");
        sqlx::query(
            "INSERT INTO epochs (epoch, pid, started_at_ms) VALUES ('e', 1, 0); \
             INSERT INTO principals (id, epoch, kind, origin, token_digest, decision_digest, \
             decision_expires_at_ms, created_at_ms, last_seen_at_ms) \
             VALUES ('p', 'e', 'browser', 'o', x'01', x'02', 0, 1000, 1000)",
        )
        .execute(&before.writer)
        .await
        .expect("principal");
        before.close().await;

        let after = Store::open(&path).await.expect("migrate to 0008");
        let row = after.principal("p").await.expect("q").expect("row");
        assert_eq!(row.expires_at_ms, 1_000 + studio_contract::ADMISSION_TTL_MS);
        after.close().await;
    }

    #[tokio::test]
    async fn migrates_records_and_classifies() {
        let dir = TempDir::new("store");
        let store = Store::open(&dir.path().join("state.db"))
            .await
            .expect("open");
        store.begin_epoch("e1", 1, 10).await.expect("e1");
        store.stop_epoch("e1", 20).await.expect("stop");
        store.begin_epoch("e2", 2, 30).await.expect("e2");
        assert_eq!(store.past_epochs("e2").await.expect("past"), vec!["e1"]);
        assert_eq!(store.epoch_stopped_at("e1").await.expect("e1"), Some(20));
        assert_eq!(store.epoch_stopped_at("e2").await.expect("e2"), None);

        let (t, d) = ([1u8; 32], [2u8; 32]);
        store
            .insert_principal(&principal("p1", "e2", &t, &d))
            .await
            .expect("insert");
        // Digests are unique: the same token can never name two principals.
        assert!(
            store
                .insert_principal(&principal("p2", "e2", &t, &[3u8; 32]))
                .await
                .is_err()
        );
        let by = |kind, digest: [u8; 32]| {
            let store = store.clone();
            async move {
                store
                    .principal_for_admission(kind, &digest)
                    .await
                    .expect("q")
            }
        };
        let found = by(TokenKind::Admission, t).await.expect("row");
        let row = found.row;
        assert_eq!((found.token_digest, found.decision_digest), (t, d));
        assert_eq!(row.id, "p1");
        assert_eq!(row.revoked_at_ms, None);
        assert_eq!(
            by(TokenKind::Decision, d).await.map(|a| a.row.id),
            Some("p1".into())
        );
        assert!(by(TokenKind::Admission, [9u8; 32]).await.is_none());

        store.touch_principal("p1", 2_000).await.expect("touch");
        assert!(
            store
                .revoke_principal("p1", "test", 3_000)
                .await
                .expect("revoke")
        );
        assert!(
            !store
                .revoke_principal("p1", "test", 4_000)
                .await
                .expect("again")
        );
        let rows = store.principals_of_epoch("e2").await.expect("list");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].last_seen_at_ms, 2_000);
        assert_eq!(rows[0].revoked_at_ms, Some(3_000));

        store
            .append_event(5, "epoch_started", "e2", None, "{}")
            .await
            .expect("event");
        let events = store.events_of_epoch("e2").await.expect("events");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, "epoch_started");
        assert!(store.raw_delete_event_is_refused().await);
        store.close().await;

        // Reopening applies nothing new and keeps the data.
        let again = Store::open(&dir.path().join("state.db"))
            .await
            .expect("reopen");
        assert_eq!(again.past_epochs("e3").await.expect("past").len(), 2);
        again.close().await;
    }
}
