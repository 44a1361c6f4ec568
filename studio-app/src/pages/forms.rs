//! The schedule form (create at `/schedules/new`, edit at `/schedules/{id}/edit`): the
//! server renders the fields prefilled from the spec; `cockpit.js` sends the JSON
//! (`POST /api/schedules`, or a `PATCH` of only what changed), previews the next five
//! fires and puts each `errors[].path` of a `400 validation_failed` next to its field.
//! Every field of the spec is here: the approval policy in its own section, environment
//! (its variables, and the secrets it receives by name), the other policies and
//! follow-ups in a collapsed "Advanced" one.

use askama::Template;
use axum::{
    extract::{Path, State},
    response::Response,
};
use http::HeaderMap;
use studio_api::schedule::{
    Action, ApprovalPolicy, FollowUp, MissedFire, OnDaemonLoss, Overlap, Policies, Trigger,
};

use super::{Ctx, Nav, render, resolve};
use crate::{daemon::Schedule, state::AppState};

/// A number as form text, in JSON notation (a budget of 3 reads `3.0`, as the API sent it).
fn number<T: serde::Serialize>(n: Option<T>) -> String {
    n.and_then(|n| serde_json::to_string(&n).ok())
        .unwrap_or_default()
}

/// The words of an action as form fields: `(kind, executable, args, prompt, model, profile)`.
fn action_fields(action: &Action) -> [String; 6] {
    match action {
        Action::Command { executable, args } => [
            "command".into(),
            executable.clone(),
            args.join("\n"),
            String::new(),
            String::new(),
            String::new(),
        ],
        Action::Agent {
            prompt,
            model,
            profile,
        } => [
            "agent".into(),
            String::new(),
            String::new(),
            prompt.clone(),
            model.clone().unwrap_or_default(),
            profile.clone().unwrap_or_default(),
        ],
    }
}

/// The form's fields as text, from a spec (empty for a new schedule).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Fields {
    pub(crate) name: String,
    pub(crate) description: String,
    /// `cron`, `every` or `at`.
    pub(crate) trigger_kind: String,
    pub(crate) cron: String,
    pub(crate) timezone: String,
    pub(crate) every: String,
    pub(crate) at: String,
    /// `command` or `agent`.
    pub(crate) action_kind: String,
    pub(crate) executable: String,
    /// One argument per line.
    pub(crate) args: String,
    pub(crate) prompt: String,
    /// An agent's model and profile (empty: the runner's default).
    pub(crate) model: String,
    pub(crate) profile: String,
    pub(crate) cwd: String,
    /// The labels of the workers its jobs run on, comma-separated (empty: studiod's
    /// own machine).
    pub(crate) target: String,
    pub(crate) enabled: bool,
    /// `KEY=VALUE`, one per line, in key order.
    pub(crate) env: String,
    /// `VAR=secret-name`, one per line, in variable order: names only, never a value.
    pub(crate) secrets: String,
    pub(crate) approval: ApprovalFields,
    pub(crate) policies: PolicyFields,
    pub(crate) on_success: FollowUpFields,
    pub(crate) on_fail: FollowUpFields,
}

/// Every field of `Policies` as text; empty means the default (omitted from the spec).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PolicyFields {
    /// `run_once`, or empty for the default `skip`.
    pub(crate) missed_fire: String,
    /// `allow` or `replace`, or empty for the default `skip`.
    pub(crate) overlap: String,
    /// `kill`, or empty for the default `continue`.
    pub(crate) on_daemon_loss: String,
    pub(crate) max_runs: String,
    pub(crate) deadline: String,
    pub(crate) budget_usd: String,
    pub(crate) max_fires: String,
    pub(crate) window_seconds: String,
}

impl PolicyFields {
    fn from_spec(p: &Policies) -> Self {
        // A default is shown as "default" (empty), so it is never sent.
        Self {
            missed_fire: match p.missed_fire {
                MissedFire::Skip => String::new(),
                MissedFire::RunOnce => "run_once".into(),
            },
            overlap: match p.overlap {
                Overlap::Skip => String::new(),
                Overlap::Allow => "allow".into(),
                Overlap::Replace => "replace".into(),
            },
            on_daemon_loss: match p.on_daemon_loss {
                OnDaemonLoss::Continue => String::new(),
                OnDaemonLoss::Kill => "kill".into(),
            },
            max_runs: number(p.max_runs),
            deadline: number(p.deadline),
            budget_usd: number(p.budget_usd),
            max_fires: number(p.rate_limit.map(|r| r.max_fires)),
            window_seconds: number(p.rate_limit.map(|r| r.window_seconds)),
        }
    }
}

/// `policies.approval` as fields. The spec carries the policy only while "Require
/// approval" is ticked: a schedule without one gains none, and one stored with
/// `required: false` is kept as it is unless the box is ticked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalFields {
    pub(crate) required: bool,
    pub(crate) expires_after: String,
    pub(crate) distinct_from_requester: bool,
}

impl Default for ApprovalFields {
    /// Off, with the policy's own default wait shown for when it is ticked.
    fn default() -> Self {
        Self {
            required: false,
            expires_after: "1h".into(),
            distinct_from_requester: false,
        }
    }
}

impl ApprovalFields {
    fn from_spec(policy: Option<&ApprovalPolicy>) -> Self {
        policy.map_or_else(Self::default, |a| Self {
            required: a.required,
            expires_after: a.expires_after.clone(),
            distinct_from_requester: a.distinct_from_requester,
        })
    }
}

/// An `on_success` or `on_fail` follow-up: the action it runs, and whatever chains on
/// from it, which the form keeps as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FollowUpFields {
    /// `on_success` or `on_fail`: the spec key and the prefix of the form's names.
    pub(crate) key: String,
    /// `command`, `agent`, or empty for none.
    pub(crate) kind: String,
    pub(crate) executable: String,
    /// One argument per line.
    pub(crate) args: String,
    pub(crate) prompt: String,
    pub(crate) model: String,
    pub(crate) profile: String,
    /// The follow-up's own `on_success` / `on_fail` as a JSON object (empty: none).
    pub(crate) chain: String,
    /// How many follow-ups `chain` holds.
    pub(crate) chain_steps: usize,
}

impl FollowUpFields {
    fn none(key: &str) -> Self {
        Self {
            key: key.into(),
            ..Self::default()
        }
    }

    fn from_spec(key: &str, node: Option<&FollowUp>) -> Self {
        let Some(node) = node else {
            return Self::none(key);
        };
        let chain = Chain {
            on_fail: node.on_fail.as_deref(),
            on_success: node.on_success.as_deref(),
        };
        let chain_steps = steps(chain.on_fail) + steps(chain.on_success);
        let [kind, executable, args, prompt, model, profile] = action_fields(&node.action);
        Self {
            key: key.into(),
            kind,
            executable,
            args,
            prompt,
            model,
            profile,
            chain: if chain_steps == 0 {
                String::new()
            } else {
                serde_json::to_string(&chain).unwrap_or_default()
            },
            chain_steps,
        }
    }

    /// `on-success`: for ids and test ids.
    pub(crate) fn slug(&self) -> String {
        self.key.replace('_', "-")
    }

    pub(crate) fn legend(&self) -> &'static str {
        if self.key == "on_success" {
            "After a success"
        } else {
            "After a failure"
        }
    }

    pub(crate) fn kind_is(&self, k: &str) -> bool {
        self.kind == k
    }
}

/// What chains on from a follow-up, kept in the form as JSON and sent back as it was.
#[derive(serde::Serialize)]
struct Chain<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    on_fail: Option<&'a FollowUp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    on_success: Option<&'a FollowUp>,
}

/// The follow-ups in a chain node, itself included (none for no node).
fn steps(node: Option<&FollowUp>) -> usize {
    node.map_or(0, |n| {
        1 + steps(n.on_success.as_deref()) + steps(n.on_fail.as_deref())
    })
}

impl Fields {
    pub(crate) fn new_schedule() -> Self {
        Self {
            trigger_kind: "cron".into(),
            action_kind: "command".into(),
            enabled: true,
            on_success: FollowUpFields::none("on_success"),
            on_fail: FollowUpFields::none("on_fail"),
            ..Self::default()
        }
    }

    pub(crate) fn from_schedule(s: &Schedule) -> Self {
        let spec = &s.spec;
        let (trigger_kind, cron, timezone, every, at) = match &spec.trigger {
            Trigger::Cron(c) => (
                "cron",
                c.expression.clone(),
                c.timezone.clone().unwrap_or_default(),
                String::new(),
                String::new(),
            ),
            Trigger::Every(e) => (
                "every",
                String::new(),
                String::new(),
                e.clone(),
                String::new(),
            ),
            Trigger::At(a) => ("at", String::new(), String::new(), String::new(), a.clone()),
        };
        let [action_kind, executable, args, prompt, model, profile] = action_fields(&spec.action);
        let lines = |map: &std::collections::BTreeMap<String, String>| {
            map.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        Self {
            name: s.name.clone(),
            description: spec.description.clone(),
            trigger_kind: trigger_kind.into(),
            cron,
            timezone,
            every,
            at,
            action_kind,
            executable,
            args,
            prompt,
            model,
            profile,
            cwd: spec.cwd.clone().unwrap_or_default(),
            target: spec
                .target
                .as_ref()
                .map(|t| t.labels.join(", "))
                .unwrap_or_default(),
            enabled: s.enabled,
            env: lines(&spec.env),
            secrets: lines(&spec.secrets),
            approval: ApprovalFields::from_spec(spec.policies.approval.as_ref()),
            policies: PolicyFields::from_spec(&spec.policies),
            on_success: FollowUpFields::from_spec("on_success", spec.on_success.as_deref()),
            on_fail: FollowUpFields::from_spec("on_fail", spec.on_fail.as_deref()),
        }
    }

    /// Whether anything in the "Advanced" section is set (then it opens by itself).
    pub(crate) fn has_advanced(&self) -> bool {
        !self.env.is_empty()
            || !self.secrets.is_empty()
            || self.policies != PolicyFields::default()
            || !self.on_success.kind.is_empty()
            || !self.on_fail.kind.is_empty()
    }

    pub(crate) fn follow_ups(&self) -> [&FollowUpFields; 2] {
        [&self.on_success, &self.on_fail]
    }
}

#[derive(Template)]
#[template(path = "schedule_form.html")]
pub(crate) struct FormPage {
    pub(crate) ctx: Ctx,
    /// `None` when creating.
    pub(crate) id: Option<String>,
    pub(crate) fields: Fields,
}

impl FormPage {
    pub(crate) fn trigger_is(&self, k: &str) -> bool {
        self.fields.trigger_kind == k
    }

    pub(crate) fn action_is(&self, k: &str) -> bool {
        self.fields.action_kind == k
    }
}

pub(crate) async fn new(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let (ctx, _) = resolve(&state, &headers, "/api/schedules", Nav::Schedules).await;
    render(&FormPage {
        ctx,
        id: None,
        fields: Fields::new_schedule(),
    })
}

#[tracing::instrument(skip_all)]
pub(crate) async fn edit(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/schedules", Nav::Schedules).await;
    let mut page = FormPage {
        ctx: ctx.clone(),
        id: Some(id.clone()),
        fields: Fields::new_schedule(),
    };
    if let Some(p) = paired {
        match p.daemon(&state).schedule(&id).await {
            Ok(s) => page.fields = Fields::from_schedule(&s),
            Err(e) => {
                ctx.fail(&e);
                page.id = None;
            }
        }
        page.ctx = ctx;
    }
    render(&page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_come_from_the_spec() {
        let s: Schedule = serde_json::from_value(serde_json::json!({
            "id": "s", "name": "n", "enabled": false, "trigger_kind": "cron", "health": "disabled",
            "runs_counted": 0, "spend_usd": 0.0, "revision": 1,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            "spec": {"trigger": {"cron": {"expression": "0 2 * * *", "timezone": "Europe/Berlin"}},
                     "action": {"kind": "command", "executable": "sh", "args": ["-c", "echo hi"]},
                     "cwd": "/tmp", "target": {"labels": ["gpu", "linux"]}}
        }))
        .expect("schedule");
        let f = Fields::from_schedule(&s);
        // An edit keeps where its jobs run: the form shows the target's labels.
        assert_eq!(f.target, "gpu, linux");
        assert_eq!(f.trigger_kind, "cron");
        assert_eq!(f.cron, "0 2 * * *");
        assert_eq!(f.timezone, "Europe/Berlin");
        assert_eq!(f.args, "-c\necho hi");
        assert!(!f.enabled);
        let page = FormPage {
            ctx: Ctx::new(crate::daemon::PageState::Paired, Nav::Schedules),
            id: Some("s".into()),
            fields: f,
        };
        let html = page.render().expect("renders");
        for id in [
            "schedule-form",
            "field-name",
            "field-cron",
            "field-executable",
            "schedule-submit",
            "preview",
        ] {
            assert!(html.contains(&format!(r#"data-testid="{id}""#)), "{id}");
        }
        assert!(html.contains(r#"data-method="PATCH""#));
        assert!(html.contains("0 2 * * *"));
    }

    #[test]
    fn an_agent_keeps_its_model_and_profile_through_the_form() {
        let s: Schedule = serde_json::from_value(serde_json::json!({
            "id": "s", "name": "n", "enabled": true, "trigger_kind": "cron", "health": "healthy",
            "runs_counted": 0, "spend_usd": 0.0, "revision": 1,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            "spec": {"trigger": {"every": "1h"},
                     "action": {"kind": "agent", "prompt": "summarise", "model": "large", "profile": "ops"}}
        }))
        .expect("schedule");
        let f = Fields::from_schedule(&s);
        assert_eq!(
            (f.action_kind.as_str(), f.model.as_str(), f.profile.as_str()),
            ("agent", "large", "ops")
        );
        let page = FormPage {
            ctx: Ctx::new(crate::daemon::PageState::Paired, Nav::Schedules),
            id: Some("s".into()),
            fields: f,
        };
        let html = page.render().expect("renders");
        assert!(html.contains(r#"data-testid="field-model""#) && html.contains(r#"value="large""#));
        assert!(html.contains(r#"data-testid="field-profile""#) && html.contains(r#"value="ops""#));
    }

    fn page(fields: Fields) -> String {
        FormPage {
            ctx: Ctx::new(crate::daemon::PageState::Paired, Nav::Schedules),
            id: Some("s".into()),
            fields,
        }
        .render()
        .expect("renders")
    }

    #[test]
    fn environment_policies_and_follow_ups_come_from_the_spec() {
        let s: Schedule = serde_json::from_value(serde_json::json!({
            "id": "s", "name": "n", "enabled": true, "trigger_kind": "cron", "health": "healthy",
            "runs_counted": 0, "spend_usd": 0.0, "revision": 1,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            "spec": {"trigger": {"every": "1h"},
                     "action": {"kind": "command", "executable": "true"},
                     "env": {"MODE": "full", "QUERY": "a=b c"},
                     "secrets": {"NPM_TOKEN": "npm", "GITHUB_TOKEN": "github.ci"},
                     "policies": {"missed_fire": "run_once", "overlap": "skip", "max_runs": 5,
                                  "deadline": 600, "budget_usd": 2.5, "on_daemon_loss": "kill",
                                  "rate_limit": {"max_fires": 3, "window_seconds": 60}},
                     "on_success": {"action": {"kind": "agent", "prompt": "summarise", "model": "large"},
                                    "on_fail": {"action": {"kind": "command", "executable": "notify"},
                                                "on_success": {"action": {"kind": "command", "executable": "true"}}}},
                     "on_fail": {"action": {"kind": "command", "executable": "false", "args": ["a", "b"]}}}
        }))
        .expect("schedule");
        let f = Fields::from_schedule(&s);
        assert_eq!(f.env, "MODE=full\nQUERY=a=b c");
        assert_eq!(f.secrets, "GITHUB_TOKEN=github.ci\nNPM_TOKEN=npm");
        assert_eq!(
            f.policies,
            PolicyFields {
                missed_fire: "run_once".into(),
                overlap: String::new(),
                on_daemon_loss: "kill".into(),
                max_runs: "5".into(),
                deadline: "600".into(),
                budget_usd: "2.5".into(),
                max_fires: "3".into(),
                window_seconds: "60".into(),
            },
            "the default `skip` reads as empty, so it is never sent"
        );
        let ok = &f.on_success;
        assert_eq!(
            (ok.kind.as_str(), ok.prompt.as_str(), ok.model.as_str()),
            ("agent", "summarise", "large")
        );
        assert_eq!(ok.chain_steps, 2);
        let chain: serde_json::Value = serde_json::from_str(&ok.chain).expect("chain is JSON");
        assert_eq!(chain["on_fail"]["action"]["executable"], "notify");
        assert!(
            chain.get("action").is_none(),
            "the edited action is not in the chain"
        );
        let fail = &f.on_fail;
        assert_eq!(
            (
                fail.kind.as_str(),
                fail.executable.as_str(),
                fail.args.as_str()
            ),
            ("command", "false", "a\nb")
        );
        assert_eq!((fail.chain.as_str(), fail.chain_steps), ("", 0));
        assert!(f.has_advanced());

        let html = page(f);
        assert!(
            html.contains(r#"data-testid="advanced" open"#),
            "opens when set"
        );
        assert!(html.contains("MODE=full\nQUERY=a=b c</textarea>"));
        assert!(
            html.contains(
                r#"data-testid="field-secrets">GITHUB_TOKEN=github.ci
NPM_TOKEN=npm</textarea>"#
            ),
            "{html}"
        );
        assert!(html.contains(r#"<option value="run_once" selected>"#));
        for (id, value) in [
            ("field-deadline", "600"),
            ("field-max-runs", "5"),
            ("field-budget-usd", "2.5"),
            ("field-max-fires", "3"),
            ("field-window-seconds", "60"),
            ("field-on-success-model", "large"),
            ("field-on-fail-executable", "false"),
        ] {
            let input = html
                .split("<input ")
                .find(|i| i.contains(&format!(r#"data-testid="{id}""#)))
                .unwrap_or_else(|| panic!("no {id}"));
            assert!(
                input.contains(&format!(r#"value="{value}""#)),
                "{id}: {input}"
            );
        }
        assert!(
            html.contains(r#"data-chain="{&#34;on_fail&#34;:"#),
            "chain kept, escaped"
        );
        assert!(html.contains(r#"data-testid="on-success-chain""#));
        assert!(html.contains(r#"data-done="/schedules/s""#));
    }

    /// An edit shows the secrets a schedule names (never a value: the spec has none), so
    /// saving it sends them back unchanged.
    #[test]
    fn secrets_alone_open_the_advanced_section_by_name() {
        let s: Schedule = serde_json::from_value(serde_json::json!({
            "id": "s", "name": "n", "enabled": true, "trigger_kind": "every", "health": "healthy",
            "runs_counted": 0, "spend_usd": 0.0, "revision": 1,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            "spec": {"trigger": {"every": "1h"}, "action": {"kind": "command", "executable": "true"},
                     "secrets": {"GITHUB_TOKEN": "github"}}
        }))
        .expect("schedule");
        let f = Fields::from_schedule(&s);
        assert_eq!(
            (f.env.as_str(), f.secrets.as_str()),
            ("", "GITHUB_TOKEN=github")
        );
        assert!(f.has_advanced());
        let html = page(f);
        assert!(html.contains(r#"data-testid="advanced" open"#), "{html}");
        assert!(
            html.contains(r#"data-testid="field-secrets">GITHUB_TOKEN=github</textarea>"#),
            "{html}"
        );
        assert!(html.contains(r#"<label for="f-secrets">"#));
    }

    #[test]
    fn the_approval_policy_comes_from_the_spec_and_is_off_without_one() {
        let with = |policies: serde_json::Value| -> Schedule {
            serde_json::from_value(serde_json::json!({
                "id": "s", "name": "n", "enabled": true, "trigger_kind": "every", "health": "healthy",
                "runs_counted": 0, "spend_usd": 0.0, "revision": 1,
                "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
                "spec": {"trigger": {"every": "1h"}, "action": {"kind": "command", "executable": "true"},
                         "policies": policies}
            }))
            .expect("schedule")
        };
        let gated = Fields::from_schedule(&with(serde_json::json!({"approval":
            {"required": true, "expires_after": "15m", "distinct_from_requester": true}})));
        assert_eq!(
            gated.approval,
            ApprovalFields {
                required: true,
                expires_after: "15m".into(),
                distinct_from_requester: true
            }
        );
        assert!(!gated.has_advanced(), "approval has its own section");
        let html = page(gated);
        for id in ["field-approval-required", "field-approval-distinct"] {
            let input = html
                .split("<input ")
                .find(|i| i.contains(&format!(r#"data-testid="{id}""#)))
                .unwrap_or_else(|| panic!("no {id}"));
            assert!(input.contains(" checked"), "{id}: {input}");
        }
        assert!(html.contains(r#"value="15m""#), "{html}");
        let plain = Fields::from_schedule(&with(serde_json::json!({})));
        assert_eq!(plain.approval, ApprovalFields::default());
        let html = page(plain);
        assert!(
            html.contains(r#"value="1h""#),
            "the default wait, for when it is ticked"
        );
        assert!(!html.contains(r#"type="checkbox" checked"#), "{html}");
    }

    #[test]
    fn a_new_schedule_has_a_closed_advanced_section_and_a_label_on_every_control() {
        let f = Fields::new_schedule();
        assert!(!f.has_advanced());
        assert_eq!(
            (f.on_success.key.as_str(), f.on_fail.key.as_str()),
            ("on_success", "on_fail")
        );
        let html = FormPage {
            ctx: Ctx::new(crate::daemon::PageState::Paired, Nav::Schedules),
            id: None,
            fields: f,
        }
        .render()
        .expect("renders");
        assert!(html.contains(r#"data-testid="advanced">"#), "closed");
        let mut controls = 0;
        for tag in ["<input id=\"", "<select id=\"", "<textarea id=\""] {
            for rest in html.split(tag).skip(1) {
                let id = rest.split('"').next().unwrap_or_default();
                assert!(
                    html.contains(&format!(r#"<label for="{id}""#)),
                    "no label for {id}"
                );
                controls += 1;
            }
        }
        assert!(controls >= 31, "{controls} controls");
        for key in ["on_success", "on_fail"] {
            assert!(html.contains(&format!(r#"data-when="{key}_kind=command""#)));
        }
    }
}
