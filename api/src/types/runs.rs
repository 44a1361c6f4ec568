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
    /// Claimed and waiting for a person's grant (its schedule's `approval` policy);
    /// nothing is launched until then.
    AwaitingApproval,
    /// A person denied it: it never ran.
    Denied,
    /// No decision came before its approval expired: it never ran.
    Expired,
}

impl RunStatus {
    /// Every status's word, in `ALL`'s order (filters offer these).
    pub const WORDS: [&'static str; 10] = [
        "queued",
        "running",
        "completed",
        "failed",
        "timed_out",
        "cancelled",
        "skipped",
        "awaiting_approval",
        "denied",
        "expired",
    ];

    pub const ALL: [RunStatus; 10] = [
        Self::Queued,
        Self::Running,
        Self::Completed,
        Self::Failed,
        Self::TimedOut,
        Self::Cancelled,
        Self::Skipped,
        Self::AwaitingApproval,
        Self::Denied,
        Self::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        Self::WORDS[self as usize]
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Whether the run has ended (every status but `queued`, `running` and
    /// `awaiting_approval`).
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Queued | Self::Running | Self::AwaitingApproval)
    }

    /// Whether it holds or waits for a run slot (`queued`, `running`): what a cancel
    /// stops, a live log follows and the overview counts as running.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Queued | Self::Running)
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
    /// An attempt of an on-demand task (`POST /api/tasks`).
    Task,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Manual => "manual",
            Self::Recovery => "recovery",
            Self::Chain => "chain",
            Self::Task => "task",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Scheduled,
            Self::Manual,
            Self::Recovery,
            Self::Chain,
            Self::Task,
        ]
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
    /// The schedule's name when the run was created (kept when it is renamed or deleted);
    /// `null` only for runs from before names were kept whose schedule is gone.
    pub schedule_name: Option<String>,
    /// Why a failed or timed-out run ended, in one line: the last line of its stderr (else
    /// stdout), or the reason it never started. `null` otherwise.
    pub error_line: Option<String>,
    /// When its deadline ends the job, set once it is dispatched.
    #[schema(format = DateTime)]
    pub deadline_at: Option<String>,
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
    /// The approval request it waits for or launched under (its schedule's `approval`
    /// policy); absent for a run that needs none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// The task it is an attempt of (`kind: task`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The worker that ran the attempt (`builtin` for studiod's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// When the next attempt of its occurrence is due (its schedule's `policies.retry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub retry_at: Option<String>,
}

impl RunCore {
    /// Whether the run is still queued or running.
    pub fn active(&self) -> bool {
        self.status.is_active()
    }

    /// How the run ended, or where it stands, in words for people ("exited with code 3",
    /// "never started: …", "cancelled by a user"). The cockpit and the CLI say it alike.
    pub fn outcome(&self) -> String {
        let reason = self.reason.as_deref().unwrap_or("");
        let why = || self.error_line.clone().unwrap_or_default();
        let never_started = |what: String| {
            if what.is_empty() {
                "never started".to_owned()
            } else {
                format!("never started: {what}")
            }
        };
        match self.status {
            RunStatus::Queued => "waiting to start".into(),
            RunStatus::AwaitingApproval => "waiting for a person's approval".into(),
            RunStatus::Denied => "never started: denied".into(),
            RunStatus::Expired => "never started: no decision before its approval expired".into(),
            RunStatus::Running => "running".into(),
            RunStatus::Completed => "exited with code 0".into(),
            RunStatus::TimedOut => "stopped at its deadline".into(),
            RunStatus::Skipped => match reason {
                "overlap" => "skipped: the previous run was still going".into(),
                "budget_exhausted" => "skipped: its spending budget is used up".into(),
                "rate_limited" => "skipped: it had fired as often as its limit allows".into(),
                "missed" => "skipped: studiod was not running at the time".into(),
                "" => "skipped".into(),
                other => format!("skipped ({other})"),
            },
            RunStatus::Cancelled => match reason {
                "cancelled_by_user" => "cancelled by a user".into(),
                "replaced" => "cancelled: a newer run of its schedule replaced it".into(),
                "daemon_shutdown" => "cancelled: studiod stopped".into(),
                "" | "cancelled" => "cancelled".into(),
                other => format!("cancelled ({other})"),
            },
            RunStatus::Failed => match (reason, self.exit_code, self.signal) {
                (_, Some(code), None) => format!("exited with code {code}"),
                (_, _, Some(signal)) => format!("killed by signal {signal}"),
                ("spawn_failed" | "not_allowed", ..) => never_started(why()),
                ("schedule_deleted", ..) => never_started("its schedule was deleted first".into()),
                ("never_dispatched", ..) => {
                    never_started("a new attempt of the same fire replaced it".into())
                }
                ("daemon_lost" | "shim_lost" | "host_rebooted" | "stale", ..) => match why() {
                    what if what.is_empty() => "lost: no live job backs the run".into(),
                    what => format!("lost: {what}"),
                },
                _ => "ended without an exit code".into(),
            },
        }
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
    /// Why a queued run has not started: its place in the queue (absent unless queued).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueuePlace>,
    /// Its approval requests, oldest first (more than one when an edit of its schedule
    /// voided one and raised another).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<crate::Approval>,
    /// The evidence rows sealed for it, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<crate::EvidenceRow>,
}

/// A queued run waits for one of the daemon's run slots (`STUDIO_MAX_CONCURRENT_RUNS`):
/// "waiting for a slot: 4 of 4 running, 2 queued before it".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueuePlace {
    /// Slots taken by running jobs now.
    pub running: i64,
    /// Runs that may run at once.
    pub slots: i64,
    /// Queued runs created before this one (slots go to waiting runs in order).
    pub ahead: i64,
}

/// A run as lists show it: no output tails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunListItem {
    #[serde(flatten)]
    pub core: RunCore,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(status: RunStatus, reason: Option<&str>) -> RunCore {
        RunCore {
            id: "r".into(),
            schedule_id: None,
            schedule_name: None,
            error_line: None,
            deadline_at: None,
            kind: RunKind::Manual,
            status,
            reason: reason.map(Into::into),
            action: None,
            scheduled_at: None,
            created_at: "2026-12-01T00:00:00Z".into(),
            dispatched_at: None,
            finished_at: None,
            duration_ms: None,
            pid: None,
            program: None,
            attempt: 1,
            exit_code: None,
            signal: None,
            stdout_bytes: None,
            stderr_bytes: None,
            cost_usd: None,
            tokens: None,
            counted: true,
            chain_parent_id: None,
            chain_depth: 0,
            replaces_run_id: None,
            approval_id: None,
            task_id: None,
            worker_id: None,
            retry_at: None,
        }
    }

    #[test]
    fn an_outcome_is_said_in_words() {
        let mut failed = run(RunStatus::Failed, Some("exit_3"));
        failed.exit_code = Some(3);
        assert_eq!(failed.outcome(), "exited with code 3");
        failed.exit_code = None;
        failed.signal = Some(9);
        assert_eq!(failed.outcome(), "killed by signal 9");
        let mut spawn = run(RunStatus::Failed, Some("spawn_failed"));
        spawn.error_line = Some("cannot start \"li\": No such file or directory".into());
        assert_eq!(
            spawn.outcome(),
            "never started: cannot start \"li\": No such file or directory"
        );
        assert_eq!(
            run(RunStatus::Failed, Some("stale")).outcome(),
            "lost: no live job backs the run"
        );
        assert_eq!(
            run(RunStatus::Cancelled, Some("cancelled_by_user")).outcome(),
            "cancelled by a user"
        );
        assert_eq!(
            run(RunStatus::TimedOut, Some("deadline")).outcome(),
            "stopped at its deadline"
        );
        assert_eq!(
            run(RunStatus::Skipped, Some("overlap")).outcome(),
            "skipped: the previous run was still going"
        );
        assert_eq!(run(RunStatus::Queued, None).outcome(), "waiting to start");
    }
}

#[cfg(test)]
mod status_tests {
    use super::*;

    /// Each status reads back from its word; a run awaiting approval has not ended but
    /// holds no slot, and a denied or expired one has ended without running.
    #[test]
    fn statuses_say_whether_a_run_ended_and_whether_it_holds_a_slot() {
        for status in RunStatus::ALL {
            assert_eq!(RunStatus::parse(status.as_str()), Some(status));
            let json = serde_json::to_string(&status).expect("json");
            assert_eq!(json, format!("\"{}\"", status.as_str()));
        }
        let active: Vec<_> = RunStatus::ALL
            .into_iter()
            .filter(|s| s.is_active())
            .collect();
        assert_eq!(active, [RunStatus::Queued, RunStatus::Running]);
        let open: Vec<_> = RunStatus::ALL
            .into_iter()
            .filter(|s| !s.is_terminal())
            .collect();
        assert_eq!(
            open,
            [
                RunStatus::Queued,
                RunStatus::Running,
                RunStatus::AwaitingApproval
            ]
        );
    }
}
