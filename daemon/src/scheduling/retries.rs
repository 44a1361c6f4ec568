//! Retries of a schedule's occurrences (`policies.retry`, docs/TASKS.md): a run that
//! ended in an outcome its schedule retries carries when its next attempt is due (the
//! store decides it in the run's terminal transaction). One task sleeps until the
//! earliest such instant — a run's end wakes it — and claims each due attempt as a new
//! run of the same occurrence (`attempt + 1`, `replaces_run_id`), which takes over the
//! occurrence in the claim's own transaction, so an attempt is made once. An attempt of
//! an approval-gated schedule waits for a new grant; a retry is not counted against
//! `max_runs` again, and the fire's gates are not asked again.

use std::{sync::Arc, time::Duration};

use studio_contract::time::now_ms;

use super::{
    Scheduler, approval,
    engine::arm,
    model::{RunKind, RunRow},
    store::{Claim, Cursor},
};
use crate::{error::chain, store::StoreError};

/// The longest the retry task sleeps before it looks again.
const IDLE: Duration = Duration::from_secs(60);

impl Scheduler {
    pub(super) async fn retry_forever(self: Arc<Self>) {
        let stop = self.stop.clone();
        loop {
            let sleep = match self.retry_pass().await {
                Ok(Some(next)) => Duration::from_millis(
                    u64::try_from(next.saturating_sub(now_ms())).unwrap_or(0) + 1,
                ),
                Ok(None) => IDLE,
                Err(error) => {
                    tracing::error!(error = %chain(&error), "retry pass failed; again in 1 s");
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                () = tokio::time::sleep(sleep.min(IDLE)) => {}
                () = self.retry_wake.notified() => {}
                () = stop.triggered() => return,
            }
        }
    }

    /// Makes every due attempt; when the next one is due.
    async fn retry_pass(self: &Arc<Self>) -> Result<Option<i64>, StoreError> {
        for failed in self.store.due_retries(now_ms()).await? {
            self.retry(failed).await?;
        }
        self.store.next_run_retry().await
    }

    /// The next attempt of `failed`'s occurrence, if its schedule still runs.
    async fn retry(self: &Arc<Self>, failed: RunRow) -> Result<(), StoreError> {
        let schedule = match &failed.schedule_id {
            Some(id) => self.store.schedule(id).await?,
            None => None,
        };
        let armed = schedule.filter(|row| row.enabled).and_then(|row| {
            arm(&row, &self.default_zone)
                .ok()
                .map(|(spec, _)| (row, spec))
        });
        let Some((row, spec)) = armed else {
            tracing::info!(run = %failed.id, "schedule gone or disabled: retry given up");
            return self.store.drop_retry(&failed.id).await;
        };
        let kind = RunKind::parse(&failed.kind).unwrap_or(RunKind::Recovery);
        let request = approval::request_now(&spec, None);
        let mut run = self.new_run(&row, &spec, kind, failed.scheduled_at_ms, None, request);
        run.occurrence_key = failed.occurrence_key.clone();
        run.attempt = failed.attempt + 1;
        run.replaces_run_id = Some(failed.id.clone());
        run.counted = false;
        let Some(term) = self.term() else {
            // No longer leading: the next leader makes the attempt.
            return Ok(());
        };
        match self
            .claim_and_launch(run, &row, Cursor::Retry { term }, None)
            .await
        {
            Ok(Claim::Claimed(..)) => {
                self.metrics.retries.inc();
            }
            Ok(_) => {}
            Err(error) => tracing::error!(run = %failed.id, error = %error, "retry not claimed"),
        };
        Ok(())
    }
}
