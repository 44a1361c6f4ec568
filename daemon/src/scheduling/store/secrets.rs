//! The `secrets` table: sealed values (never a plaintext; `crate::secrets`), who set
//! them, and which schedules and unfinished tasks name them.

use sqlx::Row;

use super::{SchedStore, audit, audit::Note};
use crate::{secrets::Sealed, store::StoreError};

/// A secret as listed: never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SecretRow {
    pub name: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub updated_by: Option<String>,
}

/// What a deletion did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SecretDeleted {
    /// The secret as it was.
    Deleted(SecretRow),
    NotFound,
    /// Named by these schedules and unfinished tasks: kept.
    InUse(Vec<String>),
}

/// The schedules (by name) and the unfinished tasks (`task ID`) that name secret `?1`.
const USERS: &str = "\
    SELECT s.name FROM schedules s, json_each(s.spec, '$.secrets') j WHERE j.value = $1 \
    UNION ALL \
    SELECT 'task ' || t.id FROM tasks t, json_each(t.spec, '$.secrets') j WHERE j.value = $1 \
      AND t.status IN ('queued', 'leased', 'running', 'retry_wait', 'awaiting_approval') \
    ORDER BY 1";

impl SchedStore {
    /// Sets secret `name` to `sealed` with `note`'s audit row; `true` when it is new.
    pub(crate) async fn put_secret(
        &self,
        name: &str,
        sealed: &Sealed,
        note: &Note<'_>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.writer.begin().await?;
        let existed: Option<i64> = sqlx::query_scalar("SELECT 1 FROM secrets WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO secrets (name, nonce, ciphertext, created_at_ms, updated_at_ms, \
             updated_by) VALUES ($1, $2, $3, $4, $4, $5) ON CONFLICT (name) DO UPDATE SET \
             nonce = excluded.nonce, ciphertext = excluded.ciphertext, \
             updated_at_ms = excluded.updated_at_ms, updated_by = excluded.updated_by",
        )
        .bind(name)
        .bind(&sealed.nonce)
        .bind(&sealed.ciphertext)
        .bind(now_ms)
        .bind(&note.by.principal)
        .execute(&mut *tx)
        .await?;
        audit::append(&mut tx, note, now_ms).await?;
        tx.commit().await?;
        Ok(existed.is_none())
    }

    /// Deletes secret `name` with `note`'s audit row, unless a schedule or an unfinished
    /// task names it (checked in the deleting transaction).
    pub(crate) async fn delete_secret(
        &self,
        name: &str,
        note: &Note<'_>,
        now_ms: i64,
    ) -> Result<SecretDeleted, StoreError> {
        let mut tx = self.writer.begin().await?;
        let users: Vec<String> = sqlx::query_scalar(USERS)
            .bind(name)
            .fetch_all(&mut *tx)
            .await?;
        if !users.is_empty() {
            return Ok(SecretDeleted::InUse(users));
        }
        let gone: Option<(i64, i64, Option<String>)> = sqlx::query_as(
            "DELETE FROM secrets WHERE name = $1 RETURNING created_at_ms, updated_at_ms, updated_by",
        )
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((created_at_ms, updated_at_ms, updated_by)) = gone else {
            return Ok(SecretDeleted::NotFound);
        };
        audit::append(&mut tx, note, now_ms).await?;
        tx.commit().await?;
        Ok(SecretDeleted::Deleted(SecretRow {
            name: name.to_owned(),
            created_at_ms,
            updated_at_ms,
            updated_by,
        }))
    }

    /// Every secret by name, without values.
    pub(crate) async fn secrets(&self) -> Result<Vec<SecretRow>, StoreError> {
        let rows: Vec<(String, i64, i64, Option<String>)> = sqlx::query_as(
            "SELECT name, created_at_ms, updated_at_ms, updated_by FROM secrets ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(name, created_at_ms, updated_at_ms, updated_by)| SecretRow {
                    name,
                    created_at_ms,
                    updated_at_ms,
                    updated_by,
                },
            )
            .collect())
    }

    /// The names of every secret.
    pub(crate) async fn secret_names(&self) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT name FROM secrets ORDER BY name")
            .fetch_all(&self.pool)
            .await?)
    }

    /// Which schedules (by name) and unfinished tasks name secret `name`.
    pub(crate) async fn secret_users(&self, name: &str) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(USERS)
            .bind(name)
            .fetch_all(&self.pool)
            .await?)
    }

    /// The sealed values of those of `names` that exist.
    pub(crate) async fn sealed_secrets(
        &self,
        names: &[&str],
    ) -> Result<Vec<(String, Sealed)>, StoreError> {
        let mut found = Vec::with_capacity(names.len());
        for name in names {
            let row = sqlx::query("SELECT nonce, ciphertext FROM secrets WHERE name = $1")
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
            if let Some(row) = row {
                let sealed = Sealed {
                    nonce: row.try_get("nonce")?,
                    ciphertext: row.try_get("ciphertext")?,
                };
                found.push(((*name).to_owned(), sealed));
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
impl SchedStore {
    /// Every row of every table of a PostgreSQL store as text (a `bytea` in hex), for the
    /// tests that look for a value in clear where SQLite's would read the file itself.
    pub(crate) async fn postgres_rows_text(&self) -> String {
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'",
        )
        .fetch_all(&self.pool)
        .await
        .expect("tables");
        let mut all = String::new();
        for table in tables {
            let rows: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT string_agg(t::text, chr(10)) FROM {table} AS t"
            )))
            .fetch_one(&self.pool)
            .await
            .expect("rows");
            all.push_str(&rows.unwrap_or_default());
        }
        all
    }
}
