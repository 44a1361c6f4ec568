//! `GET /api/admin/readiness`: whether this studiod can do its work now, and why not
//! (docs/OPERATIONS.md, "Health and metrics"). `/health` stays the light liveness probe.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The readiness assessment. Answered `200` when `ready`, else `503` with the same body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Readiness {
    pub ready: bool,
    /// One line for each check that failed.
    pub problems: Vec<String>,
    /// A write to `state.db` committed (and how long it took).
    pub store_writable: bool,
    pub store_write_ms: f64,
    /// Now less the oldest due instant of an enabled schedule not yet claimed (0 when none
    /// is overdue).
    pub scheduler_lag_ms: i64,
    /// Runs and tasks waiting to start.
    pub queued_runs: i64,
    pub queued_tasks: i64,
    /// Remote workers with an open assignment stream, and those enrolled and not revoked.
    pub workers_connected: i64,
    pub workers_enrolled: i64,
    /// Free bytes for studiod on the home's filesystem.
    pub disk_free_bytes: u64,
    /// When retention last pruned, and when the store's WAL was last checkpointed by it
    /// (`null` until retention has run).
    #[schema(format = DateTime)]
    pub last_retention_pass_at: Option<String>,
    #[schema(format = DateTime)]
    pub last_checkpoint_at: Option<String>,
    #[schema(format = DateTime)]
    pub checked_at: String,
}
