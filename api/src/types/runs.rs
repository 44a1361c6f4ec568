//! `/api/runs`: a run, its status changes, and its pages.

use serde::{Deserialize, Serialize};
use studio_schedule::Action;
use utoipa::ToSchema;

/// A run's status; every change is a compare-and-set the daemon records as a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    Completed,
    Failed,
    TimedOut,
    Cancelled,
    Skipped,
}

impl RunStatus {
    /// Every status's word, in `ALL`'s order (filters offer these).
    pub const WORDS: [&'static str; 7] = [
        "queued",
        "running",
        "completed",
        "failed",
        "timed_out",
        "cancelled",
        "skipped",
    ];

    pub const ALL: [RunStatus; 7] = [
        Self::Queued,
        Self::Running,
        Self::Completed,
        Self::Failed,
        Self::TimedOut,
        Self::Cancelled,
        Self::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        Self::WORDS[self as usize]
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Whether the run has ended (every status but `queued` and `running`).
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Queued | Self::Running)
    }
}

/// Why a run exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// An occurrence of the trigger.
    Scheduled,
    /// `POST /api/schedules/{id}/trigger`.
    Manual,
    /// The one catch-up run of `missed_fire: run_once`, or the replacement of a run that
    /// was never launched.
    Recovery,
    /// An `on_success` / `on_fail` follow-up.
    Chain,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Manual => "manual",
            Self::Recovery => "recovery",
            Self::Chain => "chain",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Scheduled, Self::Manual, Self::Recovery, Self::Chain]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// What every view of a run shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunCore {
    pub id: String,
    /// `null` for a run whose schedule was deleted.
    pub schedule_id: Option<String>,
    pub kind: RunKind,
    pub status: RunStatus,
    /// Why it has its status (`dispatched`, `exit_code`, `cancelled_by_user`, …).
    pub reason: Option<String>,
    /// What ran (or would run).
    pub action: Option<Action>,
    /// The occurrence it stands for; `null` for manual runs.
    #[schema(format = DateTime)]
    pub scheduled_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub dispatched_at: Option<String>,
    #[schema(format = DateTime)]
    pub finished_at: Option<String>,
    pub duration_ms: Option<i64>,
    pub pid: Option<i64>,
    /// The absolute path that ran (an allowed name as resolved at launch).
    pub program: Option<String>,
    /// 1, or one more than the run this one replaces.
    pub attempt: i64,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub stdout_bytes: Option<i64>,
    pub stderr_bytes: Option<i64>,
    pub cost_usd: Option<f64>,
    pub tokens: Option<i64>,
    /// Whether it counts toward the schedule's `max_runs`.
    pub counted: bool,
    pub chain_parent_id: Option<String>,
    pub chain_depth: i64,
    pub replaces_run_id: Option<String>,
}

impl RunCore {
    /// Whether the run is still queued or running.
    pub fn active(&self) -> bool {
        !self.status.is_terminal()
    }
}

/// A run with the tails of its output: the answer to a trigger or a cancel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Run {
    #[serde(flatten)]
    pub core: RunCore,
    /// The last bytes of stdout, when finished.
    pub stdout_tail: Option<String>,
    pub stderr_tail: Option<String>,
}

/// `GET /api/runs/{id}`: a run and every status change it went through.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunDetail {
    #[serde(flatten)]
    pub run: Run,
    pub transitions: Vec<Transition>,
}

/// A run as lists show it: no output tails, its schedule's name beside its id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunListItem {
    #[serde(flatten)]
    pub core: RunCore,
    pub schedule_name: Option<String>,
}

/// One status change of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Transition {
    /// `null` for the run's creation.
    pub from: Option<RunStatus>,
    pub to: RunStatus,
    pub reason: Option<String>,
    #[schema(format = DateTime)]
    pub at: String,
}

/// `GET /api/runs` and `GET /api/schedules/{id}/runs`: one page, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunPage {
    pub runs: Vec<RunListItem>,
    /// Pass back as `cursor` (with the same filters) for the next page; `null` at the end.
    pub next_cursor: Option<String>,
}
