//! Reads the facts the queue is derived from — failed and timed-out runs, schedules and
//! their health — from studiod's HTTP API, as the caller: their bearer and their Origin,
//! signed like any proxied request, so studiod decides what this caller may read.
//!
//! Invariant: the app never opens `state.db`; it knows runs and schedules only through
//! the daemon's API.

use std::collections::HashMap;

use axum::body::Body;
use http::{HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use serde::Deserialize;
use serde_json::Value;
use studio_contract::{
    error::{ApiError, Code},
    time::now_ms,
};

use super::derive::{Kind, RunFact, ScheduleFact, derive};
use crate::proxy::Proxy;

/// The newest runs of each failing status that can become items (one page each).
pub(crate) const RUNS_PER_STATUS: usize = 200;
/// Schedule pages followed at most (500 each): the queue reads at most this many × 500.
const SCHEDULE_PAGES: usize = 20;
/// A daemon answer larger than this is refused rather than buffered.
const BODY_LIMIT: usize = 32 * 1024 * 1024;

/// Who is asking, as the daemon will see them.
pub(crate) struct Caller<'a> {
    pub(crate) bearer: &'a str,
    pub(crate) origin: Option<&'a str>,
}

#[derive(Deserialize)]
struct RunView {
    id: String,
    schedule_id: Option<String>,
    status: String,
    reason: Option<String>,
    exit_code: Option<i64>,
    created_at: String,
    finished_at: Option<String>,
}

#[derive(Deserialize)]
struct ScheduleView {
    id: String,
    name: String,
    health: String,
    last_outcome: Option<String>,
    last_fired_at: Option<String>,
}

#[derive(Deserialize)]
struct RunPage {
    runs: Vec<RunView>,
}

#[derive(Deserialize)]
struct SchedulePage {
    schedules: Vec<ScheduleView>,
    next_cursor: Option<String>,
}

fn instant(text: &str) -> Result<i64, ApiError> {
    text.parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .map_err(|_| bad_answer(&format!("instant {text:?}")))
}

fn bad_answer(what: &str) -> ApiError {
    tracing::warn!(what, "unexpected daemon answer");
    ApiError::new(
        Code::DaemonUnavailable,
        "the daemon gave an unexpected answer",
    )
}

impl RunView {
    fn fact(self) -> Result<RunFact, ApiError> {
        Ok(RunFact {
            created_at_ms: instant(&self.created_at)?,
            finished_at_ms: self.finished_at.as_deref().map(instant).transpose()?,
            id: self.id,
            schedule_id: self.schedule_id,
            status: self.status,
            reason: self.reason,
            exit_code: self.exit_code,
        })
    }
}

impl ScheduleView {
    fn fact(self) -> Result<ScheduleFact, ApiError> {
        Ok(ScheduleFact {
            last_fired_at_ms: self.last_fired_at.as_deref().map(instant).transpose()?,
            id: self.id,
            name: self.name,
            health: self.health,
            last_outcome: self.last_outcome,
        })
    }
}

/// `GET path_and_query` on studiod as the caller; a daemon error is passed on as is.
async fn get(proxy: &Proxy, caller: &Caller<'_>, path_and_query: &str) -> Result<Value, ApiError> {
    let mut req = Request::builder()
        .method(Method::GET)
        .uri(path_and_query)
        .body(Body::empty())
        .map_err(|_| ApiError::new(Code::Internal, "invalid daemon request"))?;
    if let Some(origin) = caller.origin {
        let value = HeaderValue::from_str(origin)
            .map_err(|_| ApiError::new(Code::OriginNotAllowed, "origin not allowed"))?;
        req.headers_mut().insert(header::ORIGIN, value);
    }
    let upstream = proxy.rewrite(req, caller.bearer, now_ms())?;
    let response = proxy.send(upstream).await?;
    let status = response.status();
    let bytes = Limited::new(response.into_body(), BODY_LIMIT)
        .collect()
        .await
        .map_err(|_| bad_answer("body"))?
        .to_bytes();
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| bad_answer("json"))?;
    if status != StatusCode::OK {
        // The daemon's refusal (e.g. a revoked bearer) is the caller's answer too.
        let code = value["code"].as_str().and_then(Code::parse);
        let message = value["message"].as_str().unwrap_or("daemon refused");
        return Err(match code {
            Some(code) => ApiError::new(code, message),
            None => bad_answer("status"),
        });
    }
    Ok(value)
}

/// The newest failed and timed-out runs.
pub(crate) async fn failing_runs(
    proxy: &Proxy,
    caller: &Caller<'_>,
) -> Result<Vec<RunFact>, ApiError> {
    let mut facts = Vec::new();
    for status in ["failed", "timed_out"] {
        let path = format!("/api/runs?status={status}&limit={RUNS_PER_STATUS}");
        let page: RunPage = serde_json::from_value(get(proxy, caller, &path).await?)
            .map_err(|_| bad_answer("runs"))?;
        for run in page.runs {
            facts.push(run.fact()?);
        }
    }
    Ok(facts)
}

/// Every schedule (up to the page cap), with its health.
pub(crate) async fn schedules(
    proxy: &Proxy,
    caller: &Caller<'_>,
) -> Result<Vec<ScheduleFact>, ApiError> {
    let mut facts = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..SCHEDULE_PAGES {
        let path = match &cursor {
            Some(c) => format!("/api/schedules?limit=500&cursor={}", encode(c)),
            None => String::from("/api/schedules?limit=500"),
        };
        let page: SchedulePage = serde_json::from_value(get(proxy, caller, &path).await?)
            .map_err(|_| bad_answer("schedules"))?;
        for s in page.schedules {
            facts.push(s.fact()?);
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(facts)
}

/// Percent-encodes an opaque cursor for a query string.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
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
    let (runs, schedules) = match kind {
        Kind::Run => {
            let run: RunView =
                serde_json::from_value(get(proxy, caller, &format!("/api/runs/{id}")).await.ok()?)
                    .ok()?;
            (vec![run.fact().ok()?], Vec::new())
        }
        Kind::Sched => {
            let value = get(proxy, caller, &format!("/api/schedules/{id}"))
                .await
                .ok()?;
            let schedule: ScheduleView = serde_json::from_value(value).ok()?;
            let mut runs = Vec::new();
            for status in ["failed", "timed_out"] {
                let path = format!("/api/runs?schedule={}&status={status}&limit=5", encode(id));
                let page: RunPage =
                    serde_json::from_value(get(proxy, caller, &path).await.ok()?).ok()?;
                for run in page.runs {
                    runs.push(run.fact().ok()?);
                }
            }
            (runs, vec![schedule.fact().ok()?])
        }
    };
    let item_id = format!("{}:{id}", kind.as_str());
    derive(&runs, &schedules, &HashMap::new(), now_ms)
        .into_iter()
        .find(|item| item.id == item_id)
        .map(|item| item.evidence_ms)
}
