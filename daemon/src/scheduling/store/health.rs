//! What readiness and the metrics read of the store: a committed probe write, the queue's
//! depth, and the oldest due instant not yet claimed.

use super::SchedStore;
use crate::store::StoreError;

impl SchedStore {
    /// Copies `state.db` into the new file `dest` as one snapshot, on a reader (the
    /// writer goes on); its size.
    pub(crate) async fn backup_into(
        &self,
        dest: &std::path::Path,
    ) -> Result<u64, studio_store::BackupError> {
        if self.dialect == studio_store::Dialect::Postgres {
            return Err(studio_store::BackupError::NotAFile);
        }
        studio_store::backup_into(&self.pool, dest).await
    }

    /// Writes and commits the readiness probe's row.
    pub(crate) async fn probe_write(&self, now_ms: i64) -> Result<(), StoreError> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO health_probe (id, probed_at_ms) VALUES (1, $1) \
             ON CONFLICT (id) DO UPDATE SET probed_at_ms = excluded.probed_at_ms",
        )
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Runs and tasks waiting to start.
    pub(crate) async fn queue_depth(&self) -> Result<(i64, i64), StoreError> {
        let runs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE status = 'queued'")
            .fetch_one(&self.pool)
            .await?;
        let tasks: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tasks WHERE status = 'queued'")
            .fetch_one(&self.pool)
            .await?;
        Ok((runs, tasks))
    }

    /// The earliest due instant of an enabled schedule (claimed instants move on).
    pub(crate) async fn earliest_due(&self) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT MIN(next_fire_at_ms) FROM schedules WHERE enabled = 1 \
             AND next_fire_at_ms IS NOT NULL",
        )
        .fetch_one(&self.pool)
        .await?)
    }
}
