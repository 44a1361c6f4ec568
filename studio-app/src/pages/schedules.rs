//! Schedules: the filtered, cursor-paginated list (one API call: the list view already
//! carries health and last outcome) and the detail page with its recent runs.

use askama::Template;
use axum::{
    extract::{Path, Query, State},
    response::Response,
};
use http::HeaderMap;
use serde::Deserialize;

use studio_api::RecentRun;

use super::{Ctx, Nav, audit::AuditRow, render, resolve, runs::RunRow, words};
use crate::{
    daemon::{Schedule, with_query},
    state::AppState,
};

/// Rows per page; the API caps `limit` itself.
const PAGE: &str = "50";

pub(crate) use studio_contract::health::HEALTHS;

/// One schedule, ready to print.
#[derive(Debug, Clone)]
pub(crate) struct ScheduleRow {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) enabled: bool,
    pub(crate) trigger: String,
    pub(crate) next: Option<words::Stamp>,
    pub(crate) last_fired: Option<words::Stamp>,
    pub(crate) last_outcome: String,
    pub(crate) health: String,
    pub(crate) runs_counted: i64,
    pub(crate) spend: String,
    pub(crate) managed_by: Option<String>,
    /// Its newest runs, oldest first (the newest at the right, as time reads).
    pub(crate) strip: Vec<StripMark>,
    /// Whether one of them is queued or running.
    pub(crate) running: bool,
    /// How its newest finished run went, and when ("failed 5 min ago").
    pub(crate) latest: String,
}

/// One run of a schedule's history strip. A page holds 500 of these: the template writes
/// its link and its tooltip (status, when, and why it failed) from these parts, and a
/// mark makes no string of its own (its id and error line are the answer's, moved).
/// Its status, id (percent-encoded to unreserved characters) and time are written
/// unescaped: none can hold markup.
#[derive(Debug, Clone)]
pub(crate) struct StripMark {
    pub(crate) status: &'static str,
    /// The run's id as a path segment.
    pub(crate) id: String,
    /// "2 min ago"; `None` when studiod's time did not parse.
    pub(crate) when: Option<words::Relative>,
    pub(crate) error_line: Option<String>,
}

impl StripMark {
    fn new(r: RecentRun, ctx: &Ctx) -> Self {
        Self {
            status: r.status.as_str(),
            when: words::Stamp::parse(Some(&r.created_at), ctx.now).map(|t| t.ago()),
            id: crate::daemon::encoded(r.id),
            error_line: r.error_line,
        }
    }
}

/// "failed 5 min ago": its last outcome and when it came.
fn latest(s: &Schedule, ctx: &Ctx) -> String {
    let (Some(outcome), Some(at)) = (&s.last_outcome, &s.last_outcome_at) else {
        return String::new();
    };
    let when = words::Stamp::parse(Some(at), ctx.now)
        .map(|t| t.relative())
        .unwrap_or_default();
    format!("{} {when}", outcome.replace('_', " "))
}

impl ScheduleRow {
    /// Takes the answer's schedule, moving its strings rather than copying them.
    pub(crate) fn new(s: Schedule, ctx: &Ctx) -> Self {
        Self {
            running: s.recent_runs.iter().any(|r| r.status.is_active()),
            latest: latest(&s, ctx),
            trigger: words::trigger(&s.spec.trigger, s.timezone.as_deref()),
            next: words::Stamp::parse(s.next_fire_at.as_deref(), ctx.now),
            last_fired: words::Stamp::parse(s.last_fired_at.as_deref(), ctx.now),
            spend: words::money(Some(s.spend_usd)),
            strip: s
                .recent_runs
                .into_iter()
                .rev()
                .map(|r| StripMark::new(r, ctx))
                .collect(),
            id: s.id,
            name: s.name,
            enabled: s.enabled,
            last_outcome: s.last_outcome.unwrap_or_else(|| "—".into()),
            health: s.health,
            runs_counted: s.runs_counted,
            managed_by: s.managed_by,
        }
    }

    pub(crate) fn href(&self) -> String {
        format!("/schedules/{}", crate::daemon::encode(&self.id))
    }

    /// Its health in words a person reads without a glossary.
    pub(crate) fn health_words(&self) -> &'static str {
        words::health(&self.health).0
    }

    /// What its health means, for the badge's tooltip.
    pub(crate) fn health_meaning(&self) -> &'static str {
        words::health(&self.health).1
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    #[serde(default)]
    pub(crate) q: String,
    #[serde(default)]
    pub(crate) enabled: String,
    /// One health (see [`HEALTHS`]), or empty for any.
    #[serde(default)]
    pub(crate) health: String,
    #[serde(default)]
    pub(crate) cursor: String,
}

#[derive(Template)]
#[template(path = "schedules.html")]
pub(crate) struct ListPage {
    pub(crate) ctx: Ctx,
    pub(crate) query: ListQuery,
    pub(crate) rows: Vec<ScheduleRow>,
    pub(crate) next: Option<String>,
}

impl ListPage {
    /// The link to the next page keeps the filters (the cursor is opaque to us).
    pub(crate) fn next_href(&self) -> Option<String> {
        let cursor = self.next.as_deref()?;
        Some(with_query(
            "/schedules",
            &[
                ("q", &self.query.q),
                ("enabled", &self.query.enabled),
                ("health", &self.query.health),
                ("cursor", cursor),
            ],
        ))
    }

    pub(crate) fn enabled_is(&self, v: &str) -> bool {
        self.query.enabled == v
    }

    pub(crate) fn health_is(&self, v: &str) -> bool {
        self.query.health == v
    }

    pub(crate) fn healths(&self) -> &'static [&'static str] {
        HEALTHS
    }
}

#[tracing::instrument(skip_all)]
pub(crate) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/schedules", Nav::Schedules).await;
    let mut page = ListPage {
        ctx: ctx.clone(),
        query,
        rows: Vec::new(),
        next: None,
    };
    if let Some(p) = paired {
        let q = &page.query;
        let enabled = match q.enabled.as_str() {
            "true" | "false" => q.enabled.as_str(),
            _ => "",
        };
        let health = if HEALTHS.contains(&q.health.as_str()) {
            q.health.as_str()
        } else {
            ""
        };
        let answer = p
            .daemon(&state)
            .schedules(&[
                ("q", &q.q),
                ("enabled", enabled),
                ("health", health),
                ("cursor", &q.cursor),
                ("limit", PAGE),
            ])
            .await;
        match answer {
            Ok(list) => {
                page.rows = list
                    .schedules
                    .into_iter()
                    .map(|s| ScheduleRow::new(s, &ctx))
                    .collect();
                page.next = list.next_cursor;
            }
            Err(e) => ctx.fail(&e),
        }
        page.ctx = ctx;
    }
    render(&page)
}

#[derive(Template)]
#[template(path = "schedule.html")]
pub(crate) struct DetailPage {
    pub(crate) ctx: Ctx,
    pub(crate) schedule: Option<ScheduleRow>,
    /// Its spec as the API holds it, indented (only this page shows it).
    pub(crate) spec_json: String,
    pub(crate) runs: Vec<RunRow>,
    /// Its newest changes, from the audit trail.
    pub(crate) history: Vec<AuditRow>,
}

/// A schedule's spec as the API holds it, indented for reading.
pub(crate) fn spec_json(s: &Schedule) -> String {
    serde_json::to_string_pretty(&s.spec).unwrap_or_default()
}

#[tracing::instrument(skip_all)]
pub(crate) async fn detail(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/schedules", Nav::Schedules).await;
    let mut page = DetailPage {
        ctx: ctx.clone(),
        schedule: None,
        spec_json: String::new(),
        runs: Vec::new(),
        history: Vec::new(),
    };
    if let Some(p) = paired {
        let daemon = p.daemon(&state);
        // Three calls, concurrently: the schedule, its latest runs and its changes.
        let run_query = [("schedule", id.as_str()), ("limit", "20")];
        let audit_query = [("schedule", id.as_str()), ("limit", "10")];
        let (schedule, runs, history) = tokio::join!(
            daemon.schedule(&id),
            daemon.runs(&run_query),
            daemon.audit(&audit_query)
        );
        match schedule {
            Ok(s) => {
                page.spec_json = spec_json(&s);
                page.schedule = Some(ScheduleRow::new(s, &ctx));
            }
            Err(e) => ctx.fail(&e),
        }
        match runs {
            Ok(r) => page.runs = r.runs.iter().map(|r| RunRow::list(r, &ctx)).collect(),
            Err(e) => ctx.fail(&e),
        }
        match history {
            Ok(h) => {
                page.history = h.entries.iter().map(|e| AuditRow::new(e, &ctx)).collect();
            }
            Err(e) => ctx.fail(&e),
        }
        page.ctx = ctx;
    }
    render(&page)
}
