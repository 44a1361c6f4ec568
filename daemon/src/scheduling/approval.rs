//! What an approval request is bound to: the canonical JSON of exactly what will run —
//! the action (executable and arguments, or the agent's prompt, model and profile), the
//! working directory, the *names* of the environment variables the spec sets, the
//! follow-ups that run after it under the same grant, the worker labels it runs on and
//! the secrets it receives (by name) when it names them — and its SHA-256. An edit that leaves this unchanged (a description, a trigger, a policy)
//! leaves a pending request alone; any other voids it (docs/DECISIONS.md).

use serde_json::{Value, json};
use studio_contract::time::now_ms;
use studio_schedule::{ApprovalPolicy, ScheduleSpec, TaskSpec, duration::parse_interval};

/// A request about to be raised for a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewApproval {
    pub id: String,
    /// Canonical JSON of what will run.
    pub action_json: String,
    pub action_sha256: String,
    /// A session id, `daemon`, or `None` when the clock fired it.
    pub requested_by: Option<String>,
    pub expires_at_ms: i64,
    pub distinct_from_requester: bool,
}

/// What will run under `spec`, as a request binds it.
pub(crate) fn bound_action(spec: &ScheduleSpec) -> Value {
    let mut bound = json!({
        "action": spec.action,
        "cwd": spec.cwd,
        "env": spec.env.keys().collect::<Vec<_>>(),
    });
    if spec.on_success.is_some() || spec.on_fail.is_some() {
        bound["follow_ups"] = json!({ "on_success": spec.on_success, "on_fail": spec.on_fail });
    }
    if let Some(target) = &spec.target {
        bound["labels"] = json!(target.labels);
    }
    if !spec.secrets.is_empty() {
        bound["secrets"] = json!(spec.secrets);
    }
    bound
}

/// The canonical JSON of [`bound_action`] and its SHA-256 (hex).
pub(crate) fn binding(spec: &ScheduleSpec) -> (String, String) {
    sealed(&bound_action(spec))
}

/// The canonical JSON of `bound` and its SHA-256 (hex).
fn sealed(bound: &Value) -> (String, String) {
    // A spec holds strings, booleans and integers only: always canonical.
    let bytes = studio_evidence::canonical(bound).unwrap_or_default();
    let sha = studio_evidence::sha256_hex(&bytes);
    (String::from_utf8(bytes).unwrap_or_default(), sha)
}

/// The request a run of `spec` needs (`None` when its policy requires none), raised at
/// `now` by `requested_by`.
pub(crate) fn request_for(
    spec: &ScheduleSpec,
    requested_by: Option<&str>,
    now: i64,
) -> Option<NewApproval> {
    let policy = spec.policies.approval_required()?;
    Some(request(policy, binding(spec), requested_by, now))
}

/// The request a task of `spec` needs before it is queued (`None` when it needs none):
/// bound to its action, working directory and environment names, as a schedule's run.
pub(crate) fn task_request(
    spec: &TaskSpec,
    requested_by: Option<&str>,
    now: i64,
) -> Option<NewApproval> {
    let policy = spec.approval.as_ref().filter(|a| a.required)?;
    let mut bound = json!({
        "action": spec.action,
        "cwd": spec.cwd,
        "env": spec.env.keys().collect::<Vec<_>>(),
    });
    if !spec.labels.is_empty() {
        bound["labels"] = json!(spec.labels);
    }
    if !spec.secrets.is_empty() {
        bound["secrets"] = json!(spec.secrets);
    }
    Some(request(policy, sealed(&bound), requested_by, now))
}

fn request(
    policy: &ApprovalPolicy,
    (action_json, action_sha256): (String, String),
    requested_by: Option<&str>,
    now: i64,
) -> NewApproval {
    // Validated when stored; a spec that no longer parses waits the default hour.
    let wait = parse_interval(&policy.expires_after).unwrap_or(3_600_000);
    NewApproval {
        id: uuid::Uuid::now_v7().to_string(),
        action_json,
        action_sha256,
        requested_by: requested_by.map(str::to_owned),
        expires_at_ms: now.saturating_add(wait),
        distinct_from_requester: policy.distinct_from_requester,
    }
}

/// [`request_for`] now.
pub(crate) fn request_now(spec: &ScheduleSpec, requested_by: Option<&str>) -> Option<NewApproval> {
    request_for(spec, requested_by, now_ms())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> ScheduleSpec {
        studio_schedule::parse_json(json).expect("spec")
    }

    #[test]
    fn the_binding_covers_what_runs_and_only_that() {
        let base = r#"{"name":"a","trigger":{"every":"5m"},"cwd":"/srv",
            "action":{"kind":"command","executable":"deploy","args":["--prod"]},
            "env":{"TOKEN":"s3cret"},"policies":{"approval":{"expires_after":"15m"}}}"#;
        let (json, sha) = binding(&spec(base));
        assert_eq!(
            json,
            r#"{"action":{"args":["--prod"],"executable":"deploy","kind":"command"},"cwd":"/srv","env":["TOKEN"]}"#
        );
        assert!(!json.contains("s3cret"), "never an environment value");
        assert_eq!(sha.len(), 64);
        // What does not run leaves the hash alone; a value of the environment too.
        for same in [
            base.replace(r#""every":"5m""#, r#""every":"1h""#),
            base.replace("s3cret", "other"),
            base.replace(r#""name":"a","#, r#""name":"a","description":"d","#),
        ] {
            assert_eq!(binding(&spec(&same)).1, sha, "{same}");
        }
        for changed in [
            base.replace("--prod", "--staging"),
            base.replace("/srv", "/tmp"),
            base.replace(r#""TOKEN""#, r#""TOKEN2""#),
            base.replace(
                r#""cwd":"/srv","#,
                r#""cwd":"/srv","on_success":{"action":{"kind":"command","executable":"rm"}},"#,
            ),
            // Where it runs: on workers with these labels, or elsewhere.
            base.replace(
                r#""cwd":"/srv","#,
                r#""cwd":"/srv","target":{"labels":["gpu"]},"#,
            ),
        ] {
            assert_ne!(binding(&spec(&changed)).1, sha, "{changed}");
        }
        let r = request_for(&spec(base), Some("s1"), 1_000).expect("required");
        assert_eq!(r.expires_at_ms, 1_000 + 15 * 60_000);
        assert_eq!(r.requested_by.as_deref(), Some("s1"));
        let off = base.replace(r#"{"expires_after":"15m"}"#, r#"{"required":false}"#);
        assert!(request_for(&spec(&off), None, 0).is_none());
    }
}
