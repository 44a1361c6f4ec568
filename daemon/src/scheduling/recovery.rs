//! What a daemon start finds: runs a previous daemon left behind, settled by the
//! evidence their shims left in `runs/<id>/` (`docs/SHIMS.md`), never by a guess:
//!
//! - `running`, no shim ever recorded itself: under the home lock none can any more, so
//!   the job never started; tombstoned and replaced in one transaction, then launched;
//! - `running`, an outcome recorded: the run ends with it (the job ran once);
//! - `running`, its shim alive (pid, start time and boot all match): **adopted**: shown
//!   running, followed by pidfd, its outcome recorded when it ends;
//! - `running`, its shim gone without an outcome: `failed`, `shim_lost` (what is left of
//!   the job's group is killed if its leader still matches), or `launch_uncertain` when
//!   the shim died before recording the job, or `host_rebooted` after a reboot;
//! - `queued`: never started, launched now.
//!
//! A run dispatched by a daemon older than the shims has no evidence: `daemon_lost`.
//! The stale-run reaper then finishes, every minute, any `running` run no job backs.

use std::{io, sync::Arc, time::Duration};

use studio_contract::time::now_ms;
use studio_runner::{
    ProcessIdentity,
    evidence::{self, Evidence},
};

use super::{
    engine::{Scheduler, arm},
    launch::Owner,
    model::{RunRow, RunStatus},
};
use crate::{error::chain, store::StoreError};

const REAP_EVERY: Duration = Duration::from_secs(60);
/// A run younger than this may still be on its way to being tracked.
const REAP_AFTER_MS: i64 = 60_000;
/// The event log keeps this many entries.
const EVENTS_KEPT: i64 = 100_000;
/// Hourly run counts are kept this long (the cockpit charts the last 24 hours).
const RUN_COUNTS_KEPT_MS: i64 = 31 * 24 * 3_600_000;

/// The remote worker an attempt runs on (its lease, not studiod's evidence, settles it).
fn remote_worker(run: &RunRow) -> Option<&str> {
    run.worker_id
        .as_deref()
        .filter(|w| *w != super::store::BUILTIN)
}

impl Scheduler {
    pub(super) async fn recover(self: &Arc<Self>) -> Result<(), StoreError> {
        let now = now_ms();
        for run in self.store.own_active_runs().await? {
            if let Some(worker) = remote_worker(&run) {
                // Its worker runs it, and reconnects: its lease decides, not this start.
                self.active().insert(
                    run.id.clone(),
                    super::engine::Active {
                        worker: Some(worker.to_owned()),
                        ..Default::default()
                    },
                );
                continue;
            }
            match run.status() {
                Some(RunStatus::Running) => {
                    let found = evidence::classify(&self.runs_dir.join(&run.id), &self.boot_id);
                    match found {
                        Ok(Evidence::NeverStarted) if run.dispatched_at_ms.is_some() => {
                            let leader = run.leader.clone();
                            self.lost(&run, "daemon_lost", leader.as_ref()).await?;
                        }
                        Ok(Evidence::NeverStarted) => self.replace(&run, now).await?,
                        found => self.settle_by_evidence(run, found).await?,
                    }
                }
                Some(RunStatus::Queued) => self.relaunch(run).await?,
                _ => {}
            }
        }
        // (The leader gives remote attempts a full lease to reconnect as it takes
        // office: `Scheduler::take_office`.)
        Ok(())
    }

    /// Tombstones a run that never started and launches its replacement.
    async fn replace(self: &Arc<Self>, run: &RunRow, now: i64) -> Result<(), StoreError> {
        let new_id = uuid::Uuid::now_v7().to_string();
        if let Some((replacement, events)) =
            self.store.tombstone_and_replace(run, &new_id, now).await?
        {
            tracing::warn!(run = %run.id, replacement = %replacement.id, "never-started run replaced");
            events.into_iter().for_each(|e| self.publish(e));
            self.relaunch(replacement).await?;
        }
        Ok(())
    }

    /// Settles a `running` run whose folder shows a shim did start (any evidence but
    /// [`Evidence::NeverStarted`]).
    pub(super) async fn settle_by_evidence(
        self: &Arc<Self>,
        run: RunRow,
        found: io::Result<Evidence>,
    ) -> Result<(), StoreError> {
        match found {
            Ok(Evidence::Ended(outcome)) => {
                self.stamp_launch(&run).await?;
                let schedule = self.schedule_of(&run).await?;
                self.record_outcome(&run, schedule.as_ref(), &outcome).await
            }
            Ok(Evidence::Supervised { shim }) => {
                self.adopt(run, shim);
                Ok(())
            }
            Ok(Evidence::SupervisorLost { job }) => self.lost(&run, "shim_lost", Some(&job)).await,
            Ok(Evidence::Rebooted) => self.lost(&run, "host_rebooted", None).await,
            // (`NeverStarted` is the callers' to act on; here it would be a misuse, and
            // the safe reading is the uncertain one.)
            Ok(Evidence::Uncertain | Evidence::NeverStarted) => {
                let detail = "[studio] the job's shim died after recording itself and before \
                              recording the job: it may or may not have started, so it is not \
                              started again\n";
                tracing::warn!(run = %run.id, "launch uncertain");
                self.fail(&run, RunStatus::Running, "launch_uncertain", detail.into())
                    .await
            }
            Err(e) => {
                tracing::warn!(run = %run.id, error = %e, "launch evidence unreadable");
                let detail = format!("[studio] the run's launch evidence cannot be read: {e}\n");
                self.fail(&run, RunStatus::Running, "launch_uncertain", detail)
                    .await
            }
        }
    }

    /// Takes over a run whose shim outlived the daemon that launched it: the run stays
    /// `running`, counts against the concurrency limit when a slot is free (a job that
    /// runs is never held back), can be cancelled, and ends with the outcome its shim
    /// records.
    fn adopt(self: &Arc<Self>, run: RunRow, shim: ProcessIdentity) {
        let pgid = evidence::job(&self.runs_dir.join(&run.id)).map(|job| job.pid);
        tracing::info!(run = %run.id, shim = shim.pid, "adopted a running job from its shim");
        self.active().insert(
            run.id.clone(),
            super::engine::Active {
                schedule_id: run.schedule_id.clone(),
                ..Default::default()
            },
        );
        let slot = self.slots.clone().try_acquire_owned().ok();
        let this = self.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let supervised = async {
                // Shown with its job's pid at once, not only when it ends.
                this.stamp_launch(&run).await?;
                let schedule = this.schedule_of(&run).await?;
                this.supervise(&run, schedule.as_ref(), &shim, pgid).await
            };
            if let Err(error) = supervised.await {
                tracing::error!(run = %run.id, error = %chain(&error), "adopted run supervision failed");
            }
            this.active().remove(&run.id);
            this.tasks_changed();
            this.retry_wake.notify_one();
        });
    }

    pub(super) async fn schedule_of(
        &self,
        run: &RunRow,
    ) -> Result<Option<super::model::ScheduleRow>, StoreError> {
        match &run.schedule_id {
            Some(id) => self.store.schedule(id).await,
            None => Ok(None),
        }
    }

    /// Derives the cadence of schedules stored before it was kept (migration 0006); a
    /// spec that cannot be armed keeps none and is simply never `overdue`.
    pub(super) async fn fill_cadences(&self, now: i64) -> Result<(), StoreError> {
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

    pub(super) async fn relaunch(self: &Arc<Self>, run: RunRow) -> Result<(), StoreError> {
        if run.task_id.is_some() && run.worker_id.is_none() {
            // A granted task's attempt: a worker's claim takes it over.
            self.tasks_changed();
            return Ok(());
        }
        let owner = match &run.task_id {
            Some(task_id) => self.store.task(task_id).await?.map(Owner::Task),
            None => self.schedule_of(&run).await?.map(Owner::Schedule),
        };
        if let Some(Owner::Schedule(row)) = &owner
            && super::engine::targeted(row)
        {
            // It waits for a worker that serves its target, not for this studiod.
            self.active().insert(
                run.id.clone(),
                super::engine::Active {
                    schedule_id: run.schedule_id.clone(),
                    targeted: true,
                    ..Default::default()
                },
            );
            self.tasks_changed();
            return Ok(());
        }
        let Some(owner) = owner else {
            let from = run.status().unwrap_or(RunStatus::Queued);
            let detail = "[studio] the schedule was deleted before the run started\n".into();
            return self.fail(&run, from, "schedule_deleted", detail).await;
        };
        self.active().insert(
            run.id.clone(),
            super::engine::Active {
                schedule_id: run.schedule_id.clone(),
                ..Default::default()
            },
        );
        self.launch(run, owner, None);
        Ok(())
    }

    /// Ends a `running` run no live shim backs: kills what is left of the job's group
    /// while `leader` is still the very process recorded (pid, start time and boot all
    /// match; a reused pid or another boot is left alone), and marks it failed.
    async fn lost(
        &self,
        run: &RunRow,
        reason: &str,
        leader: Option<&ProcessIdentity>,
    ) -> Result<(), StoreError> {
        if let Some(leader) = leader
            && leader.kill_group(&self.boot_id)
        {
            tracing::warn!(run = %run.id, pgid = leader.pid, "killed the remains of a lost job");
        }
        let why = match reason {
            "daemon_lost" => "the studiod that launched the job is gone, and the job with it",
            "shim_lost" => "the job's shim ended without recording how the job ended",
            "host_rebooted" => "the machine restarted while the job ran",
            _ => "no live job backs the run",
        };
        self.fail(run, RunStatus::Running, reason, format!("[studio] {why}\n"))
            .await
    }

    pub(super) async fn reap_forever(self: Arc<Self>) {
        let stop = self.stop.clone();
        loop {
            tokio::select! {
                () = tokio::time::sleep(REAP_EVERY) => {}
                () = stop.triggered() => return,
            }
            if let Err(error) = self.reap().await {
                tracing::error!(error = %chain(&error), "reaper pass failed");
            }
        }
    }

    pub(super) async fn reap(self: &Arc<Self>) -> Result<(), StoreError> {
        let now = now_ms();
        let stale: Vec<RunRow> = self
            .store
            .own_active_runs()
            .await?
            .into_iter()
            .filter(|r| {
                r.status() == Some(RunStatus::Running) && now - r.created_at_ms > REAP_AFTER_MS
            })
            .filter(|r| !self.active().contains_key(&r.id) && remote_worker(r).is_none())
            .collect();
        for run in stale {
            // A shim may still be behind it (its daemon-side task failed): its folder says.
            match evidence::classify(&self.runs_dir.join(&run.id), &self.boot_id) {
                Ok(Evidence::NeverStarted) => {
                    tracing::warn!(run = %run.id, "stale run reaped");
                    let leader = run.leader.clone();
                    self.lost(&run, "stale", leader.as_ref()).await?;
                }
                found => self.settle_by_evidence(run, found).await?,
            }
        }
        if self.term().is_some() {
            // The cluster's tables: pruned by the leader alone.
            self.store.prune_events(EVENTS_KEPT).await?;
            self.store
                .prune_run_counts(now - RUN_COUNTS_KEPT_MS)
                .await?;
        }
        Ok(())
    }
}
