//! Tasks: the workers that serve the queue (studiod's built-in one first, each with its
//! labels, how busy it is and whether it is connected); the on-demand queue, newest
//! first, filtered by status and label (the API's cursor pages it), each task with what
//! it runs, its labels (marked unmatched while no worker has them), priority, attempts
//! and status; and a task's page — its spec in words, its attempts linked to their runs
//! and named by the worker that ran them, the latest attempt's live log, and Cancel and
//! Retry for an operator or an admin, which `cockpit.js` sends like every action.
//!
//! The workers are read beside the tasks: when they cannot be, the page says so and
//! shows the rest (a refusal still fails the page closed, as every call does).

use askama::Template;
use axum::{
    extract::{Path, Query, State},
    response::Response,
};
use http::HeaderMap;
use studio_api::{
    RunListItem, TASK_STATUSES, Task, TaskStatus, Worker, WorkerList,
    schedule::{RetryOn, RetryPolicy, TaskSpec},
};

use super::{
    Ctx, Nav,
    approvals::who,
    render, resolve,
    runs::RunRow,
    words::{self, short_id},
};
use crate::{
    approval::Work,
    daemon::{DaemonError, encode, with_query},
    state::AppState,
};

/// Tasks per page of the list.
const PAGE: &str = "50";

/// What an "unmatched" mark means, for its tooltip.
pub(crate) const UNMATCHED: &str =
    "No worker has these labels: the task waits until one that has them joins.";

/// One task, ready to print.
#[derive(Debug, Clone)]
pub(crate) struct TaskRow {
    pub(crate) id: String,
    pub(crate) short_id: String,
    pub(crate) status: TaskStatus,
    pub(crate) reason: String,
    pub(crate) work: Work,
    pub(crate) labels: Vec<String>,
    /// Queued, and no worker has its labels.
    pub(crate) unmatched: bool,
    pub(crate) priority: u8,
    pub(crate) attempts: i64,
    /// When its next attempt is due (`retry_wait` only).
    pub(crate) next_attempt: Option<words::Stamp>,
    pub(crate) submitted: Option<words::Stamp>,
    pub(crate) submitter: String,
    pub(crate) finished: Option<words::Stamp>,
    pub(crate) last_run_id: Option<String>,
}

impl TaskRow {
    pub(crate) fn new(t: &Task, ctx: &Ctx) -> Self {
        Self {
            id: t.id.clone(),
            short_id: short_id(&t.id).to_owned(),
            status: t.status,
            // Why it ended as it did; a completed one needs no why.
            reason: t
                .reason
                .clone()
                .filter(|_| t.status != TaskStatus::Completed)
                .unwrap_or_default(),
            work: Work::of(&t.spec.action),
            labels: t.spec.labels.clone(),
            unmatched: t.unmatched,
            priority: t.spec.priority,
            attempts: t.attempts,
            next_attempt: words::Stamp::parse(t.next_attempt_at.as_deref(), ctx.now),
            submitted: words::Stamp::parse(Some(&t.created_at), ctx.now),
            submitter: who(t.submitted_by.as_deref(), ctx),
            finished: words::Stamp::parse(t.finished_at.as_deref(), ctx.now),
            last_run_id: t.last_run_id.clone(),
        }
    }

    pub(crate) fn status_str(&self) -> &'static str {
        self.status.as_str()
    }

    pub(crate) fn href(&self) -> String {
        format!("/tasks/{}", encode(&self.id))
    }

    /// The list of the tasks that need `label`.
    pub(crate) fn label_href(label: &str) -> String {
        with_query("/tasks", &[("label", label)])
    }

    /// A sign of its status for titles, as a run's page has.
    pub(crate) fn mark(&self) -> &'static str {
        match self.status {
            TaskStatus::Completed => "✓",
            TaskStatus::Failed | TaskStatus::TimedOut => "✗",
            TaskStatus::Running => "●",
            TaskStatus::Queued | TaskStatus::Leased | TaskStatus::RetryWait => "○",
            _ => "–",
        }
    }

    /// Whether a cancel applies: it has not ended (a running one is signalled).
    pub(crate) fn cancellable(&self) -> bool {
        matches!(
            self.status,
            TaskStatus::Queued | TaskStatus::Leased | TaskStatus::Running | TaskStatus::RetryWait
        )
    }

    /// What a retry button says, when a retry applies: an ended task runs once more, a
    /// waiting one at once.
    pub(crate) fn retry_label(&self) -> Option<&'static str> {
        match self.status {
            TaskStatus::Failed | TaskStatus::TimedOut | TaskStatus::Cancelled => Some("Retry"),
            TaskStatus::RetryWait => Some("Retry now"),
            _ => None,
        }
    }

    pub(crate) fn cancel_url(&self) -> String {
        format!("/api/tasks/{}/cancel", encode(&self.id))
    }

    pub(crate) fn retry_url(&self) -> String {
        format!("/api/tasks/{}/retry", encode(&self.id))
    }
}

/// The tasks that have not ended (the overview's line), as studiod's summary counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TaskCounts {
    pub(crate) running: i64,
    /// Queued, leased to a worker that has not started them, or waiting to retry.
    pub(crate) waiting: i64,
}

impl TaskCounts {
    pub(crate) fn of(census: &studio_api::TaskCensus) -> Self {
        Self {
            running: census.running,
            waiting: census.waiting,
        }
    }

    pub(crate) fn none(&self) -> bool {
        self.running == 0 && self.waiting == 0
    }
}

/// A task's spec in words, for its page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpecFacts {
    pub(crate) cwd: Option<String>,
    /// The names of the variables it sets (their values may be secrets).
    pub(crate) env: Vec<String>,
    pub(crate) idempotency_key: Option<String>,
    /// "`deploy`, at most 1 at once".
    pub(crate) concurrency: Option<(String, String)>,
    /// "10 min", or none (the runner's default).
    pub(crate) deadline: Option<String>,
    pub(crate) retry: String,
}

impl SpecFacts {
    pub(crate) fn new(spec: &TaskSpec) -> Self {
        Self {
            cwd: spec.cwd.clone(),
            env: spec.env.keys().cloned().collect(),
            idempotency_key: spec.idempotency_key.clone(),
            concurrency: spec.concurrency.as_ref().map(|c| {
                let at_once = match c.limit {
                    1 => "one at a time".to_owned(),
                    n => format!("at most {n} at once"),
                };
                (c.key.clone(), at_once)
            }),
            deadline: spec.deadline.map(words::human_secs),
            retry: retry_words(spec.retry.as_ref()),
        }
    }
}

/// A retry policy as a sentence: "up to 5 attempts; after a failure (exit code 75) or
/// a timeout, the next waits a random time up to 5s, ×2 after each attempt, at most 5m".
pub(crate) fn retry_words(retry: Option<&RetryPolicy>) -> String {
    let Some(r) = retry.filter(|r| r.max_attempts > 1) else {
        return "none: one attempt".into();
    };
    let outcomes: Vec<String> =
        r.on.iter()
            .map(|on| match on {
                RetryOn::Failed if r.exit_codes.is_empty() => "a failure".to_owned(),
                RetryOn::Failed => {
                    let codes: Vec<String> = r.exit_codes.iter().map(i64::to_string).collect();
                    let noun = if codes.len() == 1 { "code" } else { "codes" };
                    format!("a failure (exit {noun} {})", or_list(&codes))
                }
                RetryOn::TimedOut => "a timeout".to_owned(),
                RetryOn::WorkerLost => "a lost worker".to_owned(),
            })
            .collect();
    let b = &r.backoff;
    let wait = if b.factor == 1 {
        format!("a random time up to {}", b.initial)
    } else {
        format!(
            "a random time up to {}, ×{} after each attempt, at most {}",
            b.initial, b.factor, b.max
        )
    };
    format!(
        "up to {} attempts; after {}, the next waits {wait}",
        r.max_attempts,
        or_list(&outcomes)
    )
}

/// "a", "a or b", "a, b or c".
fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// The built-in worker's id (studiod's own, which the API names `studiod`).
pub(crate) const BUILTIN: &str = "builtin";
/// The built-in worker's name.
const BUILTIN_NAME: &str = "studiod";

/// Where a worker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkerState {
    /// Its assignment stream is open (the built-in worker always is).
    Connected,
    Disconnected,
    /// Its certificate admits it no more.
    Revoked,
}

impl WorkerState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Connected => "connected",
            Self::Disconnected => "disconnected",
            Self::Revoked => "revoked",
        }
    }
}

/// One worker, ready to print.
#[derive(Debug, Clone)]
pub(crate) struct WorkerRow {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) builtin: bool,
    pub(crate) labels: Vec<String>,
    pub(crate) running: i64,
    pub(crate) capacity: i64,
    pub(crate) state: WorkerState,
    /// When it was last heard from (a disconnected one), or revoked (a revoked one).
    pub(crate) since: Option<words::Stamp>,
    pub(crate) version: Option<String>,
}

impl WorkerRow {
    pub(crate) fn new(w: &Worker, ctx: &Ctx) -> Self {
        let state = if w.revoked_at.is_some() {
            WorkerState::Revoked
        } else if w.connected {
            WorkerState::Connected
        } else {
            WorkerState::Disconnected
        };
        let since = match state {
            WorkerState::Connected => None,
            WorkerState::Disconnected => w.last_seen_at.as_deref(),
            WorkerState::Revoked => w.revoked_at.as_deref(),
        };
        Self {
            id: w.id.clone(),
            name: w.name.clone(),
            builtin: w.builtin,
            labels: w.labels.clone(),
            running: w.running,
            capacity: w.capacity,
            state,
            since: words::Stamp::parse(since, ctx.now),
            version: w.version.clone(),
        }
    }

    pub(crate) fn state_str(&self) -> &'static str {
        self.state.as_str()
    }

    /// "last seen" or "revoked", before [`Self::since`].
    pub(crate) fn since_words(&self) -> &'static str {
        match self.state {
            WorkerState::Revoked => "revoked",
            _ => "last seen",
        }
    }
}

/// The workers that serve the queue, for the Tasks page.
#[derive(Debug, Clone, Default)]
pub(crate) struct WorkersView {
    /// Every worker not revoked, in studiod's order (the built-in one first).
    pub(crate) active: Vec<WorkerRow>,
    /// The revoked ones, shown folded after the rest.
    pub(crate) revoked: Vec<WorkerRow>,
    /// Why they could not be read.
    pub(crate) problem: Option<String>,
}

impl WorkersView {
    pub(crate) fn of(list: &WorkerList, ctx: &Ctx) -> Self {
        let (revoked, active) = list
            .workers
            .iter()
            .map(|w| WorkerRow::new(w, ctx))
            .partition(|w| w.state == WorkerState::Revoked);
        Self {
            active,
            revoked,
            problem: None,
        }
    }

    pub(crate) fn failed(problem: String) -> Self {
        Self {
            problem: Some(problem),
            ..Self::default()
        }
    }
}

/// studiod's answer about its workers, applied to the page: a refusal fails the page
/// closed as any call's does (`Err(None)`); any other failure leaves the rest of the
/// page and says why the workers are missing (`Err(Some(why))`).
pub(crate) fn workers_answer(
    answer: Result<WorkerList, DaemonError>,
    ctx: &mut Ctx,
) -> Result<WorkerList, Option<String>> {
    match answer {
        Ok(list) => Ok(list),
        Err(e @ DaemonError::Refused { .. }) => {
            ctx.fail(&e);
            Err(None)
        }
        Err(e) => Err(Some(format!("The workers could not be read: {e}."))),
    }
}

/// The name of the worker `id` (studiod's own is `studiod`; one not in `workers`, its id).
pub(crate) fn worker_name(id: &str, workers: &[Worker]) -> String {
    match workers.iter().find(|w| w.id == id) {
        Some(w) => w.name.clone(),
        None if id == BUILTIN => BUILTIN_NAME.to_owned(),
        None => id.to_owned(),
    }
}

/// One attempt of a task, ready to print.
#[derive(Debug, Clone)]
pub(crate) struct AttemptRow {
    pub(crate) attempt: i64,
    /// The worker that ran it, by name where known (else its id, or "—").
    pub(crate) worker: String,
    pub(crate) worker_id: Option<String>,
    /// Its exit code, the signal that ended it, or "—".
    pub(crate) exit: String,
    pub(crate) started: Option<words::Stamp>,
    pub(crate) run: RunRow,
}

impl AttemptRow {
    pub(crate) fn new(r: &RunListItem, ctx: &Ctx) -> Self {
        let core = &r.core;
        let exit = match (core.exit_code, core.signal) {
            (Some(code), _) => code.to_string(),
            (None, Some(signal)) => format!("signal {signal}"),
            (None, None) => "—".into(),
        };
        Self {
            attempt: core.attempt,
            worker: core
                .worker_id
                .as_deref()
                .map_or_else(|| "—".into(), |id| worker_name(id, &[])),
            worker_id: core.worker_id.clone(),
            exit,
            started: words::Stamp::parse(core.dispatched_at.as_deref(), ctx.now),
            run: RunRow::list(r, ctx),
        }
    }
}

/// The list's filters, read from its address (a status may repeat: one per box).
#[derive(Debug, Default, Clone)]
pub(crate) struct ListQuery {
    /// Any of these statuses (none: any).
    pub(crate) statuses: Vec<String>,
    /// Tasks that need this label.
    pub(crate) label: String,
    pub(crate) cursor: String,
}

impl ListQuery {
    /// From the address's pairs; unknown names and statuses are ignored.
    pub(crate) fn from_pairs(pairs: Vec<(String, String)>) -> Self {
        let mut q = Self::default();
        for (k, v) in pairs {
            let v = v.trim().to_owned();
            match k.as_str() {
                "status" => {
                    for s in v.split(',').filter(|s| TASK_STATUSES.contains(s)) {
                        if !q.statuses.iter().any(|have| have == s) {
                            q.statuses.push(s.to_owned());
                        }
                    }
                }
                "label" => q.label = v,
                "cursor" => q.cursor = v,
                _ => {}
            }
        }
        q
    }

    /// Whether any filter narrows the list.
    pub(crate) fn filtered(&self) -> bool {
        !self.statuses.is_empty() || !self.label.is_empty()
    }

    /// `/tasks` with these filters and an optional cursor.
    fn href(&self, cursor: Option<&str>) -> String {
        let mut pairs: Vec<(&str, &str)> = self
            .statuses
            .iter()
            .map(|s| ("status", s.as_str()))
            .collect();
        pairs.push(("label", &self.label));
        pairs.push(("cursor", cursor.unwrap_or_default()));
        with_query("/tasks", &pairs)
    }
}

#[derive(Template)]
#[template(path = "tasks.html")]
pub(crate) struct ListPage {
    pub(crate) ctx: Ctx,
    pub(crate) query: ListQuery,
    pub(crate) rows: Vec<TaskRow>,
    pub(crate) next: Option<String>,
    pub(crate) workers: WorkersView,
}

impl ListPage {
    pub(crate) fn statuses(&self) -> &'static [&'static str] {
        &TASK_STATUSES
    }

    pub(crate) fn status_is(&self, s: &str) -> bool {
        self.query.statuses.iter().any(|have| have == s)
    }

    pub(crate) fn next_href(&self) -> Option<String> {
        Some(self.query.href(Some(self.next.as_deref()?)))
    }
}

#[tracing::instrument(skip_all)]
pub(crate) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/tasks", Nav::Tasks).await;
    let mut page = ListPage {
        ctx: ctx.clone(),
        query: ListQuery::from_pairs(pairs),
        rows: Vec::new(),
        next: None,
        workers: WorkersView::default(),
    };
    if let Some(p) = paired {
        let q = &page.query;
        let statuses = q.statuses.join(",");
        let query = [
            ("status", statuses.as_str()),
            ("label", q.label.as_str()),
            ("cursor", q.cursor.as_str()),
            ("limit", PAGE),
        ];
        let daemon = p.daemon(&state);
        // Two calls, concurrently: the page of tasks and the workers.
        let (answer, workers) = tokio::join!(daemon.tasks(&query), daemon.workers());
        page.workers = match workers_answer(workers, &mut ctx) {
            Ok(list) => WorkersView::of(&list, &ctx),
            Err(why) => WorkersView::failed(why.unwrap_or_default()),
        };
        match answer {
            Ok(list) => {
                page.rows = list.tasks.iter().map(|t| TaskRow::new(t, &ctx)).collect();
                page.next = list.next_cursor;
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

#[derive(Template)]
#[template(path = "task.html")]
pub(crate) struct DetailPage {
    pub(crate) ctx: Ctx,
    pub(crate) task: Option<TaskRow>,
    pub(crate) spec: Option<SpecFacts>,
    /// Oldest first.
    pub(crate) attempts: Vec<AttemptRow>,
    /// The latest attempt, whose log the page shows.
    pub(crate) latest: Option<RunRow>,
    /// Why the workers' names could not be read (the attempts show their ids).
    pub(crate) workers_problem: Option<String>,
}

impl DetailPage {
    pub(crate) fn new(ctx: Ctx) -> Self {
        Self {
            ctx,
            task: None,
            spec: None,
            attempts: Vec::new(),
            latest: None,
            workers_problem: None,
        }
    }

    /// Names each attempt's worker from studiod's list.
    pub(crate) fn with_workers(mut self, workers: &[Worker]) -> Self {
        for a in &mut self.attempts {
            if let Some(id) = &a.worker_id {
                a.worker = worker_name(id, workers);
            }
        }
        self
    }

    /// Whether an attempt ran on a worker whose name is unknown (shown by its id).
    pub(crate) fn unnamed_workers(&self) -> bool {
        self.workers_problem.is_some()
            && self
                .attempts
                .iter()
                .any(|a| a.worker_id.as_deref().is_some_and(|id| id != BUILTIN))
    }

    /// The number of the attempt whose log the page shows.
    pub(crate) fn latest_attempt(&self) -> i64 {
        self.attempts.last().map_or(0, |a| a.attempt)
    }

    /// Fills the page from studiod's answer.
    pub(crate) fn with_detail(mut self, d: &studio_api::TaskDetail) -> Self {
        let ctx = &self.ctx;
        self.attempts = d.attempts.iter().map(|a| AttemptRow::new(a, ctx)).collect();
        self.latest = self.attempts.last().map(|a| {
            let mut run = a.run.clone();
            // The list view has no tails: a failed attempt's log opens on stderr when
            // that stream has anything.
            if run.failed() && run.stderr_bytes > 0 {
                run.error_stream = "stderr";
            }
            run
        });
        self.spec = Some(SpecFacts::new(&d.task.spec));
        self.task = Some(TaskRow::new(&d.task, ctx));
        self
    }
}

#[tracing::instrument(skip_all)]
pub(crate) async fn detail(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/tasks", Nav::Tasks).await;
    let mut page = DetailPage::new(ctx.clone());
    if let Some(p) = paired {
        let daemon = p.daemon(&state);
        // Two calls, concurrently: the task with its attempts, and the workers that name them.
        let (task, workers) = tokio::join!(daemon.task(&id), daemon.workers());
        let workers = workers_answer(workers, &mut ctx);
        match task {
            Ok(d) => {
                page = page.with_detail(&d);
                match &workers {
                    Ok(list) => page = page.with_workers(&list.workers),
                    Err(why) => page.workers_problem.clone_from(why),
                }
            }
            Err(e) => ctx.fail(&e),
        }
        // A refused workers call has failed the page closed.
        page.ctx = ctx;
    }
    render(&page)
}

#[cfg(test)]
#[path = "tasks_tests.rs"]
mod tests;
