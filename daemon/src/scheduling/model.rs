//! The scheduler's rows and vocabularies, as stored and as the API shows them.

use serde::Serialize;
use serde_json::{Value, json};
use studio_contract::time::rfc3339;

/// A run's status; every change is a compare-and-set recorded in `run_transitions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RunStatus {
    Queued,
    Running,
    Completed,
    Failed,
    TimedOut,
    Cancelled,
    Skipped,
}

impl RunStatus {
    pub(crate) const ALL: [RunStatus; 7] = [
        Self::Queued,
        Self::Running,
        Self::Completed,
        Self::Failed,
        Self::TimedOut,
        Self::Cancelled,
        Self::Skipped,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
            Self::Skipped => "skipped",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    pub(crate) fn is_terminal(self) -> bool {
        !matches!(self, Self::Queued | Self::Running)
    }
}

/// Why a run exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RunKind {
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
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Manual => "manual",
            Self::Recovery => "recovery",
            Self::Chain => "chain",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScheduleRow {
    pub id: String,
    pub name: String,
    /// The authored spec, canonical JSON.
    pub spec: String,
    pub enabled: bool,
    pub trigger_kind: String,
    pub timezone: Option<String>,
    pub timezone_source: Option<String>,
    pub anchor_ms: i64,
    pub next_fire_at_ms: Option<i64>,
    pub last_fired_at_ms: Option<i64>,
    /// The trigger's tightest gap between fires (`Armed::cadence_ms`); `None` for `at`.
    pub cadence_ms: Option<i64>,
    pub max_runs: Option<i64>,
    pub runs_counted: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub revision: i64,
    /// `declaration` when a ScheduleSet document applied it; NULL when made by hand.
    pub managed_by: Option<String>,
    /// The owning document, `<project>/<metadata.name>`.
    pub owner_key: Option<String>,
    /// Where the owning document was read from (as the client named it).
    pub source: Option<String>,
    /// What its runs add up to, kept by the database (never written from a row).
    pub stats: ScheduleStats,
}

/// A schedule's rollups of its runs (migration 0004): maintained by triggers on `runs`
/// in the same transaction as the run's own change, so they never disagree with it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ScheduleStats {
    /// Whether any run (of any kind or status) names the schedule.
    pub has_runs: bool,
    /// The newest finished top-level run that completed, failed or timed out.
    pub last_outcome: Option<Outcome>,
    /// The reported cost of all its runs.
    pub spend_usd: f64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub status: String,
    pub at_ms: i64,
}

impl Outcome {
    pub(crate) fn status(&self) -> Option<RunStatus> {
        RunStatus::parse(&self.status)
    }
}

/// The `managed_by` of a schedule applied from a declaration document.
pub(crate) const MANAGED_BY_DECLARATION: &str = "declaration";

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunRow {
    pub id: String,
    pub schedule_id: Option<String>,
    pub occurrence_key: Option<String>,
    pub kind: String,
    pub status: String,
    pub reason: Option<String>,
    pub action: String,
    pub scheduled_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub dispatched_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub pid: Option<i64>,
    /// The absolute path that ran (an allowed name as resolved at launch).
    pub program: Option<String>,
    /// 1, or one more than the run this one replaces.
    pub attempt: i64,
    /// The job leader as dispatched (pid, start time, boot), when all three were recorded.
    pub leader: Option<studio_runner::ProcessIdentity>,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub stdout_tail: Option<String>,
    pub stderr_tail: Option<String>,
    pub stdout_bytes: Option<i64>,
    pub stderr_bytes: Option<i64>,
    pub cost_usd: Option<f64>,
    pub tokens: Option<i64>,
    pub counted: bool,
    pub chain_parent_id: Option<String>,
    pub chain_depth: i64,
    pub replaces_run_id: Option<String>,
    pub follow_ups: Option<String>,
}

fn time(ms: Option<i64>) -> Value {
    ms.map_or(Value::Null, |m| Value::String(rfc3339(m)))
}

impl RunRow {
    pub(crate) fn status(&self) -> Option<RunStatus> {
        RunStatus::parse(&self.status)
    }

    /// The API's view of a run.
    pub(crate) fn view(&self) -> Value {
        let action: Value = serde_json::from_str(&self.action).unwrap_or(Value::Null);
        let duration_ms = match (self.dispatched_at_ms, self.finished_at_ms) {
            (Some(start), Some(end)) => Value::from(end - start),
            _ => Value::Null,
        };
        json!({
            "id": self.id,
            "schedule_id": self.schedule_id,
            "kind": self.kind,
            "status": self.status,
            "reason": self.reason,
            "action": action,
            "scheduled_at": time(self.scheduled_at_ms),
            "created_at": rfc3339(self.created_at_ms),
            "dispatched_at": time(self.dispatched_at_ms),
            "finished_at": time(self.finished_at_ms),
            "duration_ms": duration_ms,
            "pid": self.pid,
            "program": self.program,
            "attempt": self.attempt,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail,
            "stdout_bytes": self.stdout_bytes,
            "stderr_bytes": self.stderr_bytes,
            "cost_usd": self.cost_usd,
            "tokens": self.tokens,
            "counted": self.counted,
            "chain_parent_id": self.chain_parent_id,
            "chain_depth": self.chain_depth,
            "replaces_run_id": self.replaces_run_id,
        })
    }
}

/// One status change of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TransitionRow {
    pub from_status: Option<String>,
    pub to_status: String,
    pub reason: Option<String>,
    pub at_ms: i64,
}

impl TransitionRow {
    pub(crate) fn view(&self) -> Value {
        json!({
            "from": self.from_status,
            "to": self.to_status,
            "reason": self.reason,
            "at": rfc3339(self.at_ms),
        })
    }
}

/// One entry of the event log (`/api/events`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EventRow {
    pub seq: i64,
    pub kind: String,
    pub data: String,
}
