//! The schedule form (create at `/schedules/new`, edit at `/schedules/{id}/edit`): the
//! server renders the fields prefilled from the spec; `cockpit.js` sends the JSON
//! (`POST /api/schedules` or a `PATCH`), previews the next five fires and puts each
//! `errors[].path` of a `400 validation_failed` next to its field.

use askama::Template;
use axum::{
    extract::{Path, State},
    response::Response,
};
use http::HeaderMap;
use serde_json::Value;

use super::{Ctx, Nav, render, resolve};
use crate::{daemon::Schedule, http::AppState};

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
    pub(crate) enabled: bool,
}

impl Fields {
    pub(crate) fn new_schedule() -> Self {
        Self {
            trigger_kind: "cron".into(),
            action_kind: "command".into(),
            enabled: true,
            ..Self::default()
        }
    }

    pub(crate) fn from_schedule(s: &Schedule) -> Self {
        let spec = &s.spec;
        let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
        let trigger = &spec["trigger"];
        let trigger_kind = ["cron", "every", "at"]
            .into_iter()
            .find(|k| !trigger[*k].is_null())
            .unwrap_or("cron");
        let action = &spec["action"];
        let args: Vec<String> = action["args"]
            .as_array()
            .map(|a| a.iter().map(text).collect())
            .unwrap_or_default();
        Self {
            name: s.name.clone(),
            description: text(&spec["description"]),
            trigger_kind: trigger_kind.into(),
            cron: text(&trigger["cron"]["expression"]),
            timezone: text(&trigger["cron"]["timezone"]),
            every: text(&trigger["every"]),
            at: text(&trigger["at"]),
            action_kind: action["kind"].as_str().unwrap_or("command").into(),
            executable: text(&action["executable"]),
            args: args.join("\n"),
            prompt: text(&action["prompt"]),
            model: text(&action["model"]),
            profile: text(&action["profile"]),
            cwd: text(&spec["cwd"]),
            enabled: s.enabled,
        }
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
            "id": "s", "name": "n", "enabled": false,
            "spec": {"trigger": {"cron": {"expression": "0 2 * * *", "timezone": "Europe/Berlin"}},
                     "action": {"kind": "command", "executable": "sh", "args": ["-c", "echo hi"]},
                     "cwd": "/tmp"}
        }))
        .expect("schedule");
        let f = Fields::from_schedule(&s);
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
            "id": "s", "name": "n", "enabled": true,
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
}
