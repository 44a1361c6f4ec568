//! On-demand tasks (docs/TASKS.md): a submission (idempotent, refused when its
//! concurrency key's queue is full), a cancel, a retry by hand, and studiod's built-in
//! worker, which also queues again the tasks whose next attempt is due. The
//! built-in worker takes a run slot first, then claims the task it serves that the fair
//! order picks, and launches its attempt through the same runner and shims as any run;
//! the task follows its attempt in the store, in the attempt's own transactions.

use std::sync::{Arc, PoisonError};

use serde_json::json;
use studio_contract::time::now_ms;
use studio_schedule::TaskSpec;

use super::{
    Scheduler,
    engine::{Active, EngineError},
    launch::Owner,
    store::{BUILTIN, Candidate, NewTask, Note, Submitted, TaskRow},
};
use crate::{
    audit::{Actor, Kind},
    error::chain,
    store::StoreError,
};

/// A built-in attempt's lease: it is renewed by the runner's own supervision, so it only
/// bounds how long a claim may sit unstarted.
const LEASE_MS: i64 = 30_000;
/// The longest the built-in worker waits before it looks at the queue again (a
/// submission wakes it at once).
const IDLE: std::time::Duration = std::time::Duration::from_secs(60);

/// The fair order across priorities: a smooth weighted round robin over the levels that
/// have a claimable task, each weighing its priority plus one. A level that waits gains
/// credit, so a stream of high-priority tasks never starves a low one.
#[derive(Debug, Default)]
pub(crate) struct Fairness {
    credit: [i64; 10],
}

impl Fairness {
    /// The candidate to claim next.
    pub(crate) fn pick<'a>(&mut self, candidates: &'a [Candidate]) -> Option<&'a Candidate> {
        let weight = |p: i64| p.clamp(0, 9) + 1;
        let level = |p: i64| usize::try_from(p.clamp(0, 9)).unwrap_or(0);
        let total: i64 = candidates.iter().map(|c| weight(c.priority)).sum();
        for c in candidates {
            self.credit[level(c.priority)] += weight(c.priority);
        }
        let best = candidates
            .iter()
            .max_by_key(|c| (self.credit[level(c.priority)], c.priority))?;
        self.credit[level(best.priority)] -= total;
        Some(best)
    }
}

/// The canonical JSON of a spec and its SHA-256.
fn sealed_spec(spec: &TaskSpec) -> (String, String) {
    let value = serde_json::to_value(spec).unwrap_or_default();
    // A spec holds strings, booleans and integers only: always canonical.
    let bytes = studio_evidence::canonical(&value).unwrap_or_default();
    let sha = studio_evidence::sha256_hex(&bytes);
    (String::from_utf8(bytes).unwrap_or_default(), sha)
}

impl Scheduler {
    /// Submits a validated task for `by`: the task, and whether it is new (an idempotent
    /// resubmission answers the existing one).
    pub(crate) async fn submit_task(
        &self,
        spec: &TaskSpec,
        by: &Actor,
    ) -> Result<(TaskRow, bool), EngineError> {
        let (text, sha) = sealed_spec(spec);
        let id = uuid::Uuid::now_v7().to_string();
        let new = NewTask {
            id: id.clone(),
            idempotency_key: spec.idempotency_key.clone(),
            spec: text,
            spec_sha256: sha,
            labels_key: spec.labels_key(),
            priority: i64::from(spec.priority),
            concurrency: spec
                .concurrency
                .as_ref()
                .map(|c| (c.key.clone(), i64::from(c.limit))),
            submitted_by: by.principal.clone(),
            approval: super::approval::task_request(spec, Some(&by.principal), now_ms()),
        };
        let note = Note {
            by,
            kind: Kind::TaskSubmitted,
            object: format!("task:{id}"),
            schedule_id: None,
            detail: json!({
                "labels": spec.labels,
                "priority": spec.priority,
                "idempotency_key": spec.idempotency_key,
            }),
        };
        match self.store.submit_task(&new, &note, now_ms()).await? {
            Submitted::Created(task, events) => {
                self.publish_all(events);
                if new.approval.is_some() {
                    self.expiry_wake.notify_one();
                }
                self.tasks_changed();
                Ok((*task, true))
            }
            Submitted::Existing(task) => Ok((*task, false)),
            Submitted::Conflict(task) => Err(EngineError::IdempotencyConflict(task.id)),
            Submitted::QueueFull => Err(EngineError::QueueFull),
        }
    }

    /// Cancels a task: a queued one at once, one with a running attempt through that
    /// attempt (the task follows it). The task as it stands after.
    pub(crate) async fn cancel_task(&self, id: &str, by: &Actor) -> Result<TaskRow, EngineError> {
        let task = self
            .store
            .task(id)
            .await?
            .ok_or(EngineError::TaskNotFound)?;
        let note = Note {
            by,
            kind: Kind::TaskCancelled,
            object: format!("task:{id}"),
            schedule_id: None,
            detail: json!({ "status": task.status }),
        };
        if let Some((task, event)) = self.store.cancel_queued_task(id, &note, now_ms()).await? {
            self.publish(event);
            return Ok(task);
        }
        match task.last_run_id.as_deref() {
            Some(run) if !task.status().is_some_and(|s| s.is_terminal()) => {
                self.cancel(run, "cancelled_by_user", Some(by)).await?;
                Ok(self.store.task(id).await?.unwrap_or(task))
            }
            _ => Err(EngineError::TaskNotActive),
        }
    }

    /// Queues an ended task for another attempt now (or a waiting one at once), for
    /// `by`; the task.
    pub(crate) async fn retry_task(&self, id: &str, by: &Actor) -> Result<TaskRow, EngineError> {
        let task = self
            .store
            .task(id)
            .await?
            .ok_or(EngineError::TaskNotFound)?;
        let note = Note {
            by,
            kind: Kind::TaskRetried,
            object: format!("task:{id}"),
            schedule_id: None,
            detail: json!({ "status": task.status, "attempts": task.attempts }),
        };
        let (task, event) = self
            .store
            .retry_task(id, &note, now_ms())
            .await?
            .ok_or(EngineError::TaskNotFinished)?;
        self.publish(event);
        self.tasks_changed();
        Ok(task)
    }

    /// The labels the built-in worker serves.
    pub(crate) fn local_labels(&self) -> &[String] {
        &self.config.local_labels
    }

    /// studiod's built-in worker: while a run slot is free and a task it serves waits,
    /// claims one and launches its attempt.
    pub(super) async fn work_forever(self: Arc<Self>) {
        let stop = self.stop.clone();
        loop {
            let permit = tokio::select! {
                permit = self.slots.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
                () = stop.triggered() => return,
            };
            match self.claim_one().await {
                Ok(Some((task, run))) => {
                    self.active().insert(
                        run.id.clone(),
                        Active {
                            schedule_id: None,
                            ..Active::default()
                        },
                    );
                    self.launch(run, Owner::Task(task), Some(permit));
                    continue;
                }
                Ok(None) => drop(permit),
                Err(error) => {
                    drop(permit);
                    tracing::error!(error = %chain(&error), "task claim failed; retrying in 1 s");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    continue;
                }
            }
            // Until a task is submitted or a slot frees, or the next retry is due; on a
            // shared database, at most the slow poll under other processes' notices.
            let idle = if self.store.shared_url().is_some() {
                super::listen::SHARED_IDLE
            } else {
                IDLE
            };
            let idle = match self.store.next_retry().await {
                Ok(Some(at)) => {
                    let wait = u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0);
                    idle.min(std::time::Duration::from_millis(wait + 1))
                }
                Ok(None) => idle,
                Err(error) => {
                    tracing::error!(error = %chain(&error), "cannot read the next retry");
                    std::time::Duration::from_secs(1)
                }
            };
            tokio::select! {
                () = self.task_wake.notified() => {}
                () = tokio::time::sleep(idle) => {}
                () = stop.triggered() => return,
            }
        }
    }

    /// Claims the task the fair order picks among those the built-in worker serves.
    async fn claim_one(&self) -> Result<Option<(TaskRow, super::model::RunRow)>, StoreError> {
        // Tasks whose next attempt is due wait again like any queued task.
        let released = self.store.release_retries(now_ms()).await?;
        if !released.is_empty() {
            // Every worker may serve what came back to the queue.
            self.publish_all(released);
            self.work_signal.send_modify(|n| *n += 1);
        }
        // Another claimer may take a candidate first: look again a few times.
        for _ in 0..3 {
            let candidates = self.store.claim_candidates(self.local_labels()).await?;
            let picked = self
                .fairness
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pick(&candidates)
                .cloned();
            let Some(picked) = picked else {
                return Ok(None);
            };
            if let Some((task, run, events)) = self
                .store
                .claim_task(&picked.id, BUILTIN, LEASE_MS, now_ms())
                .await?
            {
                self.publish_all(events);
                return Ok(Some((task, run)));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(priority: i64) -> Candidate {
        Candidate {
            id: format!("p{priority}"),
            priority,
        }
    }

    #[test]
    fn the_fair_order_serves_every_level_by_its_weight() {
        let mut fair = Fairness::default();
        let candidates = [at(9), at(0)];
        let mut picks = [0; 2];
        for _ in 0..110 {
            let id = fair.pick(&candidates).expect("a pick").id.clone();
            picks[usize::from(id == "p0")] += 1;
        }
        // Weights 10 and 1: ten 9s for each 0, and the 0 is never starved.
        assert_eq!(picks, [100, 10]);
        assert!(Fairness::default().pick(&[]).is_none());
    }
}
