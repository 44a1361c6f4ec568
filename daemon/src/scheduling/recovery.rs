//! What a daemon start finds: runs a previous daemon left behind.
//!
//! - `running`, never dispatched: tombstoned and replaced in one transaction, then
//!   launched (at-least-once up to a confirmed launch);
//! - `running`, dispatched: its job died with the daemon that launched it (the leader
//!   had a parent-death signal); what is left of its process group is killed and the run
//!   is `failed` with reason `daemon_lost`, never re-fired (at-most-once after launch);
//! - `queued`: never started, launched now.
//!
//! The stale-run reaper then finishes, every minute, any `running` run no job backs.

use std::{sync::Arc, time::Duration};

use rustix::process::{Pid, Signal, kill_process_group};
use studio_contract::time::now_ms;

use super::{
    engine::{Scheduler, arm},
    model::{RunRow, RunStatus},
    store::Finish,
};
use crate::{error::chain, store::StoreError};

const REAP_EVERY: Duration = Duration::from_secs(60);
/// A run younger than this may still be on its way to being tracked.
const REAP_AFTER_MS: i64 = 60_000;
/// The event log keeps this many entries.
const EVENTS_KEPT: i64 = 100_000;
/// Hourly run counts are kept this long (the cockpit charts the last 24 hours).
const RUN_COUNTS_KEPT_MS: i64 = 31 * 24 * 3_600_000;

impl Scheduler {
    pub(super) async fn recover(self: &Arc<Self>) -> Result<(), StoreError> {
        let now = now_ms();
        for run in self.store.active_runs().await? {
            match (run.status(), run.dispatched_at_ms) {
                (Some(RunStatus::Running), Some(_)) => self.lost(&run, "daemon_lost").await?,
                (Some(RunStatus::Running), None) => {
                    let new_id = uuid::Uuid::now_v7().to_string();
                    if let Some((replacement, events)) =
                        self.store.tombstone_and_replace(&run, &new_id, now).await?
                    {
                        tracing::warn!(run = %run.id, replacement = %replacement.id, "never-dispatched run replaced");
                        events.into_iter().for_each(|e| self.publish(e));
                        self.relaunch(replacement).await?;
                    }
                }
                (Some(RunStatus::Queued), _) => self.relaunch(run).await?,
                _ => {}
            }
        }
        self.fill_cadences(now).await
    }

    /// Derives the cadence of schedules stored before it was kept (migration 0006); a
    /// spec that cannot be armed keeps none and is simply never `overdue`.
    async fn fill_cadences(&self, now: i64) -> Result<(), StoreError> {
        for row in self.store.schedules_without_cadence().await? {
            match arm(&row, &self.default_zone) {
                Ok((_, armed)) => {
                    if let Some(c) = armed.cadence_ms(now, row.anchor_ms) {
                        self.store.set_cadence(&row.id, c).await?;
                    }
                }
                Err(e) => tracing::warn!(schedule = %row.id, error = %e, "no cadence"),
            }
        }
        Ok(())
    }

    async fn relaunch(self: &Arc<Self>, run: RunRow) -> Result<(), StoreError> {
        let Some(schedule) = (match &run.schedule_id {
            Some(id) => self.store.schedule(id).await?,
            None => None,
        }) else {
            return self.lost(&run, "schedule_deleted").await;
        };
        self.active().insert(
            run.id.clone(),
            super::engine::Active {
                schedule_id: run.schedule_id.clone(),
                ..Default::default()
            },
        );
        self.launch(run, schedule, None);
        Ok(())
    }

    /// Ends a run no live job backs: kills its group if its leader is still the very
    /// process recorded (pid, start time and boot all match), and marks it failed.
    async fn lost(&self, run: &RunRow, reason: &str) -> Result<(), StoreError> {
        match &run.leader {
            Some(leader) if leader.is_running(&self.boot_id) => {
                let pgid = i32::try_from(leader.pid).ok().and_then(Pid::from_raw);
                if let Some(pgid) = pgid
                    && kill_process_group(pgid, Signal::KILL).is_ok()
                {
                    tracing::warn!(run = %run.id, pgid = leader.pid, "killed the remains of a lost job");
                }
            }
            // Gone, another process under a reused pid, another boot, or never recorded:
            // nothing of this run's to signal.
            _ => {}
        }
        let from = run.status().unwrap_or(RunStatus::Running);
        let finish = Finish {
            stderr_tail: Some(format!(
                "[studio] the run was ended at daemon start: {reason}\n"
            )),
            ..Finish::default()
        };
        if let Some((_, event)) = self
            .store
            .transition(
                &run.id,
                from,
                RunStatus::Failed,
                Some(reason),
                Some(&finish),
                now_ms(),
            )
            .await?
        {
            self.publish(event);
        }
        Ok(())
    }

    pub(super) async fn reap_forever(self: Arc<Self>) {
        let mut stop = self.stop.clone();
        loop {
            tokio::select! {
                () = tokio::time::sleep(REAP_EVERY) => {}
                () = crate::stop_requested(&mut stop) => return,
            }
            if let Err(error) = self.reap().await {
                tracing::error!(error = %chain(&error), "reaper pass failed");
            }
        }
    }

    async fn reap(&self) -> Result<(), StoreError> {
        let now = now_ms();
        let stale: Vec<RunRow> = self
            .store
            .active_runs()
            .await?
            .into_iter()
            .filter(|r| {
                r.status() == Some(RunStatus::Running) && now - r.created_at_ms > REAP_AFTER_MS
            })
            .filter(|r| !self.active().contains_key(&r.id))
            .collect();
        for run in stale {
            tracing::warn!(run = %run.id, "stale run reaped");
            self.lost(&run, "stale").await?;
        }
        self.store.prune_events(EVENTS_KEPT).await?;
        self.store
            .prune_run_counts(now - RUN_COUNTS_KEPT_MS)
            .await?;
        Ok(())
    }
}
