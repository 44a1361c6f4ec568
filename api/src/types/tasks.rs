//! `/api/tasks`: on-demand tasks (docs/TASKS.md), their attempts and their events.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{RunListItem, schedule::TaskSpec};

/// Where a task stands. `queued` waits for a worker; `leased` is claimed by one that has
/// not started it; `running`; then its latest attempt's end (`completed`, `failed`,
/// `timed_out`, `cancelled`); `retry_wait` between attempts; `awaiting_approval`,
/// `denied` and `expired` as for runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Queued,
    Leased,
    Running,
    Completed,
    Failed,
    TimedOut,
    Cancelled,
    RetryWait,
    AwaitingApproval,
    Denied,
    Expired,
}

/// Every [`TaskStatus`] word, for filters and their documentation.
pub const TASK_STATUSES: [&str; 11] = [
    "queued",
    "leased",
    "running",
    "completed",
    "failed",
    "timed_out",
    "cancelled",
    "retry_wait",
    "awaiting_approval",
    "denied",
    "expired",
];

impl TaskStatus {
    pub const ALL: [TaskStatus; 11] = [
        Self::Queued,
        Self::Leased,
        Self::Running,
        Self::Completed,
        Self::Failed,
        Self::TimedOut,
        Self::Cancelled,
        Self::RetryWait,
        Self::AwaitingApproval,
        Self::Denied,
        Self::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Leased => "leased",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
            Self::RetryWait => "retry_wait",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Denied => "denied",
            Self::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Whether the task has ended.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed
                | Self::Failed
                | Self::TimedOut
                | Self::Cancelled
                | Self::Denied
                | Self::Expired
        )
    }
}

/// One task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Task {
    pub id: String,
    pub status: TaskStatus,
    /// Why it ended as it did (its latest attempt's reason).
    pub reason: Option<String>,
    /// The spec as submitted (labels sorted, without repeats).
    pub spec: TaskSpec,
    /// SHA-256 of the spec's canonical JSON: what an idempotent resubmission compares.
    pub spec_sha256: String,
    /// No enrolled worker has its labels: it waits until one that has them joins.
    pub unmatched: bool,
    pub attempts: i64,
    /// When its next attempt is due (`retry_wait` only).
    #[schema(format = DateTime)]
    pub next_attempt_at: Option<String>,
    /// Its latest attempt (a run of kind `task`).
    pub last_run_id: Option<String>,
    /// The session that submitted it, or `daemon` for the daemon token.
    pub submitted_by: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    #[schema(format = DateTime)]
    pub finished_at: Option<String>,
}

/// One page of tasks, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskPage {
    pub tasks: Vec<Task>,
    /// Pass back as `cursor` (with the same filters) for the next page; `null` at the end.
    pub next_cursor: Option<String>,
}

/// One task with its attempts, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskDetail {
    pub task: Task,
    pub attempts: Vec<RunListItem>,
}

/// `event: task`: a task was submitted or changed status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskEvent {
    pub id: String,
    pub status: TaskStatus,
    pub reason: Option<String>,
    pub attempts: i64,
    pub last_run_id: Option<String>,
}
