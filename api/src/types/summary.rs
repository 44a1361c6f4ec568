//! `GET /api/summary`: the overview's numbers, exact over every schedule and run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::RunListItem;

/// Everything the cockpit's overview shows, in one answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Summary {
    #[schema(format = DateTime)]
    pub as_of: String,
    pub daemon: DaemonFacts,
    pub schedules: ScheduleCensus,
    pub runs: RunCensus,
    /// Approval requests waiting for a person's decision (absent from a studiod older
    /// than approvals, which reads as none).
    #[serde(default)]
    pub pending_approvals: i64,
    /// The on-demand tasks that have not ended (absent from a studiod older than tasks,
    /// which reads as none).
    #[serde(default)]
    pub tasks: TaskCensus,
}

/// How many tasks run, and how many wait (queued, leased to a worker that has not
/// started them, or waiting to retry).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskCensus {
    pub running: i64,
    pub waiting: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DaemonFacts {
    /// studiod's version.
    pub version: String,
    #[schema(format = DateTime)]
    pub started_at: String,
    pub uptime_s: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleCensus {
    pub total: i64,
    /// Every health, zero included.
    pub by_health: BTreeMap<String, i64>,
    /// The next fires of enabled schedules, soonest first: at most [`UP_NEXT`] (absent
    /// from a studiod older than this field, which reads as none).
    #[serde(default)]
    pub up_next: Vec<NextFire>,
}

/// How many of the next fires a summary carries.
pub const UP_NEXT: usize = 5;

/// A schedule's next fire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NextFire {
    pub schedule_id: String,
    pub name: String,
    #[schema(format = DateTime)]
    pub at: String,
}

/// How many runs each list of a summary carries at most.
pub const LISTED: usize = 10;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunCensus {
    /// Runs queued or running now.
    pub active: i64,
    /// The newest of them, at most [`LISTED`].
    pub running: Vec<RunListItem>,
    /// The newest runs created in the last 24 hours that failed or timed out, at most
    /// [`LISTED`].
    pub failed: Vec<RunListItem>,
    /// Whether more than those failed or timed out in that time.
    pub more_failed: bool,
    /// The start of the first hour counted.
    #[schema(format = DateTime)]
    pub since: String,
    /// Runs created since then.
    pub total: i64,
    /// Those runs by status (statuses with none are left out).
    pub by_status: BTreeMap<String, i64>,
    /// The current hour and the 23 before it, oldest first.
    pub hourly: Vec<HourCount>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HourCount {
    #[schema(format = DateTime)]
    pub hour: String,
    pub total: i64,
    /// Failed or timed out.
    pub failed: i64,
}
