//! Reads the facts the queue is derived from — failed and timed-out runs, schedules and
//! their health, approval requests waiting for a decision — from studiod's HTTP API
//! through the app's typed client, as the caller:
//! their bearer and their Origin, signed like any proxied request, so studiod decides
//! what this caller may read.
//!
//! Invariant: the app never opens `state.db`; it knows runs and schedules only through
//! the daemon's API.

use std::collections::HashMap;

use studio_api::{ApprovalStatus, RunCore};
use studio_contract::error::{ApiError, Code};

use super::derive::{ApprovalFact, Kind, RunFact, ScheduleFact, derive};
use crate::{
    approval::Bound,
    daemon::{Approval, Daemon, DaemonError, Schedule},
    proxy::Proxy,
};

/// Runs per page (a listed run carries no log tails: about half a KiB each).
const RUN_PAGE: usize = 200;
/// The newest runs of each failing status that can become items.
pub(crate) const RUNS_PER_STATUS: usize = 200;
/// The newest pending requests read (studiod's largest page).
const PENDING_APPROVALS: &str = "500";
/// Schedule pages followed at most (500 each): the queue reads at most this many × 500
/// failing or overdue schedules.
const SCHEDULE_PAGES: usize = 20;

/// Who is asking, as the daemon will see them.
pub(crate) struct Caller<'a> {
    pub(crate) bearer: &'a str,
    pub(crate) origin: Option<&'a str>,
}

impl Caller<'_> {
    fn daemon<'a>(&'a self, proxy: &'a Proxy) -> Daemon<'a> {
        Daemon::new(proxy, self.bearer, self.origin.unwrap_or(""))
    }
}

/// The daemon's refusal is the caller's answer too; anything else it cannot answer is
/// `503 daemon_unavailable`.
fn api_error(e: DaemonError) -> ApiError {
    match e {
        DaemonError::Refused { code, message } => {
            ApiError::new(Code::parse(&code).unwrap_or(Code::Unauthorized), message)
        }
        DaemonError::Unavailable => {
            ApiError::new(Code::DaemonUnavailable, "the daemon is unavailable")
        }
        other => {
            tracing::warn!(error = %other, "unexpected daemon answer");
            ApiError::new(
                Code::DaemonUnavailable,
                "the daemon gave an unexpected answer",
            )
        }
    }
}

fn instant(text: &str) -> Result<i64, ApiError> {
    text.parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .map_err(|_| {
            tracing::warn!(text, "unexpected instant from the daemon");
            ApiError::new(
                Code::DaemonUnavailable,
                "the daemon gave an unexpected answer",
            )
        })
}

fn run_fact(run: RunCore) -> Result<RunFact, ApiError> {
    let finished_at_ms = run.finished_at.as_deref().map(instant).transpose()?;
    let created_at_ms = instant(&run.created_at)?;
    Ok(RunFact {
        outcome: run.outcome(),
        id: run.id,
        schedule_id: run.schedule_id,
        schedule_name: run.schedule_name,
        error_line: run.error_line,
        status: run.status.as_str().to_owned(),
        reason: run.reason,
        exit_code: run.exit_code,
        created_at_ms,
        finished_at_ms,
    })
}

fn schedule_fact(s: Schedule) -> Result<ScheduleFact, ApiError> {
    Ok(ScheduleFact {
        last_fired_at_ms: s.last_fired_at.as_deref().map(instant).transpose()?,
        id: s.id,
        name: s.name,
        health: s.health,
        last_outcome: s.last_outcome,
    })
}

fn approval_fact(a: Approval) -> Result<ApprovalFact, ApiError> {
    let what = Bound::read(&a.action).map_or_else(
        || String::from("an action this cockpit cannot read"),
        |b| b.work.summary(),
    );
    Ok(ApprovalFact {
        requested_at_ms: instant(&a.requested_at)?,
        expires_at_ms: instant(&a.expires_at)?,
        id: a.id,
        run_id: a.run_id,
        schedule_id: a.schedule_id,
        schedule_name: a.schedule_name,
        what,
    })
}

/// Up to `max` runs matching `filter`, newest first, following the cursor.
async fn runs(
    daemon: &Daemon<'_>,
    filter: &[(&str, &str)],
    max: usize,
) -> Result<Vec<RunFact>, ApiError> {
    let mut facts = Vec::new();
    let mut cursor = String::new();
    let limit = RUN_PAGE.min(max).to_string();
    while facts.len() < max {
        let mut query = filter.to_vec();
        query.push(("limit", &limit));
        query.push(("cursor", &cursor));
        let page = daemon.runs(&query).await.map_err(api_error)?;
        for run in page.runs {
            facts.push(run_fact(run.core)?);
        }
        match page.next_cursor {
            Some(next) => cursor = next,
            None => break,
        }
    }
    Ok(facts)
}

/// The newest failed and timed-out runs.
pub(crate) async fn failing_runs(
    proxy: &Proxy,
    caller: &Caller<'_>,
) -> Result<Vec<RunFact>, ApiError> {
    let daemon = caller.daemon(proxy);
    let mut facts = runs(&daemon, &[("status", "failed")], RUNS_PER_STATUS).await?;
    facts.extend(runs(&daemon, &[("status", "timed_out")], RUNS_PER_STATUS).await?);
    Ok(facts)
}

/// The requests waiting for a person's decision (the newest 500).
pub(crate) async fn pending_approvals(
    proxy: &Proxy,
    caller: &Caller<'_>,
) -> Result<Vec<ApprovalFact>, ApiError> {
    let page = caller
        .daemon(proxy)
        .approvals(&[("status", "pending"), ("limit", PENDING_APPROVALS)])
        .await
        .map_err(api_error)?;
    page.approvals.into_iter().map(approval_fact).collect()
}

/// The failing and overdue schedules (up to the page cap): the only ones that can become
/// items, filtered by studiod so the queue's cost does not grow with healthy schedules.
pub(crate) async fn schedules(
    proxy: &Proxy,
    caller: &Caller<'_>,
) -> Result<Vec<ScheduleFact>, ApiError> {
    let daemon = caller.daemon(proxy);
    let mut facts = Vec::new();
    let mut cursor = String::new();
    for _ in 0..SCHEDULE_PAGES {
        let page = daemon
            .schedules(&[
                ("health", "failing,overdue"),
                ("limit", "500"),
                ("cursor", &cursor),
            ])
            .await
            .map_err(api_error)?;
        for s in page.schedules {
            facts.push(schedule_fact(s)?);
        }
        match page.next_cursor {
            Some(next) => cursor = next,
            None => break,
        }
    }
    Ok(facts)
}

/// The newest evidence behind one item as studiod reports it now, for the instant a
/// disposition covers; `None` when the item is not in the queue at the moment (or the
/// daemon cannot say), and the caller falls back to "now".
pub(crate) async fn evidence(
    proxy: &Proxy,
    caller: &Caller<'_>,
    kind: Kind,
    id: &str,
    now_ms: i64,
) -> Option<i64> {
    let daemon = caller.daemon(proxy);
    let (runs_seen, schedules, approvals) = match kind {
        Kind::Run => {
            let detail = daemon.run(id).await.ok()?;
            let waiting = detail
                .approvals
                .into_iter()
                .filter(|a| a.status == ApprovalStatus::Pending)
                .map(approval_fact)
                .collect::<Result<Vec<_>, _>>()
                .ok()?;
            (vec![run_fact(detail.run.core).ok()?], Vec::new(), waiting)
        }
        Kind::Sched => {
            let schedule = schedule_fact(daemon.schedule(id).await.ok()?).ok()?;
            let mut seen = Vec::new();
            for status in ["failed", "timed_out"] {
                let filter = [("schedule", id), ("status", status)];
                seen.extend(runs(&daemon, &filter, 5).await.ok()?);
            }
            (seen, vec![schedule], Vec::new())
        }
    };
    let item_id = format!("{}:{id}", kind.as_str());
    derive(&runs_seen, &schedules, &approvals, &HashMap::new(), now_ms)
        .into_iter()
        .find(|item| item.id == item_id)
        .map(|item| item.evidence_ms)
}
