//! The task spec (docs/TASKS.md): one on-demand job submitted through the API or the CLI,
//! with the same action, working directory and environment as a schedule's, the labels a
//! worker must have, its priority, its idempotency key and its concurrency key. Closed at every level: an unknown field is an error.
//!
//! ```json
//! {"action": {"kind": "command", "executable": "reindex", "args": ["--full"]},
//!  "labels": ["linux", "gpu"], "priority": 7, "idempotency_key": "ci-4711",
//!  "concurrency": {"key": "reindex", "limit": 1}, "deadline": 600}
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{
    duration::parse_interval,
    spec::Action,
    validate::{Context, FieldError, check_deadline, check_job},
};

/// The priority of a task that names none (0 lowest, 9 highest).
pub const DEFAULT_PRIORITY: u8 = 5;
/// The most labels a task may require.
pub const MAX_LABELS: usize = 16;
/// The longest label, idempotency key or concurrency key, in bytes.
pub const MAX_KEY_BYTES: usize = 200;

fn default_priority() -> u8 {
    DEFAULT_PRIORITY
}

fn is_default_priority(p: &u8) -> bool {
    *p == DEFAULT_PRIORITY
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    pub action: Action,
    /// What a worker must have to run it (each letters, digits, `.`, `_`, `-`); none: any
    /// worker, the built-in one included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// 0 (lowest) to 9 (highest): claimed fairly across priorities, oldest first within
    /// one.
    #[serde(
        default = "default_priority",
        skip_serializing_if = "is_default_priority"
    )]
    pub priority: u8,
    /// The same key again with the same spec answers the task it made; with another spec,
    /// `409 idempotency_conflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
    /// Seconds the job may run (then TERM, a grace, KILL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<u64>,
    /// Working directory of the job (absolute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Extra environment variables for the job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Secrets for the job's environment: variable → the name of a secret studiod keeps
    /// (`studio secret set`). Only names are stored and shown; the value enters the
    /// job's environment at spawn, and is redacted from its output.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
    /// Who is told of which outcomes (docs/OPERATIONS.md, "Notifications").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<crate::notify::NotifyRule>,
    /// Attempts after a failure: how many in all, how long between them, after what.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// A person must grant the task before it is queued (the approvals of schedules:
    /// the request binds what will run; one grant covers all its attempts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<crate::spec::ApprovalPolicy>,
}

/// `retry`: up to `max_attempts` attempts in all. After an attempt ends in an outcome `on`
/// names (for `failed`, only one of `exit_codes` when any are given), the next waits
/// a random time up to `min(max, initial × factor^(n−1))` after attempt n (full jitter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    #[serde(default)]
    pub backoff: Backoff,
    #[serde(default = "RetryOn::all")]
    pub on: Vec<RetryOn>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exit_codes: Vec<i64>,
}

/// The waits between attempts: intervals like `5s`, `1m`, and a whole factor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Backoff {
    #[serde(default = "Backoff::default_initial")]
    pub initial: String,
    #[serde(default = "Backoff::default_max")]
    pub max: String,
    #[serde(default = "Backoff::default_factor")]
    pub factor: u32,
}

impl Backoff {
    fn default_initial() -> String {
        "5s".into()
    }
    fn default_max() -> String {
        "5m".into()
    }
    fn default_factor() -> u32 {
        2
    }

    /// The longest wait after attempt `n` (1 for the first), in milliseconds.
    pub fn ceiling_ms(&self, n: u32) -> i64 {
        let initial = parse_interval(&self.initial).unwrap_or(5_000);
        let max = parse_interval(&self.max).unwrap_or(300_000);
        let grown = (1..n).fold(initial, |wait, _| {
            wait.saturating_mul(i64::from(self.factor)).min(max)
        });
        grown.min(max)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Self::default_initial(),
            max: Self::default_max(),
            factor: Self::default_factor(),
        }
    }
}

/// Which outcomes of an attempt are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RetryOn {
    /// The job exited non-zero (or could not start).
    Failed,
    /// Its deadline ended it.
    TimedOut,
    /// Whatever ran it went away: its shim or daemon died, or its worker's lease ended.
    WorkerLost,
}

impl RetryOn {
    fn all() -> Vec<Self> {
        vec![Self::Failed, Self::TimedOut, Self::WorkerLost]
    }
}

/// At most `limit` tasks of one `key` are leased or running at once; the others wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Concurrency {
    pub key: String,
    pub limit: u32,
}

impl TaskSpec {
    /// The labels as a claim compares them: sorted, without repeats, joined by `,`.
    pub fn labels_key(&self) -> String {
        let mut labels: Vec<&str> = self.labels.iter().map(String::as_str).collect();
        labels.sort_unstable();
        labels.dedup();
        labels.join(",")
    }
}

/// A retry policy's bounds, its fields named under `path`.
pub(crate) fn check_retry(path: &str, r: &RetryPolicy, errors: &mut Vec<FieldError>) {
    if r.max_attempts == 0 || r.max_attempts > 100 {
        errors.push(FieldError::new(
            format!("{path}.max_attempts"),
            "must be 1 to 100",
        ));
    }
    let initial = parse_interval(&r.backoff.initial);
    let max = parse_interval(&r.backoff.max);
    if let Err(why) = &initial {
        errors.push(FieldError::new(
            format!("{path}.backoff.initial"),
            why.clone(),
        ));
    }
    if let Err(why) = &max {
        errors.push(FieldError::new(format!("{path}.backoff.max"), why.clone()));
    }
    if let (Ok(i), Ok(m)) = (initial, max)
        && (i > m || m > 86_400_000)
    {
        errors.push(FieldError::new(
            format!("{path}.backoff.max"),
            "must be at least `initial` and at most 1d",
        ));
    }
    if r.backoff.factor == 0 || r.backoff.factor > 10 {
        errors.push(FieldError::new(
            format!("{path}.backoff.factor"),
            "must be 1 to 10",
        ));
    }
    if r.on.is_empty() {
        errors.push(FieldError::new(
            format!("{path}.on"),
            "must name at least one outcome",
        ));
    }
}

fn check_key(path: &str, key: &str, errors: &mut Vec<FieldError>) {
    if key.is_empty() || key.len() > MAX_KEY_BYTES || key.chars().any(char::is_control) {
        errors.push(FieldError::new(
            path,
            format!("must be 1 to {MAX_KEY_BYTES} bytes of text without control characters"),
        ));
    }
}

/// Whether `label` is one a task may require and a worker offer: 1 to 64 letters,
/// digits, `.`, `_` or `-`.
pub fn is_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 64
        && label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Checks everything about a task that can be known before it runs; the spec with its
/// labels sorted and without repeats.
pub fn validate_task(mut spec: TaskSpec, ctx: &Context<'_>) -> Result<TaskSpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    check_job(
        &spec.action,
        spec.cwd.as_deref(),
        (&spec.env, &spec.secrets),
        ctx,
        &mut errors,
    );
    if spec.labels.len() > MAX_LABELS {
        errors.push(FieldError::new(
            "labels",
            format!("at most {MAX_LABELS} labels"),
        ));
    }
    for (i, label) in spec.labels.iter().enumerate() {
        if !is_label(label) {
            errors.push(FieldError::new(
                format!("labels[{i}]"),
                "a label is 1 to 64 letters, digits, '.', '_' or '-'",
            ));
        }
    }
    if spec.priority > 9 {
        errors.push(FieldError::new("priority", "must be 0 to 9"));
    }
    if let Some(key) = &spec.idempotency_key {
        check_key("idempotency_key", key, &mut errors);
    }
    if let Some(c) = &spec.concurrency {
        check_key("concurrency.key", &c.key, &mut errors);
        if c.limit == 0 || c.limit > 1_000 {
            errors.push(FieldError::new("concurrency.limit", "must be 1 to 1000"));
        }
    }
    check_deadline("deadline", spec.deadline, &mut errors);
    crate::notify::check_notify(&spec.notify, ctx, &mut errors);
    if let Some(r) = &spec.retry {
        check_retry("retry", r, &mut errors);
    }
    crate::validate::check_approval(
        "approval.expires_after",
        spec.approval.as_ref(),
        &mut errors,
    );
    if !errors.is_empty() {
        return Err(errors);
    }
    spec.labels.sort_unstable();
    spec.labels.dedup();
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zone::Zone;

    fn check(json: &str) -> Result<TaskSpec, Vec<String>> {
        let spec: TaskSpec = serde_json::from_str(json).map_err(|e| vec![e.to_string()])?;
        let zone = Zone::utc();
        let allow = ["reindex".to_owned()];
        let ctx = Context {
            default_zone: &zone,
            allowlist: Some(&allow),
            secrets: None,
            endpoints: None,
            now_ms: None,
            require_name: false,
        };
        validate_task(spec, &ctx).map_err(|e| e.into_iter().map(|e| e.path).collect())
    }

    #[test]
    fn a_task_is_checked_like_a_job_and_normalised() {
        let spec = check(
            r#"{"action":{"kind":"command","executable":"reindex"},"labels":["gpu","linux","gpu"],
                "priority":7,"concurrency":{"key":"reindex","limit":1}}"#,
        )
        .expect("valid");
        assert_eq!(spec.labels, ["gpu", "linux"]);
        assert_eq!(spec.labels_key(), "gpu,linux");
        let spec = check(r#"{"action":{"kind":"command","executable":"reindex"}}"#).expect("ok");
        assert_eq!((spec.priority, spec.labels_key()), (5, String::new()));
        let text = serde_json::to_string(&spec).expect("json");
        assert_eq!(
            text,
            r#"{"action":{"kind":"command","executable":"reindex"}}"#
        );
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let paths = check(
            r#"{"action":{"kind":"command","executable":"rm"},"labels":["ok","no spaces"],
                "priority":10,"idempotency_key":"","concurrency":{"key":"k","limit":0},
                "deadline":0,"cwd":"tmp","env":{"1X":"a"}}"#,
        )
        .expect_err("invalid");
        for want in [
            "action.executable",
            "cwd",
            "env.1X",
            "labels[1]",
            "priority",
            "idempotency_key",
            "concurrency.limit",
            "deadline",
        ] {
            assert!(paths.contains(&want.to_owned()), "{want} in {paths:?}");
        }
        assert!(check(r#"{"action":{"kind":"command","executable":"reindex"},"when":1}"#).is_err());
    }

    #[test]
    fn a_retry_policy_has_defaults_bounds_and_a_growing_ceiling() {
        let spec = check(
            r#"{"action":{"kind":"command","executable":"reindex"},"retry":{"max_attempts":4}}"#,
        )
        .expect("valid");
        let r = spec.retry.expect("retry");
        assert_eq!(
            r.on,
            [RetryOn::Failed, RetryOn::TimedOut, RetryOn::WorkerLost]
        );
        let ceilings: Vec<i64> = (1..=9).map(|n| r.backoff.ceiling_ms(n)).collect();
        assert_eq!(
            ceilings,
            [
                5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000
            ]
        );
        let paths = check(
            r#"{"action":{"kind":"command","executable":"reindex"},"retry":{"max_attempts":0,
                "backoff":{"initial":"1m","max":"10s","factor":0},"on":[]}}"#,
        )
        .expect_err("invalid");
        assert_eq!(
            paths,
            [
                "retry.max_attempts",
                "retry.backoff.max",
                "retry.backoff.factor",
                "retry.on"
            ]
        );
    }
}
