//! `/api/schedules`: a schedule as the API shows it, its pages, preview and deletion.

use serde::{Deserialize, Serialize};
use studio_schedule::{ScheduleSpec, Trigger};
use utoipa::ToSchema;

/// A schedule with its derived health and its runs' rollups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Schedule {
    pub id: String,
    pub name: String,
    /// The authored spec, as stored (canonical).
    pub spec: ScheduleSpec,
    pub enabled: bool,
    /// `cron`, `every` or `at`.
    pub trigger_kind: String,
    /// The IANA zone a cron trigger runs in.
    pub timezone: Option<String>,
    /// Where that zone came from: `spec` or `daemon_default`.
    pub timezone_source: Option<String>,
    #[schema(format = DateTime)]
    pub next_fire_at: Option<String>,
    #[schema(format = DateTime)]
    pub last_fired_at: Option<String>,
    /// `disabled`, `never-fired`, `no-evidence`, `overdue`, `failing` or `healthy`.
    pub health: String,
    /// The status of the newest finished top-level run that completed, failed or timed out.
    pub last_outcome: Option<String>,
    #[schema(format = DateTime)]
    pub last_outcome_at: Option<String>,
    pub max_runs: Option<i64>,
    /// Top-level runs started so far (what `max_runs` counts).
    pub runs_counted: i64,
    /// The reported cost of all its runs.
    pub spend_usd: f64,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// One more on every change; declarations compare it.
    pub revision: i64,
    /// `declaration` when a ScheduleSet document applied it.
    pub managed_by: Option<String>,
    /// The owning document, `<project>/<metadata.name>`.
    pub owner_key: Option<String>,
    /// Where the owning document was read from.
    pub source: Option<String>,
    /// Its newest runs, newest first: at most [`RECENT_RUNS`] (none in a create answer;
    /// absent from a studiod older than this field, which reads as none).
    #[serde(default)]
    pub recent_runs: Vec<RecentRun>,
}

/// How many of a schedule's newest runs its answers carry.
pub const RECENT_RUNS: usize = 10;

/// One of a schedule's newest runs, for its history at a glance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RecentRun {
    pub id: String,
    pub status: crate::RunStatus,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// Why it failed, in one line ([`crate::RunCore::error_line`]).
    pub error_line: Option<String>,
}

/// `GET /api/schedules`: one page, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SchedulePage {
    pub schedules: Vec<Schedule>,
    /// Pass back as `cursor` (with the same filters) for the next page; `null` at the end.
    pub next_cursor: Option<String>,
}

/// `GET /api/projects`: the projects schedule names name, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProjectList {
    pub projects: Vec<Project>,
}

/// A project: the part of schedule names before their first `/` (`etl` for
/// `etl/nightly`), as the runs filter `project` takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Project {
    pub name: String,
    /// How many schedules it has.
    pub schedules: i64,
}

/// `DELETE /api/schedules/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Deleted {
    pub deleted: bool,
    pub id: String,
}

/// `POST /api/schedules/preview`: the next fires of a trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewRequest {
    pub trigger: Trigger,
    /// How many fires, 1 to 100 (default 5).
    #[serde(default)]
    pub count: Option<usize>,
    /// The instant to count from (default now), RFC 3339 with an offset.
    #[serde(default)]
    #[schema(format = DateTime)]
    pub from: Option<String>,
}

/// The answer to a preview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Preview {
    /// Each fire in the trigger's zone, with its offset.
    pub fires: Vec<String>,
    /// The zone of a cron trigger; `null` for `every` and `at`.
    pub timezone: Option<String>,
    /// The trigger in words, as the cockpit's pages say it.
    pub description: String,
}
