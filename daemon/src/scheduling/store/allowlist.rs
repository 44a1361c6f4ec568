//! The command allow-list's SQL: its entries, the one-time seed from
//! `STUDIO_COMMAND_ALLOWLIST`, and changes (added and removed in one transaction, which
//! on PostgreSQL also tells the other members on [`ALLOWLIST_CHANNEL`]).

use sqlx::Row;

use super::SchedStore;
use crate::store::StoreError;

/// PostgreSQL's channel on which a member that changed the list tells the others, who
/// keep it in memory too (payload: the sender's member id); delivered at commit.
pub(crate) const ALLOWLIST_CHANNEL: &str = "studio_allowlist";

/// Marks the seed as done; written once, at the first start of a `state.db`.
const SEEDED_FACT: &str = "allowlist_seeded_at_ms";

/// One allowed executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AllowEntry {
    pub executable: String,
    pub added_at_ms: i64,
    pub added_by: String,
}

impl SchedStore {
    /// Every entry, by executable.
    pub(crate) async fn allowlist(&self) -> Result<Vec<AllowEntry>, StoreError> {
        let rows = sqlx::query(
            "SELECT executable, added_at_ms, added_by FROM command_allowlist ORDER BY executable",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(AllowEntry {
                    executable: r.try_get("executable")?,
                    added_at_ms: r.try_get("added_at_ms")?,
                    added_by: r.try_get("added_by")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }

    /// Stores `entries` if this database was never seeded; afterwards the stored list is
    /// the owner's and the environment no longer matters. Whether it seeded now.
    pub(in crate::scheduling) async fn seed_allowlist(
        &self,
        entries: &[String],
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.writer.begin().await?;
        let first = sqlx::query(
            "INSERT INTO daemon_facts (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(SEEDED_FACT)
        .bind(now_ms.to_string())
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if first {
            for executable in entries {
                insert(&mut tx, executable, "seed", now_ms).await?;
            }
        }
        tx.commit().await?;
        Ok(first)
    }

    /// Adds and removes in one transaction; the names that actually changed.
    pub(in crate::scheduling) async fn change_allowlist(
        &self,
        add: &[String],
        remove: &[String],
        by: &str,
        now_ms: i64,
    ) -> Result<(Vec<String>, Vec<String>), StoreError> {
        let mut tx = self.writer.begin().await?;
        let mut added = Vec::new();
        for executable in add {
            if insert(&mut tx, executable, by, now_ms).await? {
                added.push(executable.clone());
            }
        }
        let mut removed = Vec::new();
        for executable in remove {
            let gone = sqlx::query("DELETE FROM command_allowlist WHERE executable = $1")
                .bind(executable)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if gone == 1 {
                removed.push(executable.clone());
            }
        }
        if self.url.is_some() && !(added.is_empty() && removed.is_empty()) {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(ALLOWLIST_CHANNEL)
                .bind(self.member())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok((added, removed))
    }
}

async fn insert(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    executable: &str,
    by: &str,
    now_ms: i64,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "INSERT INTO command_allowlist (executable, added_at_ms, added_by) VALUES ($1, $2, $3) \
         ON CONFLICT (executable) DO NOTHING",
    )
    .bind(executable)
    .bind(now_ms)
    .bind(by)
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected() == 1)
}
