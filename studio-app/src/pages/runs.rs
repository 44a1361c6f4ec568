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

use studio_api::{RunCore, RunDetail, RunListItem, RunStatus, Transition};

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

/// How many lines of the failing stream a failed run's page shows above the fold.
const WHY_LINES: usize = 20;

/// One run, ready to print.
#[derive(Debug, Clone)]
pub(crate) struct RunRow {
    pub(crate) id: String,
    /// The id's last eight characters: a UUIDv7's first ones are its creation time, so
    /// runs made in the same minute would share them.
    pub(crate) short_id: String,
    pub(crate) schedule_id: Option<String>,
    /// The name the run ran under (kept when its schedule is renamed or deleted).
    pub(crate) schedule_name: Option<String>,
    pub(crate) kind: String,
    pub(crate) status: String,
    pub(crate) reason: String,
    pub(crate) created: Option<words::Stamp>,
    pub(crate) finished: Option<words::Stamp>,
    /// How it ended, in words ("exited with code 3", "never started: …").
    pub(crate) outcome: String,
    /// Why it failed, in one line; empty unless it failed or timed out.
    pub(crate) error_line: String,
    pub(crate) duration: String,
    pub(crate) cost: String,
    pub(crate) active: bool,
    pub(crate) stdout_bytes: u64,
    pub(crate) stderr_bytes: u64,
    pub(crate) transitions: Vec<TransitionRow>,
    /// The stream that says why it failed (stderr unless only stdout has anything), which
    /// the log opens on; `stdout` for a run that did not fail.
    pub(crate) error_stream: &'static str,
    /// The last lines of that stream, for a run that failed or timed out.
    pub(crate) error_tail: String,
    /// When it started running and when its deadline ends it (RFC 3339, or empty): the
    /// page ticks the elapsed and the remaining time from them while it runs.
    pub(crate) dispatched_at: String,
    pub(crate) deadline_at: String,
}

impl RunRow {
    /// A row of a list, or the run of a detail page (with its transitions).
    pub(crate) fn new(r: &RunCore, transitions: &[Transition], ctx: &Ctx) -> Self {
        let mut outcome = r.outcome();
        if r.status == RunStatus::TimedOut && r.duration_ms.is_some() {
            outcome = format!("{outcome}, after {}", words::duration_ms(r.duration_ms));
        }
        let bytes = |n: Option<i64>| n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
        Self {
            id: r.id.clone(),
            short_id: short_id(&r.id).to_owned(),
            schedule_id: r.schedule_id.clone(),
            schedule_name: r.schedule_name.clone(),
            kind: r.kind.as_str().to_owned(),
            status: r.status.as_str().to_owned(),
            reason: r.reason.clone().unwrap_or_default(),
            created: words::Stamp::parse(Some(&r.created_at), ctx.now),
            finished: words::Stamp::parse(r.finished_at.as_deref(), ctx.now),
            outcome,
            error_line: r.error_line.clone().unwrap_or_default(),
            duration: words::duration_ms(r.duration_ms),
            cost: words::money(r.cost_usd),
            active: r.active(),
            stdout_bytes: bytes(r.stdout_bytes),
            stderr_bytes: bytes(r.stderr_bytes),
            transitions: transitions
                .iter()
                .map(|t| TransitionRow {
                    from: t.from.map_or("—", RunStatus::as_str).to_owned(),
                    to: t.to.as_str().to_owned(),
                    reason: t.reason.clone().unwrap_or_default(),
                    at: words::Stamp::parse(Some(&t.at), ctx.now),
                })
                .collect(),
            error_stream: "stdout",
            error_tail: String::new(),
            dispatched_at: r.dispatched_at.clone().unwrap_or_default(),
            deadline_at: r.deadline_at.clone().unwrap_or_default(),
        }
    }

    /// A row of a run list.
    pub(crate) fn list(r: &RunListItem, ctx: &Ctx) -> Self {
        Self::new(&r.core, &[], ctx)
    }

    /// The run of its own page: its history, and for a failure the lines that say why.
    pub(crate) fn detail(d: &RunDetail, ctx: &Ctx) -> Self {
        let mut row = Self::new(&d.run.core, &d.transitions, ctx);
        if row.failed() {
            let said =
                |tail: &Option<String>| tail.as_deref().is_some_and(|t| !t.trim().is_empty());
            let (stream, tail) = if said(&d.run.stderr_tail) || !said(&d.run.stdout_tail) {
                ("stderr", &d.run.stderr_tail)
            } else {
                ("stdout", &d.run.stdout_tail)
            };
            row.error_stream = stream;
            row.error_tail = last_lines(tail.as_deref().unwrap_or(""), WHY_LINES);
        }
        row
    }

    /// Whether it failed or timed out (its page says why).
    pub(crate) fn failed(&self) -> bool {
        matches!(self.status.as_str(), "failed" | "timed_out")
    }

    /// Its schedule's name, else (from before names were kept, schedule gone) "—".
    pub(crate) fn name(&self) -> &str {
        self.schedule_name.as_deref().unwrap_or("—")
    }

    /// A sign of its status for titles: how a tab says whether it went well.
    pub(crate) fn mark(&self) -> &'static str {
        match self.status.as_str() {
            "completed" => "✓",
            "failed" | "timed_out" => "✗",
            "running" => "●",
            "queued" => "○",
            _ => "–",
        }
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

/// The part of a run id people tell runs apart by.
pub(crate) fn short_id(id: &str) -> &str {
    let cut = id.char_indices().rev().nth(7).map_or(0, |(i, _)| i);
    &id[cut..]
}

/// The last `n` lines of `text` that are not trailing blank ones.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
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
            Ok(r) => page.run = Some(RunRow::detail(&r, &ctx)),
            Err(e) => ctx.fail(&e),
        }
        page.ctx = ctx;
    }
    render(&page)
}
