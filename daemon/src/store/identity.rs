//! The identity that belongs to the cluster rather than to one studiod
//! (docs/FLEETS.md, "Cluster-wide identity"): the epoch in `cluster.epoch`, pairing codes
//! as rows, the state of the principals a member holds in memory, and the announcements
//! (`NOTIFY studio_principals`) by which a member tells the others of a revocation, a
//! role change or a new epoch.

use sqlx::Row;
use studio_contract::{role::Role, secret::Digest};

use super::{PRINCIPAL_COLUMNS, PrincipalRow, Store, StoreError, principal_from};

/// The PostgreSQL channel of identity changes. Payload: `<member> <what> <id>`, `what`
/// one of `revoked`, `role` (the id a principal's) or `epoch` (the id the new epoch).
pub(crate) const PRINCIPALS_CHANNEL: &str = "studio_principals";

/// What a principal's row says of it now, for a member that holds it in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PrincipalState {
    pub id: String,
    pub role: Role,
    pub revoked: bool,
}

/// A principal with the digests of both its tokens: enough to hold it in memory.
#[derive(Debug, Clone)]
pub(crate) struct AdmissionRow {
    pub row: PrincipalRow,
    pub token_digest: Digest,
    pub decision_digest: Digest,
}

/// Which of a principal's tokens a lookup is by.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TokenKind {
    Admission,
    Decision,
}

fn digest_from(bytes: &[u8]) -> Result<Digest, sqlx::Error> {
    bytes
        .try_into()
        .map_err(|_| sqlx::Error::Decode("a token digest is not 32 bytes".into()))
}

fn role_from(text: &str) -> Result<Role, sqlx::Error> {
    Role::parse(text).ok_or_else(|| sqlx::Error::Decode(format!("unknown role {text:?}").into()))
}

impl Store {
    /// Records the epoch this studiod admits under and answers it with whether it is new.
    ///
    /// Alone on a SQLite file, `candidate` is always the new epoch (each start is one).
    /// On a shared database the cluster's epoch is adopted when there is one, so a
    /// member's start logs nobody out; `candidate` starts it otherwise.
    #[tracing::instrument(skip_all)]
    pub async fn begin_epoch(
        &self,
        candidate: &str,
        pid: u32,
        now_ms: i64,
    ) -> Result<(String, bool), StoreError> {
        let mut tx = self.pools.writer.begin().await?;
        if self.url().is_some() {
            let current: Option<String> =
                sqlx::query_scalar("SELECT epoch FROM cluster WHERE id = 1 FOR UPDATE")
                    .fetch_one(&mut *tx)
                    .await?;
            if let Some(epoch) = current {
                tx.commit().await?;
                return Ok((epoch, false));
            }
        }
        sqlx::query("INSERT INTO epochs (epoch, pid, started_at_ms) VALUES ($1, $2, $3)")
            .bind(candidate)
            .bind(i64::from(pid))
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE cluster SET epoch = $1 WHERE id = 1")
            .bind(candidate)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok((candidate.to_owned(), true))
    }

    /// Ends epoch `old` and starts `new` in its place; `Err` with the epoch that stands
    /// when `old` was no longer the cluster's (another member rotated it first).
    #[tracing::instrument(skip_all)]
    pub(crate) async fn rotate_epoch(
        &self,
        old: &str,
        new: &str,
        pid: u32,
        now_ms: i64,
    ) -> Result<Result<(), String>, StoreError> {
        let mut tx = self.pools.writer.begin().await?;
        sqlx::query("INSERT INTO epochs (epoch, pid, started_at_ms) VALUES ($1, $2, $3)")
            .bind(new)
            .bind(i64::from(pid))
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        let moved = sqlx::query("UPDATE cluster SET epoch = $1 WHERE id = 1 AND epoch = $2")
            .bind(new)
            .bind(old)
            .execute(&mut *tx)
            .await?;
        if moved.rows_affected() == 0 {
            tx.rollback().await?;
            let standing = self.cluster_epoch().await?.unwrap_or_default();
            return Ok(Err(standing));
        }
        sqlx::query(
            "UPDATE epochs SET stopped_at_ms = $1 WHERE epoch = $2 AND stopped_at_ms IS NULL",
        )
        .bind(now_ms)
        .bind(old)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// The epoch the cluster admits under (`None` before any member started).
    pub(crate) async fn cluster_epoch(&self) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT epoch FROM cluster WHERE id = 1")
            .fetch_one(&self.pools.writer)
            .await?)
    }

    /// Records a pairing code (its digest) minted in `epoch`, first removing what can no
    /// longer be redeemed (spent, expired, of another epoch) and, beyond `keep` codes
    /// outstanding, the oldest.
    #[tracing::instrument(skip_all)]
    pub(crate) async fn mint_code(
        &self,
        digest: &Digest,
        epoch: &str,
        role: Role,
        (now_ms, expires_at_ms): (i64, i64),
        keep: usize,
    ) -> Result<(), StoreError> {
        let mut tx = self.pools.writer.begin().await?;
        sqlx::query(
            "DELETE FROM pairing_codes \
             WHERE epoch <> $1 OR spent_at_ms IS NOT NULL OR expires_at_ms <= $2",
        )
        .bind(epoch)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        let outstanding: Vec<Vec<u8>> = sqlx::query_scalar(
            "SELECT digest FROM pairing_codes WHERE epoch = $1 \
             ORDER BY minted_at_ms DESC, digest DESC",
        )
        .bind(epoch)
        .fetch_all(&mut *tx)
        .await?;
        for old in outstanding.iter().skip(keep.saturating_sub(1)) {
            sqlx::query("DELETE FROM pairing_codes WHERE digest = $1")
                .bind(&old[..])
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query(
            "INSERT INTO pairing_codes (digest, epoch, role, minted_at_ms, expires_at_ms) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&digest[..])
        .bind(epoch)
        .bind(role.as_str())
        .bind(now_ms)
        .bind(expires_at_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Spends a pairing code of `epoch` that is unspent and unexpired, answering the
    /// role it was minted for; `None` when there is no such code. One statement: of two
    /// members redeeming one code at once, one spends it.
    #[tracing::instrument(skip_all)]
    pub(crate) async fn spend_code(
        &self,
        digest: &Digest,
        epoch: &str,
        now_ms: i64,
    ) -> Result<Option<Role>, StoreError> {
        let role: Option<String> = sqlx::query_scalar(
            "UPDATE pairing_codes SET spent_at_ms = $1 \
             WHERE digest = $2 AND epoch = $3 AND spent_at_ms IS NULL AND expires_at_ms > $1 \
             RETURNING role",
        )
        .bind(now_ms)
        .bind(&digest[..])
        .bind(epoch)
        .fetch_optional(&self.pools.writer)
        .await?;
        Ok(role.as_deref().map(role_from).transpose()?)
    }

    /// A principal found by the digest of one of its tokens, with both digests.
    #[tracing::instrument(skip_all)]
    pub(crate) async fn principal_for_admission(
        &self,
        kind: TokenKind,
        digest: &Digest,
    ) -> Result<Option<AdmissionRow>, StoreError> {
        let by = match kind {
            TokenKind::Admission => "token_digest",
            TokenKind::Decision => "decision_digest",
        };
        let sql = format!(
            "SELECT {PRINCIPAL_COLUMNS}, token_digest, decision_digest FROM principals \
             WHERE {by} = $1"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&digest[..])
            .fetch_optional(&self.pools.readers)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(AdmissionRow {
            row: principal_from(&row)?,
            token_digest: digest_from(&row.try_get::<Vec<u8>, _>("token_digest")?)?,
            decision_digest: digest_from(&row.try_get::<Vec<u8>, _>("decision_digest")?)?,
        }))
    }

    /// The role and revocation of every unexpired principal of `epoch`.
    #[tracing::instrument(skip_all)]
    pub(crate) async fn principal_states(
        &self,
        epoch: &str,
        now_ms: i64,
    ) -> Result<Vec<PrincipalState>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, role, revoked_at_ms FROM principals \
             WHERE epoch = $1 AND expires_at_ms > $2",
        )
        .bind(epoch)
        .bind(now_ms)
        .fetch_all(&self.pools.readers)
        .await?;
        let states = rows
            .iter()
            .map(|r| {
                Ok(PrincipalState {
                    id: r.try_get("id")?,
                    role: role_from(r.try_get("role")?)?,
                    revoked: r.try_get::<Option<i64>, _>("revoked_at_ms")?.is_some(),
                })
            })
            .collect::<Result<_, sqlx::Error>>()?;
        Ok(states)
    }

    /// Tells the other members sharing the database of an identity change (`what`
    /// `revoked` or `role` with a principal's id, `epoch` with the new epoch); nothing
    /// on SQLite, where there are no others.
    pub(crate) async fn announce_identity(
        &self,
        member: &str,
        what: &str,
        id: &str,
    ) -> Result<(), StoreError> {
        if self.url().is_some() {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(PRINCIPALS_CHANNEL)
                .bind(format!("{member} {what} {id}"))
                .execute(&self.pools.writer)
                .await?;
        }
        Ok(())
    }
}
