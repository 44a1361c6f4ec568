//! `GET /api/events`: the payloads of the server-sent events (`event:` names the kind).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{RunKind, RunStatus};

/// `event: run`: a run was created or changed status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunEvent {
    pub id: String,
    pub schedule_id: Option<String>,
    /// The name the run ran under (absent in events from before names were kept).
    pub schedule_name: Option<String>,
    pub kind: RunKind,
    pub status: RunStatus,
    pub reason: Option<String>,
    /// Why it failed, in one line, once it has ([`crate::RunCore::error_line`]).
    pub error_line: Option<String>,
}

/// What happened to a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleOp {
    Created,
    Updated,
    Deleted,
}

/// `event: schedule`: a schedule was created, changed or deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleEvent {
    pub id: String,
    pub name: String,
    pub op: ScheduleOp,
    pub enabled: bool,
    #[schema(format = DateTime)]
    pub next_fire_at: Option<String>,
}
