//! The studio-apps on other hosts (docs/FLEETS.md, "Split hosts"): each enrolled app
//! bound to the one certificate studiod's authority issued it, and the one-time join
//! tokens that enrol them (digests only).

use sqlx::{Row, any::AnyRow};

use super::{Store, StoreError};

const APP_COLUMNS: &str = "id, name, cert_sha256, cert_not_after_ms, enrolled_at_ms, revoked_at_ms";

/// An enrolled app as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AppRow {
    pub id: String,
    pub name: String,
    pub cert_sha256: String,
    pub cert_not_after_ms: i64,
    pub enrolled_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

fn app_from(row: &AnyRow) -> Result<AppRow, sqlx::Error> {
    Ok(AppRow {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        cert_sha256: row.try_get("cert_sha256")?,
        cert_not_after_ms: row.try_get("cert_not_after_ms")?,
        enrolled_at_ms: row.try_get("enrolled_at_ms")?,
        revoked_at_ms: row.try_get("revoked_at_ms")?,
    })
}

/// An app about to be enrolled: its id and the certificate issued to it.
#[derive(Debug, Clone)]
pub(crate) struct NewApp {
    pub id: String,
    pub name: String,
    pub cert_sha256: String,
    pub cert_serial: String,
    pub cert_not_after_ms: i64,
}

impl Store {
    /// Keeps a new app join token (its digest), usable until `expires_at_ms`.
    pub(crate) async fn create_app_token(
        &self,
        digest: &str,
        created_by: Option<&str>,
        (now_ms, expires_at_ms): (i64, i64),
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO app_join_tokens (digest, created_by, created_at_ms, expires_at_ms) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(digest)
        .bind(created_by)
        .bind(now_ms)
        .bind(expires_at_ms)
        .execute(&self.pools.writer)
        .await?;
        Ok(())
    }

    /// Whether the token `digest` could enrol an app now (unknown, used and expired
    /// tokens cannot): checked before anything is signed for it.
    pub(crate) async fn app_token_usable(
        &self,
        digest: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM app_join_tokens \
             WHERE digest = $1 AND used_at_ms IS NULL AND expires_at_ms > $2",
        )
        .bind(digest)
        .bind(now_ms)
        .fetch_optional(self.pool())
        .await?;
        Ok(found.is_some())
    }

    /// Spends the token `digest` (once, before its expiry) to enrol `app`, in one
    /// transaction; `None` when the token is unknown, used or expired.
    pub(crate) async fn join_app(
        &self,
        digest: &str,
        app: &NewApp,
        now_ms: i64,
    ) -> Result<Option<AppRow>, StoreError> {
        let mut tx = self.pools.writer.begin().await?;
        let spent: Option<i64> = sqlx::query_scalar(
            "UPDATE app_join_tokens SET used_at_ms = $1, app_id = $2 \
             WHERE digest = $3 AND used_at_ms IS NULL AND expires_at_ms > $1 \
             RETURNING created_at_ms",
        )
        .bind(now_ms)
        .bind(&app.id)
        .bind(digest)
        .fetch_optional(&mut *tx)
        .await?;
        if spent.is_none() {
            return Ok(None);
        }
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO apps (id, name, cert_sha256, cert_serial, cert_not_after_ms, \
             enrolled_at_ms) VALUES ($1, $2, $3, $4, $5, $6) RETURNING {APP_COLUMNS}"
        )))
        .bind(&app.id)
        .bind(&app.name)
        .bind(&app.cert_sha256)
        .bind(&app.cert_serial)
        .bind(app.cert_not_after_ms)
        .bind(now_ms)
        .fetch_one(&mut *tx)
        .await?;
        let row = app_from(&row)?;
        tx.commit().await?;
        Ok(Some(row))
    }

    /// The id of the enrolled, unrevoked app whose certificate has SHA-256 `sha`, while
    /// that certificate is valid.
    pub(crate) async fn admitted_app(
        &self,
        sha: &str,
        now_ms: i64,
    ) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM apps WHERE cert_sha256 = $1 AND revoked_at_ms IS NULL \
             AND cert_not_after_ms > $2",
        )
        .bind(sha)
        .bind(now_ms)
        .fetch_optional(self.pool())
        .await?)
    }

    /// Every enrolled app, oldest first.
    pub(crate) async fn apps(&self) -> Result<Vec<AppRow>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {APP_COLUMNS} FROM apps ORDER BY enrolled_at_ms, id"
        )))
        .fetch_all(self.pool())
        .await?;
        Ok(rows.iter().map(app_from).collect::<Result<_, _>>()?)
    }

    /// Revokes app `id` (a second revocation keeps the first's time); `None` when there
    /// is no such app.
    pub(crate) async fn revoke_app(
        &self,
        id: &str,
        now_ms: i64,
    ) -> Result<Option<AppRow>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE apps SET revoked_at_ms = COALESCE(revoked_at_ms, $1) WHERE id = $2 \
             RETURNING {APP_COLUMNS}"
        )))
        .bind(now_ms)
        .bind(id)
        .fetch_optional(&self.pools.writer)
        .await?;
        Ok(row.as_ref().map(app_from).transpose()?)
    }
}
