//! `GET /api/audit`: the audit trail, newest first.

use serde::{Deserialize, Serialize};
use studio_contract::role::Role;
use utoipa::ToSchema;

/// Every kind of audit row: the epoch's start and stop, pairing, sessions, the
/// allow-list, and each change to a schedule or run made through the API.
pub const AUDIT_KINDS: [&str; 35] = [
    "epoch_started",
    "epoch_stopped",
    "pairing_minted",
    "pairing_redeemed",
    "pairing_failed",
    "session_revoked",
    "role_changed",
    "allowlist_changed",
    "schedule_created",
    "schedule_updated",
    "schedule_enabled",
    "schedule_disabled",
    "schedule_deleted",
    "run_triggered",
    "run_cancelled",
    "approval_granted",
    "approval_denied",
    "task_submitted",
    "task_cancelled",
    "task_retried",
    "worker_token_created",
    "worker_joined",
    "worker_revoked",
    "secret_set",
    "secret_deleted",
    "endpoint_created",
    "endpoint_deleted",
    "retention_policy_set",
    "retention_pass",
    "wal_checkpoint",
    "archive_restored",
    "epoch_rotated",
    "app_token_created",
    "app_joined",
    "app_revoked",
];

/// One row of the trail. Rows are never changed nor removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    /// Increases with each row; the trail's order.
    pub id: i64,
    #[schema(format = DateTime)]
    pub at: String,
    /// One of [`AUDIT_KINDS`].
    pub kind: String,
    /// The daemon epoch it happened in.
    pub epoch: String,
    /// Who: a paired browser's session id, or `daemon` for the daemon token; absent for
    /// what studiod did by itself.
    pub principal: Option<String>,
    /// The role it acted with (absent on rows older than roles in the trail).
    pub role: Option<Role>,
    /// The origin its request came from (a browser's; absent from the terminal).
    pub origin: Option<String>,
    /// What changed: `schedule:ID`, `run:ID`.
    pub object: Option<String>,
    /// The schedule the change concerns (a run's own schedule for a run).
    pub schedule_id: Option<String>,
    /// What to know of it: names, revisions, statuses, never a value of a secret or an
    /// environment variable.
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

/// One page of the trail, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    /// Pass back as `cursor` (with the same filters) for the next page; `null` at the end.
    pub next_cursor: Option<String>,
}
