//! The audit page: who changed what, when, in what role and from where, newest first,
//! filtered by kind, by session or by schedule (`?schedule=ID`, which a schedule's page
//! links to), with a cursor to older rows. Also the rows a schedule's page shows.

use askama::Template;
use axum::{
    extract::{Query, State},
    response::Response,
};
use http::HeaderMap;
use serde::Deserialize;
use studio_api::AUDIT_KINDS;

use super::{
    Ctx, Nav, render, resolve,
    words::{self, short_id},
};
use crate::{
    daemon::{AuditEntry, encode, with_query},
    state::AppState,
};

/// Rows per page; the API caps `limit` itself.
const PAGE: &str = "50";

/// One row, ready to print.
#[derive(Debug, Clone)]
pub(crate) struct AuditRow {
    pub(crate) at: Option<words::Stamp>,
    /// "schedule created".
    pub(crate) kind: String,
    /// "this browser", "the terminal (daemon token)", a session's short id, or "studiod".
    pub(crate) who: String,
    pub(crate) role: Option<&'static str>,
    pub(crate) origin: Option<String>,
    /// The changed object's page, and how to name it.
    pub(crate) object: Option<(String, String)>,
    /// Its detail in words: `name=nightly revision=3`.
    pub(crate) detail: String,
}

impl AuditRow {
    pub(crate) fn new(e: &AuditEntry, ctx: &Ctx) -> Self {
        let who = match e.principal.as_deref() {
            None => "studiod".to_owned(),
            Some("daemon") => "the terminal (daemon token)".to_owned(),
            Some(p) if ctx.principal.as_deref() == Some(p) => "this browser".to_owned(),
            Some(p) => format!("browser {}", short_id(p)),
        };
        Self {
            at: words::Stamp::parse(Some(&e.at), ctx.now),
            kind: e.kind.replace('_', " "),
            who,
            role: e.role.map(|r| r.as_str()),
            origin: e.origin.clone(),
            object: e.object.as_deref().and_then(|o| object_link(o, &e.detail)),
            detail: detail_words(&e.detail),
        }
    }
}

/// `schedule:ID`, `run:ID` and `task:ID` link to their pages, named as the row's detail
/// names them ("schedule nightly", "run a1b2c3d4 of nightly", "task 0f1e2d3c");
/// anything else is not linked.
fn object_link(object: &str, detail: &serde_json::Value) -> Option<(String, String)> {
    let (kind, id) = object.split_once(':')?;
    let named = |key: &str| detail.get(key).and_then(serde_json::Value::as_str);
    match kind {
        "schedule" => Some((
            format!("/schedules/{}", encode(id)),
            format!("schedule {}", named("name").unwrap_or(short_id(id))),
        )),
        "run" => Some((
            format!("/runs/{}", encode(id)),
            match named("schedule") {
                Some(name) => format!("run {} of {name}", short_id(id)),
                None => format!("run {}", short_id(id)),
            },
        )),
        "task" => Some((
            format!("/tasks/{}", encode(id)),
            format!("task {}", short_id(id)),
        )),
        _ => None,
    }
}

/// A row's detail as `key=value` pairs in key order (strings unquoted), escaped by the
/// template like any text.
fn detail_words(detail: &serde_json::Value) -> String {
    let serde_json::Value::Object(map) = detail else {
        return String::new();
    };
    map.iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct AuditQuery {
    #[serde(default)]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) principal: String,
    #[serde(default)]
    pub(crate) schedule: String,
    #[serde(default)]
    pub(crate) cursor: String,
}

#[derive(Template)]
#[template(path = "audit.html")]
pub(crate) struct AuditPage {
    pub(crate) ctx: Ctx,
    pub(crate) query: AuditQuery,
    pub(crate) rows: Vec<AuditRow>,
    pub(crate) next: Option<String>,
}

impl AuditPage {
    pub(crate) fn kinds(&self) -> &'static [&'static str] {
        &AUDIT_KINDS
    }

    pub(crate) fn kind_is(&self, k: &str) -> bool {
        self.query.kind == k
    }

    pub(crate) fn filtered(&self) -> bool {
        !(self.query.kind.is_empty()
            && self.query.principal.is_empty()
            && self.query.schedule.is_empty())
    }

    /// The link to older rows keeps the filters (the cursor is opaque to us).
    pub(crate) fn next_href(&self) -> Option<String> {
        let cursor = self.next.as_deref()?;
        Some(with_query(
            "/audit",
            &[
                ("kind", &self.query.kind),
                ("principal", &self.query.principal),
                ("schedule", &self.query.schedule),
                ("cursor", cursor),
            ],
        ))
    }
}

#[tracing::instrument(skip_all)]
pub(crate) async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<AuditQuery>,
) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/audit", Nav::Audit).await;
    let mut page = AuditPage {
        ctx: ctx.clone(),
        query,
        rows: Vec::new(),
        next: None,
    };
    if let Some(p) = paired {
        let q = &page.query;
        // An unknown kind is left out rather than sent (the select offers only known ones).
        let kind = if AUDIT_KINDS.contains(&q.kind.as_str()) {
            q.kind.as_str()
        } else {
            ""
        };
        let answer = p
            .daemon(&state)
            .audit(&[
                ("kind", kind),
                ("principal", q.principal.trim()),
                ("schedule", q.schedule.trim()),
                ("cursor", &q.cursor),
                ("limit", PAGE),
            ])
            .await;
        match answer {
            Ok(a) => {
                page.rows = a.entries.iter().map(|e| AuditRow::new(e, &ctx)).collect();
                page.next = a.next_cursor;
            }
            Err(e) => ctx.fail(&e),
        }
        page.ctx = ctx;
    }
    render(&page)
}
