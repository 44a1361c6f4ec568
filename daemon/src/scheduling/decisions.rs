//! A person's decision on an approval request, and the expiry of the requests nobody
//! decided. A grant commits (request `granted`, run `queued` and counted, evidence and
//! audit rows) before the run is handed to the runner, which consumes the grant as the
//! run takes its slot: a crash between the two leaves a `queued` run that recovery
//! launches once, like any other.

use std::{sync::Arc, time::Duration};

use studio_api::ApprovalStatus;
use studio_contract::time::now_ms;

use super::{
    CrashPoint, Scheduler,
    engine::{EngineError, arm},
    model::{RunRow, RunStatus},
    store::{ApprovalRow, Decided, Verdict},
};
use crate::{audit::Actor, error::chain};

/// The longest the expiry sleeps before it looks again (a request raised meanwhile wakes
/// it at once).
const EXPIRY_SLEEP: Duration = Duration::from_secs(60);
/// Requests expired per pass (each in its own short transaction).
const EXPIRED_AT_ONCE: i64 = 100;

impl Scheduler {
    /// Grants (`grant`) or denies request `id` for `by`, a paired browser whose decision
    /// token the front door resolved; the request and its run as decided.
    pub(crate) async fn decide(
        self: &Arc<Self>,
        id: &str,
        grant: bool,
        by: &Actor,
        reason: Option<&str>,
    ) -> Result<(ApprovalRow, RunRow), EngineError> {
        let verdict = if grant {
            Verdict::Grant {
                hold: self.hold_for(id, by).await?,
            }
        } else {
            Verdict::Deny
        };
        let decided = self.store.decide(id, verdict, by, reason, now_ms()).await?;
        let (approval, run, events) = match decided {
            Decided::Done {
                approval,
                run,
                events,
            } => (approval, run, events),
            Decided::NotFound => return Err(EngineError::ApprovalNotFound),
            Decided::NotPending(status) if status == ApprovalStatus::Voided.as_str() => {
                return Err(EngineError::ApprovalStale);
            }
            Decided::NotPending(status) => return Err(EngineError::ApprovalNotPending(status)),
            Decided::SameRequester => return Err(EngineError::RequesterCannotApprove),
            Decided::Expired(events) => {
                for event in events {
                    self.publish(event);
                }
                return Err(EngineError::ApprovalExpired);
            }
        };
        for event in events {
            self.publish(event);
        }
        if run.status() == Some(RunStatus::Queued) {
            CrashPoint::reached(self.config.crash_at, CrashPoint::AfterGrant, &self.run_dir);
            self.relaunch((*run).clone()).await?;
        }
        Ok((*approval, *run))
    }

    /// What holds a granted run back now (its schedule's overlap and budget), judged only
    /// for a request that can still be granted: a refused grant must not cancel a running
    /// run under `overlap: replace`.
    async fn hold_for(&self, id: &str, by: &Actor) -> Result<Option<&'static str>, EngineError> {
        let Some(a) = self.store.approval(id).await? else {
            return Ok(None);
        };
        let open = a.status() == Some(ApprovalStatus::Pending) && now_ms() < a.expires_at_ms;
        let same = a.distinct_from_requester && a.requested_by.as_deref() == Some(&by.principal);
        let Some(schedule_id) = a.schedule_id.as_deref().filter(|_| open && !same) else {
            return Ok(None);
        };
        let Some(row) = self.store.schedule(schedule_id).await? else {
            return Ok(None);
        };
        let (spec, _) = arm(&row, &self.default_zone)?;
        self.hold(&row, &spec).await
    }

    /// Ends requests nobody decided in time (and their runs) `expired`: sleeps until the
    /// next expiry, or until a new request is raised.
    pub(super) async fn expire_forever(self: Arc<Self>) {
        let stop = self.stop.clone();
        loop {
            let sleep = match self.expire_pass().await {
                Ok(Some(next)) => {
                    Duration::from_millis(u64::try_from(next - now_ms()).unwrap_or(0) + 1)
                }
                Ok(None) => EXPIRY_SLEEP,
                Err(error) => {
                    tracing::error!(error = %chain(&error), "approval expiry failed; retrying");
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                () = tokio::time::sleep(sleep.min(EXPIRY_SLEEP)) => {}
                () = self.expiry_wake.notified() => {}
                () = stop.triggered() => return,
            }
        }
    }

    /// One pass: expires what is due; when the next request expires.
    async fn expire_pass(&self) -> Result<Option<i64>, crate::store::StoreError> {
        loop {
            let events = self.store.expire_due(now_ms(), EXPIRED_AT_ONCE).await?;
            let more = events.len() >= 2 * usize::try_from(EXPIRED_AT_ONCE).unwrap_or(0);
            for event in events {
                self.publish(event);
            }
            if !more {
                break;
            }
        }
        self.store.next_expiry().await
    }
}
