//! The schedule spec's types. Closed at every level: an unknown field is an error.
//!
//! ```json
//! {"name": "nightly/reindex",
//!  "trigger": {"cron": {"expression": "0 2 * * *", "timezone": "Europe/Berlin"}},
//!  "action": {"kind": "command", "executable": "reindex", "args": ["--full"]},
//!  "policies": {"missed_fire": "run_once", "overlap": "skip", "deadline": 3600}}
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// Unique; required by the API, given by the member key in declaration files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
    pub trigger: Trigger,
    pub action: Action,
    /// Working directory of the job (absolute once stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Extra environment variables for the job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Secrets for the job's environment (and its follow-ups'): variable → the name of a
    /// secret studiod keeps (`studio secret set`). Only names are stored and shown; the
    /// value enters the job's environment at spawn, and is redacted from its output.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
    /// Who is told of which outcomes (docs/OPERATIONS.md, "Notifications").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<crate::notify::NotifyRule>,
    #[serde(default, skip_serializing_if = "Policies::is_default")]
    pub policies: Policies,
    /// Where its jobs run: on a worker that has every one of these labels
    /// (docs/TASKS.md). Without it, on studiod's own machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success: Option<Box<FollowUp>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_fail: Option<Box<FollowUp>>,
}

/// The workers a schedule's jobs run on: those that have every label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub labels: Vec<String>,
}

impl Target {
    /// The labels as a claim compares them: sorted, without repeats, joined by `,`.
    pub fn labels_key(&self) -> String {
        let mut labels: Vec<&str> = self.labels.iter().map(String::as_str).collect();
        labels.sort_unstable();
        labels.dedup();
        labels.join(",")
    }
}

/// Exactly one of the three.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Trigger {
    Cron(CronTrigger),
    /// An interval: `90s`, `15m`, `6h`, `2d`, `1h30m`.
    Every(String),
    /// One instant, RFC 3339 with an offset.
    At(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CronTrigger {
    pub expression: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    /// An executable (on the allow-list) with arguments; no shell.
    Command {
        executable: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        args: Vec<String>,
    },
    /// A run of the configured agent runner with this prompt.
    Agent {
        prompt: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MissedFire {
    /// Fires that fell due while the daemon was down or asleep are recorded as skipped.
    #[default]
    Skip,
    /// One catch-up run, however many fires were missed.
    RunOnce,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// A fire while a run is still going is recorded as skipped.
    #[default]
    Skip,
    Allow,
    /// The running one is cancelled first.
    Replace,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnDaemonLoss {
    /// The job runs on under its shim; the next studiod adopts it and records its end.
    #[default]
    Continue,
    /// The job is ended (TERM, grace, KILL) the moment its studiod is gone, and recorded
    /// `cancelled`, reason `daemon_lost`: for jobs that must not run unattended.
    Kill,
}

impl OnDaemonLoss {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    pub max_fires: u32,
    pub window_seconds: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Policies {
    #[serde(default)]
    pub missed_fire: MissedFire,
    #[serde(default)]
    pub overlap: Overlap,
    /// Top-level runs ever started; chain children do not count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u64>,
    /// Seconds before TERM (then KILL after a grace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<u64>,
    /// No fire once the reported spend reaches this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// What becomes of a running job when its studiod is gone without stopping it
    /// (a crash, `kill -9`, `studio restart daemon`).
    #[serde(default, skip_serializing_if = "OnDaemonLoss::is_default")]
    pub on_daemon_loss: OnDaemonLoss,
    /// A person must grant each run before it launches (docs/DECISIONS.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalPolicy>,
    /// Another attempt of an occurrence whose run failed, timed out or lost its job
    /// (docs/TASKS.md, "Retries").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<crate::task::RetryPolicy>,
}

/// `policies.approval`: each fire or manual trigger waits, as a run `awaiting_approval`,
/// for a person to grant it; a denial or the expiry ends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalPolicy {
    #[serde(default = "yes")]
    pub required: bool,
    /// How long a request waits for a decision (an interval: `90s`, `15m`, `24h`; at
    /// most 30 days).
    #[serde(default = "default_expiry")]
    pub expires_after: String,
    /// The browser that asked for a run by hand may not grant it.
    #[serde(default)]
    pub distinct_from_requester: bool,
}

fn default_expiry() -> String {
    "1h".into()
}

impl Policies {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The approval policy when it is in force.
    pub fn approval_required(&self) -> Option<&ApprovalPolicy> {
        self.approval.as_ref().filter(|a| a.required)
    }
}

/// What runs after the parent is terminal; may chain further, up to a capped depth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FollowUp {
    pub action: Action,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(no_recursion)]
    pub on_success: Option<Box<FollowUp>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(no_recursion)]
    pub on_fail: Option<Box<FollowUp>>,
}
