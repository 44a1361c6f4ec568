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

fn check_key(path: &str, key: &str, errors: &mut Vec<FieldError>) {
    if key.is_empty() || key.len() > MAX_KEY_BYTES || key.chars().any(char::is_control) {
        errors.push(FieldError::new(
            path,
            format!("must be 1 to {MAX_KEY_BYTES} bytes of text without control characters"),
        ));
    }
}

fn is_label(label: &str) -> bool {
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
        &spec.env,
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
}
