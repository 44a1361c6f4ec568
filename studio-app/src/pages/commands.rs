//! The Commands page: the command allow-list as studiod holds it, where each entry leads
//! on studiod's PATH, and the terminal commands that change it (the browser can read the
//! list, never change it).

use askama::Template;
use axum::{extract::State, response::Response};
use http::HeaderMap;
use jiff::Timestamp;

use super::{Ctx, Nav, render, resolve, words};
use crate::{daemon::AllowEntry, state::AppState};

/// One allowed executable, as the page shows it.
#[derive(Debug, Clone)]
pub(crate) struct CommandRow {
    pub(crate) executable: String,
    pub(crate) resolved: Option<String>,
    pub(crate) added: Option<words::Stamp>,
    pub(crate) added_by: String,
}

impl CommandRow {
    fn new(e: &AllowEntry, now: Timestamp) -> Self {
        Self {
            executable: e.executable.clone(),
            resolved: e.resolved.clone(),
            added: words::Stamp::parse(Some(&e.added_at), now),
            added_by: e.added_by.clone(),
        }
    }
}

#[derive(Template)]
#[template(path = "commands.html")]
pub(crate) struct CommandsPage {
    pub(crate) ctx: Ctx,
    pub(crate) commands: Vec<CommandRow>,
}

#[tracing::instrument(skip_all)]
pub(crate) async fn page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/admin/allowlist", Nav::Commands).await;
    let mut commands = Vec::new();
    if let Some(p) = paired {
        match p.daemon(&state).allowlist().await {
            Ok(list) => {
                commands = list
                    .entries
                    .iter()
                    .map(|e| CommandRow::new(e, ctx.now))
                    .collect();
            }
            Err(e) => ctx.fail(&e),
        }
    }
    render(&CommandsPage { ctx, commands })
}
