//! Runs: the list filtered by schedule, status and time (the API's cursor pages it) and
//! the detail page — transitions, outcome, and a log view that `cockpit.js` fills from
//! the ranged log endpoint (live tail while running, "load earlier" for big logs).

use askama::Template;
use axum::{
    extract::{Path, Query, State},
    response::Response,
};
use http::HeaderMap;
use serde::Deserialize;

use studio_api::{RunCore, RunListItem, RunStatus, Transition};

use super::{Ctx, Nav, render, resolve, words};
use crate::{
    daemon::{DaemonError, encode, with_query},
    state::AppState,
};

const PAGE: &str = "50";

/// The statuses a run can have, for the filter.
pub(crate) const STATUSES: &[&str] = &RunStatus::WORDS;

#[derive(Debug, Clone)]
pub(crate) struct TransitionRow {
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) reason: String,
    pub(crate) at: Option<words::Stamp>,
}

/// One run, ready to print.
#[derive(Debug, Clone)]
pub(crate) struct RunRow {
    pub(crate) id: String,
    pub(crate) schedule_id: Option<String>,
    pub(crate) schedule_name: Option<String>,
    pub(crate) kind: String,
    pub(crate) status: String,
    pub(crate) reason: String,
    pub(crate) created: Option<words::Stamp>,
    pub(crate) finished: Option<words::Stamp>,
    pub(crate) outcome: String,
    pub(crate) duration: String,
    pub(crate) cost: String,
    pub(crate) active: bool,
    pub(crate) stdout_bytes: u64,
    pub(crate) stderr_bytes: u64,
    pub(crate) transitions: Vec<TransitionRow>,
}

impl RunRow {
    /// A row of a list (with its schedule's name) or the run of a detail page (with its
    /// transitions).
    pub(crate) fn new(
        r: &RunCore,
        schedule_name: Option<&str>,
        transitions: &[Transition],
        ctx: &Ctx,
    ) -> Self {
        let outcome = match (r.exit_code, r.signal) {
            (_, Some(sig)) => format!("signal {sig}"),
            (Some(code), None) => format!("exit {code}"),
            (None, None) => "—".into(),
        };
        Self {
            id: r.id.clone(),
            schedule_id: r.schedule_id.clone(),
            schedule_name: schedule_name.map(str::to_owned),
            kind: r.kind.as_str().to_owned(),
            status: r.status.as_str().to_owned(),
            reason: r.reason.clone().unwrap_or_default(),
            created: words::Stamp::parse(Some(&r.created_at), ctx.now),
            finished: words::Stamp::parse(r.finished_at.as_deref(), ctx.now),
            outcome,
            duration: words::duration_ms(r.duration_ms),
            cost: words::money(r.cost_usd),
            active: r.active(),
            stdout_bytes: r
                .stdout_bytes
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0),
            stderr_bytes: r
                .stderr_bytes
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0),
            transitions: transitions
                .iter()
                .map(|t| TransitionRow {
                    from: t.from.map_or("—", RunStatus::as_str).to_owned(),
                    to: t.to.as_str().to_owned(),
                    reason: t.reason.clone().unwrap_or_default(),
                    at: words::Stamp::parse(Some(&t.at), ctx.now),
                })
                .collect(),
        }
    }

    /// A row of a run list.
    pub(crate) fn list(r: &RunListItem, ctx: &Ctx) -> Self {
        Self::new(&r.core, r.schedule_name.as_deref(), &[], ctx)
    }

    pub(crate) fn href(&self) -> String {
        format!("/runs/{}", encode(&self.id))
    }

    pub(crate) fn schedule_href(&self) -> Option<String> {
        self.schedule_id
            .as_deref()
            .map(|id| format!("/schedules/{}", encode(id)))
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    /// A schedule id (links from a schedule's page).
    #[serde(default)]
    pub(crate) schedule: String,
    /// A schedule name, typed into the filter.
    #[serde(default)]
    pub(crate) schedule_name: String,
    #[serde(default)]
    pub(crate) status: String,
    /// A preset time window (`1h`, `24h`, `7d`), used when `since` is empty.
    #[serde(default)]
    pub(crate) window: String,
    #[serde(default)]
    pub(crate) since: String,
    #[serde(default)]
    pub(crate) until: String,
    #[serde(default)]
    pub(crate) cursor: String,
}

#[derive(Template)]
#[template(path = "runs.html")]
pub(crate) struct ListPage {
    pub(crate) ctx: Ctx,
    pub(crate) query: ListQuery,
    pub(crate) rows: Vec<RunRow>,
    pub(crate) next: Option<String>,
}

impl ListPage {
    /// The name shown for a row's schedule: its name, else its id (a deleted schedule).
    pub(crate) fn schedule_name(&self, row: &RunRow) -> String {
        row.schedule_name
            .clone()
            .or_else(|| row.schedule_id.clone())
            .unwrap_or_default()
    }

    /// What the schedule box shows: the typed name, else the name of the schedule the
    /// page was linked to (known from its rows).
    pub(crate) fn schedule_text(&self) -> String {
        if !self.query.schedule_name.is_empty() {
            return self.query.schedule_name.clone();
        }
        self.rows
            .iter()
            .find(|r| r.schedule_id.as_deref() == Some(self.query.schedule.as_str()))
            .and_then(|r| r.schedule_name.clone())
            .unwrap_or_default()
    }

    /// A schedule id filter the box cannot show as a name is kept as a hidden field.
    pub(crate) fn keeps_schedule_id(&self) -> bool {
        !self.query.schedule.is_empty() && self.schedule_text().is_empty()
    }

    pub(crate) fn statuses(&self) -> &'static [&'static str] {
        STATUSES
    }

    pub(crate) fn window_is(&self, w: &str) -> bool {
        self.query.window == w
    }

    pub(crate) fn status_is(&self, s: &str) -> bool {
        self.query.status == s
    }

    pub(crate) fn next_href(&self) -> Option<String> {
        let cursor = self.next.as_deref()?;
        let q = &self.query;
        Some(with_query(
            "/runs",
            &[
                ("schedule", &q.schedule),
                ("schedule_name", &q.schedule_name),
                ("status", &q.status),
                ("window", &q.window),
                ("since", &q.since),
                ("until", &q.until),
                ("cursor", cursor),
            ],
        ))
    }
}

#[tracing::instrument(skip_all)]
pub(crate) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/runs", Nav::Runs).await;
    let mut page = ListPage {
        ctx: ctx.clone(),
        query,
        rows: Vec::new(),
        next: None,
    };
    if let Some(p) = paired {
        let q = &page.query;
        let since = since(q, ctx.now);
        let name = q.schedule_name.trim();
        // One call: each run in the list carries its schedule's name.
        let answer = p
            .daemon(&state)
            .runs(&[
                ("schedule", q.schedule.as_str()),
                ("schedule_name", name),
                ("status", q.status.as_str()),
                ("since", since.as_str()),
                ("until", q.until.as_str()),
                ("cursor", q.cursor.as_str()),
                ("limit", PAGE),
            ])
            .await;
        match answer {
            Ok(list) => {
                page.rows = list.runs.iter().map(|r| RunRow::list(r, &ctx)).collect();
                page.next = list.next_cursor;
            }
            Err(DaemonError::NotFound) if !name.is_empty() => {
                ctx.problem = Some(format!("No schedule is named {name:?}."));
            }
            Err(e) => ctx.fail(&e),
        }
        page.ctx = ctx;
    }
    render(&page)
}

/// The `since` sent to the API: typed in, else the preset window back from `now`.
pub(crate) fn since(q: &ListQuery, now: jiff::Timestamp) -> String {
    if !q.since.is_empty() {
        return q.since.clone();
    }
    let hours = match q.window.as_str() {
        "1h" => 1,
        "24h" => 24,
        "7d" => 24 * 7,
        _ => return String::new(),
    };
    (now - jiff::SignedDuration::from_hours(hours)).to_string()
}

#[derive(Template)]
#[template(path = "run.html")]
pub(crate) struct DetailPage {
    pub(crate) ctx: Ctx,
    pub(crate) run: Option<RunRow>,
}

#[tracing::instrument(skip_all)]
pub(crate) async fn detail(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/runs", Nav::Runs).await;
    let mut page = DetailPage {
        ctx: ctx.clone(),
        run: None,
    };
    if let Some(p) = paired {
        match p.daemon(&state).run(&id).await {
            Ok(r) => page.run = Some(RunRow::new(&r.run.core, None, &r.transitions, &ctx)),
            Err(e) => ctx.fail(&e),
        }
        page.ctx = ctx;
    }
    render(&page)
}
