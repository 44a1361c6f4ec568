//! The scheduler's rows and vocabularies, as stored and as the API shows them.

use studio_api::{Run, RunCore, Transition};
use studio_contract::time::rfc3339;

pub(crate) use studio_api::{RunKind, RunStatus};

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
    /// Its newest runs, newest first (migration 0014 keeps ten).
    pub recent: Vec<RunMark>,
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
    /// The schedule's name when the run was created.
    pub schedule_name: Option<String>,
    /// Why a failed or timed-out run ended, in one line ([`error_line`]).
    pub error_line: Option<String>,
    /// When its deadline ends the job (from its dispatch).
    pub deadline_at_ms: Option<i64>,
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
    /// The request it waits for or launched under.
    pub approval_id: Option<String>,
    /// The task it is an attempt of, and the worker that ran it.
    pub task_id: Option<String>,
    pub worker_id: Option<String>,
    /// When the next attempt of its occurrence is due (`policies.retry`).
    pub retry_at_ms: Option<i64>,
    /// The member (studiod) that runs it on its own machine (`scheduling::leader`).
    pub member_id: Option<String>,
}

impl RunRow {
    pub(crate) fn status(&self) -> Option<RunStatus> {
        RunStatus::parse(&self.status)
    }

    /// What every API view of a run shows.
    pub(crate) fn core(&self) -> RunCore {
        RunCore {
            id: self.id.clone(),
            schedule_id: self.schedule_id.clone(),
            schedule_name: self.schedule_name.clone(),
            error_line: self.error_line.clone(),
            deadline_at: self.deadline_at_ms.map(rfc3339),
            kind: RunKind::parse(&self.kind).unwrap_or(RunKind::Manual),
            status: self.status().unwrap_or(RunStatus::Failed),
            reason: self.reason.clone(),
            action: serde_json::from_str(&self.action).ok(),
            scheduled_at: self.scheduled_at_ms.map(rfc3339),
            created_at: rfc3339(self.created_at_ms),
            dispatched_at: self.dispatched_at_ms.map(rfc3339),
            finished_at: self.finished_at_ms.map(rfc3339),
            duration_ms: self
                .dispatched_at_ms
                .zip(self.finished_at_ms)
                .map(|(start, end)| end - start),
            pid: self.pid,
            program: self.program.clone(),
            attempt: self.attempt,
            exit_code: self.exit_code,
            signal: self.signal,
            stdout_bytes: self.stdout_bytes,
            stderr_bytes: self.stderr_bytes,
            cost_usd: self.cost_usd,
            tokens: self.tokens,
            counted: self.counted,
            chain_parent_id: self.chain_parent_id.clone(),
            chain_depth: self.chain_depth,
            replaces_run_id: self.replaces_run_id.clone(),
            approval_id: self.approval_id.clone(),
            task_id: self.task_id.clone(),
            worker_id: self.worker_id.clone(),
            retry_at: self.retry_at_ms.map(rfc3339),
        }
    }

    /// The API's view of a run, with its output tails.
    pub(crate) fn view(&self) -> Run {
        Run {
            core: self.core(),
            stdout_tail: self.stdout_tail.clone(),
            stderr_tail: self.stderr_tail.clone(),
        }
    }
}

/// The follow-ups a run of `spec` keeps, as stored on the run.
pub(crate) fn follow_ups(spec: &studio_schedule::ScheduleSpec) -> Option<String> {
    (spec.on_success.is_some() || spec.on_fail.is_some()).then(|| {
        serde_json::json!({ "on_success": spec.on_success, "on_fail": spec.on_fail }).to_string()
    })
}

/// One of a schedule's newest runs, as its history strip shows it (read from the
/// schedule's `recent_runs`, JSON arrays `[id, status, created_at_ms, error_line]`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct RunMark {
    pub id: String,
    pub status: String,
    pub created_at_ms: i64,
    pub error_line: Option<String>,
}

impl RunMark {
    pub(crate) fn view(&self) -> studio_api::RecentRun {
        studio_api::RecentRun {
            id: self.id.clone(),
            status: RunStatus::parse(&self.status).unwrap_or(RunStatus::Failed),
            created_at: rfc3339(self.created_at_ms),
            error_line: self.error_line.clone(),
        }
    }
}

/// The longest [`error_line`], in characters.
const ERROR_LINE_CHARS: usize = 200;

/// The line that says why a run ended badly, for lists and the attention queue: the last
/// non-blank line of its stderr tail, else of its stdout tail, without control characters
/// or Studio's own `[studio]` mark, cut to [`ERROR_LINE_CHARS`]. `None` for a run that
/// did not fail or time out, or that printed nothing.
pub(crate) fn error_line(
    status: RunStatus,
    stderr: Option<&str>,
    stdout: Option<&str>,
) -> Option<String> {
    if !matches!(status, RunStatus::Failed | RunStatus::TimedOut) {
        return None;
    }
    let last = |tail: Option<&str>| {
        tail?
            .lines()
            .map(|l| {
                l.chars()
                    .filter(|c| !c.is_control() || *c == '\t')
                    .collect::<String>()
            })
            .map(|l| l.trim().to_owned())
            .rfind(|l| !l.is_empty())
    };
    let line = last(stderr).or_else(|| last(stdout))?;
    let line = line
        .strip_prefix("[studio] ")
        .map_or(line.as_str(), str::trim);
    Some(match line.char_indices().nth(ERROR_LINE_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    })
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
    pub(crate) fn view(&self) -> Transition {
        Transition {
            from: self.from_status.as_deref().and_then(RunStatus::parse),
            to: RunStatus::parse(&self.to_status).unwrap_or(RunStatus::Failed),
            reason: self.reason.clone(),
            at: rfc3339(self.at_ms),
        }
    }
}

/// One entry of the event log (`/api/events`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EventRow {
    pub seq: i64,
    pub kind: String,
    pub data: String,
}
