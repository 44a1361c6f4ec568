//! Runs: the list filtered by schedule, status and time (the API's cursor pages it) and
//! the detail page — transitions, outcome, the notifications sent, and a log view that
//! `cockpit.js` fills from the ranged log endpoint (live tail while running, "load
//! earlier" for big logs).

use askama::Template;
use axum::{
    extract::{Path, Query, State},
    response::Response,
};
use http::HeaderMap;

use studio_api::{
    DeliveryList, QueuePlace, RunCore, RunDetail, RunListItem, RunStatus, Transition,
};

use super::{
    Ctx, Nav,
    approvals::{ApprovalView, EvidenceView},
    notifications::{self, NotificationRow},
    render, resolve,
    words::{self, short_id},
};
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
    /// The on-demand task it is an attempt of (no schedule then, never "deleted").
    pub(crate) task_id: Option<String>,
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
    /// The run this one follows in a chain (a follow-up's parent), if any.
    pub(crate) parent_id: Option<String>,
    /// The run this one retries (it replaced that one), if any.
    pub(crate) replaces_id: Option<String>,
    /// Why a queued run has not started ("waiting for a slot: 4 of 4 running"); empty
    /// otherwise, and on list rows.
    pub(crate) waiting: String,
}

/// "waiting for a slot: 4 of 4 running, 2 queued before it".
pub(crate) fn waiting_words(q: &QueuePlace) -> String {
    let before = match q.ahead {
        0 => String::from(", next in line"),
        1 => String::from(", 1 queued before it"),
        n => format!(", {n} queued before it"),
    };
    format!(
        "waiting for a slot: {} of {} running{before}",
        q.running, q.slots
    )
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
            // A task's attempt has no schedule: it is named by its task.
            schedule_name: r.schedule_name.clone().or_else(|| {
                r.task_id
                    .as_deref()
                    .map(|task| format!("task {}", short_id(task)))
            }),
            task_id: r.task_id.clone(),
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
            parent_id: r.chain_parent_id.clone(),
            replaces_id: r.replaces_run_id.clone(),
            waiting: String::new(),
        }
    }

    /// A link to another run of this one's chain, shown by its short id.
    pub(crate) fn run_link(id: &str) -> (String, String) {
        (format!("/runs/{}", encode(id)), short_id(id).to_owned())
    }

    /// A row of a run list.
    pub(crate) fn list(r: &RunListItem, ctx: &Ctx) -> Self {
        Self::new(&r.core, &[], ctx)
    }

    /// The run of its own page: its history, and for a failure the lines that say why.
    pub(crate) fn detail(d: &RunDetail, ctx: &Ctx) -> Self {
        let mut row = Self::new(&d.run.core, &d.transitions, ctx);
        if let Some(q) = &d.queue {
            row.waiting = waiting_words(q);
        }
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

    /// The page of the task it is an attempt of.
    pub(crate) fn task_href(&self) -> Option<String> {
        self.task_id
            .as_deref()
            .map(|id| format!("/tasks/{}", encode(id)))
    }
}

/// The last `n` lines of `text` that are not trailing blank ones.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The runs page's filters, read from its address (a status may repeat: one per box).
#[derive(Debug, Default, Clone)]
pub(crate) struct ListQuery {
    /// A schedule id (links from a schedule's page).
    pub(crate) schedule: String,
    /// A schedule's exact name (links that name one).
    pub(crate) schedule_name: String,
    /// Text the schedule name contains, typed into the filter.
    pub(crate) q: String,
    /// The part of a schedule name before its `/`.
    pub(crate) project: String,
    /// Any of these statuses (none: any).
    pub(crate) statuses: Vec<String>,
    /// A preset time window (`1h`, `24h`, `7d`), used when no start is given.
    pub(crate) window: String,
    /// An instant (RFC 3339) the runs were created at or after (links from the chart).
    pub(crate) since: String,
    /// An instant (RFC 3339) the runs were created before.
    pub(crate) until: String,
    /// The first day (`YYYY-MM-DD`, UTC) of the date pickers.
    pub(crate) from: String,
    /// The last day (`YYYY-MM-DD`, UTC), included.
    pub(crate) to: String,
    pub(crate) cursor: String,
}

impl ListQuery {
    /// From the address's pairs; unknown names are ignored, as a form may add some.
    pub(crate) fn from_pairs(pairs: Vec<(String, String)>) -> Self {
        let mut q = Self::default();
        for (k, v) in pairs {
            let v = v.trim().to_owned();
            match k.as_str() {
                "schedule" => q.schedule = v,
                "schedule_name" => q.schedule_name = v,
                "q" => q.q = v,
                "project" => q.project = v,
                "status" => {
                    for s in v.split(',').filter(|s| STATUSES.contains(s)) {
                        if !q.statuses.iter().any(|have| have == s) {
                            q.statuses.push(s.to_owned());
                        }
                    }
                }
                "window" => q.window = v,
                "since" => q.since = v,
                "until" => q.until = v,
                "from" => q.from = v,
                "to" => q.to = v,
                "cursor" => q.cursor = v,
                _ => {}
            }
        }
        q
    }

    /// The address's pairs for these filters (the cursor left to the caller).
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            ("schedule", self.schedule.clone()),
            ("schedule_name", self.schedule_name.clone()),
            ("q", self.q.clone()),
            ("project", self.project.clone()),
        ];
        out.extend(self.statuses.iter().map(|s| ("status", s.clone())));
        out.extend([
            ("window", self.window.clone()),
            ("since", self.since.clone()),
            ("until", self.until.clone()),
            ("from", self.from.clone()),
            ("to", self.to.clone()),
        ]);
        out
    }

    /// Whether any filter narrows the list.
    pub(crate) fn filtered(&self) -> bool {
        self.pairs().iter().any(|(_, v)| !v.is_empty())
    }
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
    /// The schedule the page is scoped to by a link, by name: the name given, else the
    /// name of the linked schedule (known from its rows).
    pub(crate) fn scope_name(&self) -> String {
        if !self.query.schedule_name.is_empty() {
            return self.query.schedule_name.clone();
        }
        if self.query.schedule.is_empty() {
            return String::new();
        }
        self.rows
            .iter()
            .find(|r| r.schedule_id.as_deref() == Some(self.query.schedule.as_str()))
            .and_then(|r| r.schedule_name.clone())
            .unwrap_or_else(|| "one schedule".into())
    }

    /// The same filters without what a link set (its schedule, its instants).
    pub(crate) fn unscoped_href(&self) -> String {
        let q = ListQuery {
            schedule: String::new(),
            schedule_name: String::new(),
            since: String::new(),
            until: String::new(),
            cursor: String::new(),
            ..self.query.clone()
        };
        href(&q, None)
    }

    pub(crate) fn statuses(&self) -> &'static [&'static str] {
        STATUSES
    }

    pub(crate) fn window_is(&self, w: &str) -> bool {
        self.query.window == w
    }

    pub(crate) fn status_is(&self, s: &str) -> bool {
        self.query.statuses.iter().any(|have| have == s)
    }

    /// Projects seen on this page, for the project box's suggestions (the current one
    /// first).
    pub(crate) fn projects(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let seen = self
            .rows
            .iter()
            .filter_map(|r| r.schedule_name.as_deref()?.split_once('/'))
            .map(|(p, _)| p);
        for p in std::iter::once(self.query.project.as_str()).chain(seen) {
            if !p.is_empty() && !out.iter().any(|have| have == p) {
                out.push(p.to_owned());
            }
        }
        out
    }

    pub(crate) fn next_href(&self) -> Option<String> {
        Some(href(&self.query, Some(self.next.as_deref()?)))
    }
}

/// `/runs` with `q`'s filters and an optional cursor.
fn href(q: &ListQuery, cursor: Option<&str>) -> String {
    let mut pairs = q.pairs();
    pairs.push(("cursor", cursor.unwrap_or_default().to_owned()));
    let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    with_query("/runs", &refs)
}

#[tracing::instrument(skip_all)]
pub(crate) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/runs", Nav::Runs).await;
    let mut page = ListPage {
        ctx: ctx.clone(),
        query: ListQuery::from_pairs(pairs),
        rows: Vec::new(),
        next: None,
    };
    if let Some(p) = paired {
        let q = &page.query;
        let (since, until) = (since(q, ctx.now), until(q));
        let statuses = q.statuses.join(",");
        // One call: each run in the list carries its schedule's name.
        let answer = p
            .daemon(&state)
            .runs(&[
                ("schedule", q.schedule.as_str()),
                ("schedule_name", q.schedule_name.as_str()),
                ("q", q.q.as_str()),
                ("project", q.project.as_str()),
                ("status", statuses.as_str()),
                ("since", since.as_str()),
                ("until", until.as_str()),
                ("cursor", q.cursor.as_str()),
                ("limit", PAGE),
            ])
            .await;
        match answer {
            Ok(list) => {
                page.rows = list.runs.iter().map(|r| RunRow::list(r, &ctx)).collect();
                page.next = list.next_cursor;
            }
            Err(DaemonError::NotFound) if !q.schedule_name.is_empty() => {
                ctx.problem = Some(format!("No schedule is named {:?}.", q.schedule_name));
            }
            Err(DaemonError::Other {
                status: 400,
                message,
            }) => {
                ctx.problem = Some(format!("These filters cannot be used: {message}"));
            }
            Err(e) => ctx.fail(&e),
        }
        page.ctx = ctx;
    }
    render(&page)
}

/// The `since` sent to the API: an instant given, else the first picked day (UTC
/// midnight), else the preset window back from `now`.
pub(crate) fn since(q: &ListQuery, now: jiff::Timestamp) -> String {
    if !q.since.is_empty() {
        return q.since.clone();
    }
    if let Some(day) = midnight(&q.from, 0) {
        return day;
    }
    let hours = match q.window.as_str() {
        "1h" => 1,
        "24h" => 24,
        "7d" => 24 * 7,
        _ => return String::new(),
    };
    (now - jiff::SignedDuration::from_hours(hours)).to_string()
}

/// The `until` sent to the API: an instant given, else the midnight after the last
/// picked day (so that day is included).
pub(crate) fn until(q: &ListQuery) -> String {
    if !q.until.is_empty() {
        return q.until.clone();
    }
    midnight(&q.to, 1).unwrap_or_default()
}

/// UTC midnight `days_after` a `YYYY-MM-DD` day, as RFC 3339; none for anything else
/// (a malformed day is dropped rather than sent on).
fn midnight(day: &str, days_after: i64) -> Option<String> {
    let date: jiff::civil::Date = day.parse().ok()?;
    let date = date.checked_add(jiff::Span::new().days(days_after)).ok()?;
    let at = date.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
    Some(at.to_string())
}

#[derive(Template)]
#[template(path = "run.html")]
pub(crate) struct DetailPage {
    pub(crate) ctx: Ctx,
    pub(crate) run: Option<RunRow>,
    /// Who asked for it and who cancelled it, from the audit trail (a run the clock
    /// fired has none).
    pub(crate) history: Vec<super::audit::AuditRow>,
    /// Its approval requests, oldest first (none unless its schedule requires approval).
    pub(crate) approvals: Vec<ApprovalView>,
    /// The evidence rows sealed for it, oldest first.
    pub(crate) evidence: Vec<EvidenceView>,
    /// What its `notify` rules sent, newest first (none: the section is left out).
    pub(crate) notifications: Vec<NotificationRow>,
}

impl DetailPage {
    /// The request a run awaiting approval waits for: its newest, while pending.
    pub(crate) fn waiting_for(&self) -> Option<&ApprovalView> {
        let run = self.run.as_ref()?;
        if run.status != RunStatus::AwaitingApproval.as_str() {
            return None;
        }
        self.approvals.last().filter(|a| a.pending())
    }
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
        history: Vec::new(),
        approvals: Vec::new(),
        evidence: Vec::new(),
        notifications: Vec::new(),
    };
    if let Some(p) = paired {
        let daemon = p.daemon(&state);
        let object = format!("run:{id}");
        let audit_query = [("object", object.as_str()), ("limit", "10")];
        let sent_query = [("run", id.as_str())];
        let (run, history, sent) = tokio::join!(
            daemon.run(&id),
            daemon.audit(&audit_query),
            daemon.get::<DeliveryList>("/api/notify/deliveries", &sent_query),
        );
        match run {
            Ok(r) => {
                page.run = Some(RunRow::detail(&r, &ctx));
                page.approvals = r
                    .approvals
                    .iter()
                    .map(|a| ApprovalView::new(a, &ctx))
                    .collect();
                page.evidence = r
                    .evidence
                    .iter()
                    .map(|e| EvidenceView::new(e, &ctx))
                    .collect();
            }
            Err(e) => ctx.fail(&e),
        }
        match history {
            Ok(h) => {
                // Oldest first: who asked, then who cancelled.
                page.history = h
                    .entries
                    .iter()
                    .rev()
                    .map(|e| super::audit::AuditRow::new(e, &ctx))
                    .collect();
            }
            Err(e) => ctx.fail(&e),
        }
        page.notifications = notifications::rows(sent, &ctx);
        page.ctx = ctx;
    }
    render(&page)
}
