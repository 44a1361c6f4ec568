//! The Secrets page: every secret studiod keeps, by name, with when it was set, by whom,
//! and the schedules and unfinished tasks that name it; and the terminal commands that
//! set and delete one (the browser reads the list, never a value: the API has none).

use askama::Template;
use axum::{extract::State, response::Response};
use http::HeaderMap;
use studio_api::{Secret, SecretList};

use super::{
    Ctx, Nav, render, resolve,
    words::{self, short_id},
};
use crate::{
    daemon::{encode, with_query},
    state::AppState,
};

/// One secret, as the page shows it.
#[derive(Debug, Clone)]
pub(crate) struct SecretRow {
    pub(crate) name: String,
    pub(crate) created: Option<words::Stamp>,
    /// When it was last set; `None` while it was never replaced.
    pub(crate) replaced: Option<words::Stamp>,
    /// "this browser", "the terminal (daemon token)", another browser by its short id.
    pub(crate) by: String,
    pub(crate) users: Vec<User>,
}

/// What names a secret, linked: a schedule (to the schedules its name finds) or a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User {
    pub(crate) label: String,
    pub(crate) href: String,
}

impl User {
    /// From studiod's `used_by` entry: a schedule's name, or `task ID`.
    fn of(entry: &str) -> Self {
        match entry.strip_prefix("task ") {
            Some(id) => Self {
                label: format!("task {}", short_id(id)),
                href: format!("/tasks/{}", encode(id)),
            },
            None => Self {
                label: entry.to_owned(),
                href: with_query("/schedules", &[("q", entry)]),
            },
        }
    }
}

impl SecretRow {
    pub(crate) fn new(s: &Secret, ctx: &Ctx) -> Self {
        let by = match s.updated_by.as_deref() {
            None => "—".to_owned(),
            Some("daemon") => "the terminal (daemon token)".to_owned(),
            Some(p) if ctx.principal.as_deref() == Some(p) => "this browser".to_owned(),
            Some(p) => format!("browser {}", short_id(p)),
        };
        Self {
            name: s.name.clone(),
            created: words::Stamp::parse(Some(&s.created_at), ctx.now),
            replaced: (s.updated_at != s.created_at)
                .then(|| words::Stamp::parse(Some(&s.updated_at), ctx.now))
                .flatten(),
            by,
            users: s.used_by.iter().map(|u| User::of(u)).collect(),
        }
    }
}

#[derive(Template)]
#[template(path = "secrets.html")]
pub(crate) struct SecretsPage {
    pub(crate) ctx: Ctx,
    pub(crate) secrets: Vec<SecretRow>,
}

#[tracing::instrument(skip_all)]
pub(crate) async fn page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/secrets", Nav::Secrets).await;
    let mut secrets = Vec::new();
    if let Some(p) = paired {
        match p
            .daemon(&state)
            .get::<SecretList>("/api/secrets", &[])
            .await
        {
            Ok(list) => {
                secrets = list
                    .secrets
                    .iter()
                    .map(|s| SecretRow::new(s, &ctx))
                    .collect();
            }
            Err(e) => ctx.fail(&e),
        }
    }
    render(&SecretsPage { ctx, secrets })
}

#[cfg(test)]
#[path = "secrets_tests.rs"]
mod tests;
