//! The scheduler's write path: every change an API call asks for (a schedule created,
//! revised, enabled or disabled, deleted; a declaration plan applied; a manual trigger;
//! a cancel) is a method here that takes who asks ([`Actor`]), writes through the store
//! with its audit row in the same transaction, publishes the events the store returned
//! and re-arms the due-time queue, in that order. Handlers call these and
//! read through `Scheduler::reads`; the store's writes, `publish` and `rearm` are
//! private to `scheduling`, so no other path can write or announce a change.

use std::sync::Arc;

use serde_json::json;
use studio_contract::time::now_ms;

use super::{
    Scheduler, approval,
    define::toggled_row,
    engine::{EngineError, arm},
    model::{RunKind, RunRow, ScheduleRow},
    store::{Claim, Cursor, Note, PlanError, PlanWrite},
};
use crate::audit::{Actor, Kind};

impl Scheduler {
    /// Stores a new schedule (`NameTaken` when its name is in use) and arms it.
    pub(crate) async fn create_schedule(
        &self,
        row: &ScheduleRow,
        by: &Actor,
    ) -> Result<(), EngineError> {
        let detail = json!({ "name": row.name, "revision": row.revision });
        let note = Note::schedule(by, Kind::ScheduleCreated, &row.id, detail);
        let event = self.store.insert_schedule(row, Some(&note)).await?;
        self.publish(event);
        self.rearm(row);
        Ok(())
    }

    /// Replaces a schedule's row if it is still at `expected_revision` (`Moved` when it
    /// is not, `NameTaken` when the new name is in use), and re-arms it.
    pub(crate) async fn update_schedule(
        &self,
        row: &ScheduleRow,
        expected_revision: i64,
        by: &Actor,
    ) -> Result<(), EngineError> {
        self.write_schedule(row, expected_revision, by, Kind::ScheduleUpdated)
            .await
    }

    /// The one update: the row, its audit row of `kind` and its event, then the re-arm.
    async fn write_schedule(
        &self,
        row: &ScheduleRow,
        expected_revision: i64,
        by: &Actor,
        kind: Kind,
    ) -> Result<(), EngineError> {
        let detail = json!({
            "name": row.name,
            "revision": row.revision,
            "from_revision": expected_revision,
        });
        let note = Note::schedule(by, kind, &row.id, detail);
        let events = self
            .store
            .update_schedule(row, expected_revision, Some(&note))
            .await?
            .ok_or(EngineError::Moved)?;
        for event in events {
            self.publish(event);
        }
        self.rearm(row);
        Ok(())
    }

    /// Enables (re-armed on its existing timeline) or disables a schedule; the new row.
    pub(crate) async fn set_enabled(
        &self,
        id: &str,
        enabled: bool,
        by: &Actor,
    ) -> Result<ScheduleRow, EngineError> {
        let current = self
            .store
            .schedule(id)
            .await?
            .ok_or(EngineError::ScheduleNotFound)?;
        let row = toggled_row(&current, enabled, &self.default_zone, now_ms())?;
        let kind = if enabled {
            Kind::ScheduleEnabled
        } else {
            Kind::ScheduleDisabled
        };
        self.write_schedule(&row, current.revision, by, kind)
            .await?;
        Ok(row)
    }

    /// Deletes a schedule (its runs stay, detached) and takes it out of the queue.
    pub(crate) async fn delete_schedule(&self, id: &str, by: &Actor) -> Result<(), EngineError> {
        let events = self
            .store
            .delete_schedule(id, now_ms(), Some(by))
            .await?
            .ok_or(EngineError::ScheduleNotFound)?;
        for event in events {
            self.publish(event);
        }
        self.forget(id);
        Ok(())
    }

    /// Writes a declaration plan in one transaction (nothing when a row moved), then
    /// publishes its events and re-arms (or forgets) every schedule it wrote.
    pub(crate) async fn apply_plan(
        &self,
        writes: &[PlanWrite],
        by: &Actor,
    ) -> Result<(), PlanError> {
        for event in self.store.apply_plan(writes, now_ms(), Some(by)).await? {
            self.publish(event);
        }
        for write in writes {
            match write {
                PlanWrite::Insert(row) | PlanWrite::Update { row, .. } => self.rearm(row),
                PlanWrite::Delete { row, .. } => self.forget(&row.id),
                PlanWrite::Check { .. } => {}
            }
        }
        Ok(())
    }

    /// `POST /api/schedules/{id}/trigger`: a counted run now; the cursor (and so an `at`
    /// trigger) is left alone. Overlap and rate limits are for the clock, not for a person
    /// asking; budget and `max_runs` hold for both.
    pub(crate) async fn trigger(
        self: &Arc<Self>,
        id: &str,
        by: &Actor,
    ) -> Result<RunRow, EngineError> {
        let row = self
            .store
            .schedule(id)
            .await?
            .ok_or(EngineError::ScheduleNotFound)?;
        let (spec, _) = arm(&row, &self.default_zone)?;
        // A gated run's budget is decided when it is granted.
        let approval = approval::request_now(&spec, Some(&by.principal));
        if approval.is_none()
            && let Some(budget) = spec.policies.budget_usd
            && self.store.spend(id).await? >= budget
        {
            return Err(EngineError::BudgetExhausted);
        }
        let run = self.new_run(&row, &spec, RunKind::Manual, None, None, approval);
        let detail = json!({ "schedule": row.name });
        let note = Note::run(by, Kind::RunTriggered, &run.id, Some(id), detail);
        match self
            .claim_and_launch(run, &row, Cursor::Keep, Some(&note))
            .await?
        {
            Claim::Claimed(run, _, after) => {
                // The last allowed run disarms the schedule.
                if after.is_none() {
                    self.forget(id);
                }
                Ok(*run)
            }
            Claim::MaxRunsReached => Err(EngineError::MaxRunsReached),
            Claim::Lost => Err(EngineError::ScheduleNotFound),
        }
    }

    /// `POST /api/runs/{id}/cancel`: a person cancels an active run (reason
    /// `cancelled_by_user`).
    pub(crate) async fn cancel_run(&self, run_id: &str, by: &Actor) -> Result<RunRow, EngineError> {
        self.cancel(run_id, "cancelled_by_user", Some(by)).await
    }
}
