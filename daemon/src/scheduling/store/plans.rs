//! The declaration plan's one transaction: inserts, compare-and-set updates and deletes,
//! each with its event; the first row found moved rolls the whole plan back.

use studio_api::ScheduleOp;

use super::{
    SchedStore,
    approvals::restate,
    audit::{self, Note},
    events::{append_event, schedule_event},
    is_unique_violation,
    schedules::{insert_row, update_row},
};
use crate::{
    audit::{Actor, Kind},
    scheduling::model::{EventRow, ScheduleRow},
    store::StoreError,
};

/// One write of a declaration plan (see [`SchedStore::apply_plan`]).
#[derive(Debug, Clone)]
pub(crate) enum PlanWrite {
    Insert(ScheduleRow),
    /// Replaces the row whose id is `row.id` if it is still at `expected_revision`.
    Update {
        row: ScheduleRow,
        expected_revision: i64,
    },
    Delete {
        row: ScheduleRow,
        expected_revision: i64,
    },
    /// Writes nothing; fails the plan if the row moved past `expected_revision`.
    Check {
        id: String,
        name: String,
        expected_revision: i64,
    },
}

impl PlanWrite {
    fn name(&self) -> &str {
        match self {
            Self::Insert(row) | Self::Update { row, .. } | Self::Delete { row, .. } => &row.name,
            Self::Check { name, .. } => name,
        }
    }
}

/// Why a declaration plan was not written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlanError {
    /// A row changed (or a name was taken) since the plan was made: nothing written.
    #[error("{0} changed since the plan was made")]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for PlanError {
    fn from(e: sqlx::Error) -> Self {
        Self::Store(StoreError::from(e))
    }
}

impl SchedStore {
    /// Executes a declaration plan in one writer transaction: every insert, update and
    /// delete with its event, each update and delete a compare-and-set on the revision.
    /// The first write that finds its row moved (or its name taken) rolls everything back.
    #[tracing::instrument(skip_all, fields(writes = writes.len()))]
    pub(in crate::scheduling) async fn apply_plan(
        &self,
        writes: &[PlanWrite],
        now_ms: i64,
        by: Option<&Actor>,
    ) -> Result<Vec<EventRow>, PlanError> {
        let mut tx = self.writer.begin().await?;
        let mut events = Vec::new();
        for write in writes {
            let (done, event) = match write {
                PlanWrite::Insert(row) => (
                    insert_row(&mut tx, row).await?,
                    Some((row, ScheduleOp::Created)),
                ),
                PlanWrite::Update {
                    row,
                    expected_revision,
                } => {
                    // An adoption may rename onto a name taken meanwhile: a conflict too.
                    let done = match update_row(&mut tx, row, *expected_revision).await {
                        Err(e) if is_unique_violation(&e) => false,
                        other => other?,
                    };
                    (done, Some((row, ScheduleOp::Updated)))
                }
                PlanWrite::Delete {
                    row,
                    expected_revision,
                } => {
                    let deleted =
                        sqlx::query("DELETE FROM schedules WHERE id = $1 AND revision = $2")
                            .bind(&row.id)
                            .bind(expected_revision)
                            .execute(&mut *tx)
                            .await?;
                    (
                        deleted.rows_affected() == 1,
                        Some((row, ScheduleOp::Deleted)),
                    )
                }
                PlanWrite::Check {
                    id,
                    expected_revision,
                    ..
                } => {
                    let same: Option<i64> = sqlx::query_scalar(
                        "SELECT 1 FROM schedules WHERE id = $1 AND revision = $2",
                    )
                    .bind(id)
                    .bind(expected_revision)
                    .fetch_optional(&mut *tx)
                    .await?;
                    (same.is_some(), None)
                }
            };
            if !done {
                // Dropping the transaction rolls back what this plan wrote so far.
                return Err(PlanError::Conflict(write.name().to_owned()));
            }
            if let Some((row, op)) = event {
                // Open approval requests follow the change of what would run.
                if op != ScheduleOp::Created {
                    let spec = (op == ScheduleOp::Updated)
                        .then(|| serde_json::from_str(&row.spec).ok())
                        .flatten();
                    let key = &self.evidence_key;
                    let voided = restate(&mut tx, key, &row.id, spec.as_ref(), now_ms).await?;
                    events.extend(voided);
                }
                if let Some(by) = by {
                    let kind = match op {
                        ScheduleOp::Created => Kind::ScheduleCreated,
                        ScheduleOp::Updated => Kind::ScheduleUpdated,
                        ScheduleOp::Deleted => Kind::ScheduleDeleted,
                    };
                    let detail = serde_json::json!({
                        "name": row.name,
                        "revision": row.revision,
                        "via": "declarations",
                    });
                    audit::append(&mut tx, &Note::schedule(by, kind, &row.id, detail), now_ms)
                        .await?;
                }
                events.push(
                    append_event(&mut tx, "schedule", &schedule_event(row, op), now_ms).await?,
                );
            }
        }
        tx.commit().await?;
        Ok(events)
    }
}
