//! The app's typed client to studiod's HTTP API, for server-rendered pages: the page's
//! bearer (from the cookie) as `Authorization`, the page's own origin asserted with the
//! app key (the proxy's signing), bounded by the upstream timeout.
//!
//! Invariant: the app never reads `state.db`; every page renders from these calls, and
//! every failure maps to one of the page states ([`DaemonError::page_state`]).

use std::collections::BTreeMap;

use axum::body::Body;
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::Value;
use studio_contract::{error::Code, time::now_ms};

use crate::proxy::Proxy;

/// The most a page reads from one API answer (a schedule page is far below this).
const MAX_BODY: usize = 4 << 20;

/// Why a call did not produce the expected value.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DaemonError {
    /// 401/403 with the daemon's stable code (`unauthorized`, `epoch_ended`, …).
    #[error("refused: {code}")]
    Refused { code: String, message: String },
    #[error("not found")]
    NotFound,
    #[error("the daemon is unavailable")]
    Unavailable,
    /// Any other answer the page cannot use (the message is shown as is).
    #[error("daemon answered {status}: {message}")]
    Other { status: u16, message: String },
}

/// What a page says about its connection to the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PageState {
    Paired,
    NotPaired,
    EpochEnded,
    Unavailable,
}

impl PageState {
    /// The `data-state` value (the browser test and app.js share these words).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Paired => "paired",
            Self::NotPaired => "not-paired",
            Self::EpochEnded => "epoch-ended",
            Self::Unavailable => "daemon-unavailable",
        }
    }

    /// From a refusal code of the verifier or the daemon.
    pub(crate) fn from_code(code: &str) -> Self {
        if code == Code::EpochEnded.as_str() {
            Self::EpochEnded
        } else if code == Code::DaemonUnavailable.as_str() {
            Self::Unavailable
        } else {
            Self::NotPaired
        }
    }
}

impl DaemonError {
    /// Which page state this failure puts the page in (`None`: paired, but the call failed).
    pub(crate) fn page_state(&self) -> Option<PageState> {
        match self {
            Self::Refused { code, .. } => Some(PageState::from_code(code)),
            Self::Unavailable => Some(PageState::Unavailable),
            Self::NotFound | Self::Other { .. } => None,
        }
    }

    /// Maps a non-success answer; the body is the API's `{"code","message"}`.
    pub(crate) fn from_answer(status: StatusCode, body: &[u8]) -> Self {
        let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let code = parsed["code"].as_str().unwrap_or("").to_owned();
        let message = parsed["message"]
            .as_str()
            .map_or_else(|| format!("HTTP {}", status.as_u16()), str::to_owned);
        match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Self::Refused { code, message },
            StatusCode::NOT_FOUND => Self::NotFound,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY => Self::Unavailable,
            _ if code == Code::DaemonUnavailable.as_str() => Self::Unavailable,
            _ => Self::Other {
                status: status.as_u16(),
                message,
            },
        }
    }
}

/// A schedule as `GET /api/schedules` lists it (health and last outcome included).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Schedule {
    pub(crate) id: String,
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) spec: Value,
    pub(crate) enabled: bool,
    #[serde(default)]
    pub(crate) timezone: Option<String>,
    #[serde(default)]
    pub(crate) next_fire_at: Option<String>,
    #[serde(default)]
    pub(crate) last_fired_at: Option<String>,
    #[serde(default)]
    pub(crate) health: String,
    #[serde(default)]
    pub(crate) last_outcome: Option<String>,
    #[serde(default)]
    pub(crate) runs_counted: i64,
    #[serde(default)]
    pub(crate) spend_usd: Option<f64>,
    #[serde(default)]
    pub(crate) managed_by: Option<String>,
}

/// One status change of a run.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Transition {
    #[serde(default)]
    pub(crate) from: Option<String>,
    pub(crate) to: String,
    #[serde(default)]
    pub(crate) reason: Option<String>,
    #[serde(default)]
    pub(crate) at: Option<String>,
}

/// A run; `transitions` only on `GET /api/runs/{id}`, `schedule_name` only in lists.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Run {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) schedule_id: Option<String>,
    #[serde(default)]
    pub(crate) schedule_name: Option<String>,
    #[serde(default)]
    pub(crate) kind: String,
    pub(crate) status: String,
    #[serde(default)]
    pub(crate) reason: Option<String>,
    #[serde(default)]
    pub(crate) scheduled_at: Option<String>,
    #[serde(default)]
    pub(crate) created_at: Option<String>,
    #[serde(default)]
    pub(crate) finished_at: Option<String>,
    #[serde(default)]
    pub(crate) exit_code: Option<i64>,
    #[serde(default)]
    pub(crate) signal: Option<i64>,
    #[serde(default)]
    pub(crate) duration_ms: Option<i64>,
    #[serde(default)]
    pub(crate) stdout_bytes: Option<u64>,
    #[serde(default)]
    pub(crate) stderr_bytes: Option<u64>,
    #[serde(default)]
    pub(crate) cost_usd: Option<f64>,
    #[serde(default)]
    pub(crate) transitions: Vec<Transition>,
}

impl Run {
    pub(crate) fn active(&self) -> bool {
        matches!(self.status.as_str(), "queued" | "running")
    }
}

/// `GET /api/summary`: the overview's numbers, exact over every schedule and run.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Summary {
    pub(crate) daemon: DaemonFacts,
    pub(crate) schedules: ScheduleCensus,
    pub(crate) runs: RunCensus,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct DaemonFacts {
    pub(crate) started_at: String,
    pub(crate) uptime_s: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ScheduleCensus {
    pub(crate) total: u64,
    /// Every health, zero included.
    pub(crate) by_health: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RunCensus {
    pub(crate) active: u64,
    pub(crate) total: u64,
    pub(crate) by_status: BTreeMap<String, u64>,
    /// The current hour and the 23 before it, oldest first.
    pub(crate) hourly: Vec<HourCount>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct HourCount {
    pub(crate) hour: String,
    pub(crate) total: u32,
    pub(crate) failed: u32,
}

/// A paired browser of the current epoch.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Session {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) origin: String,
    #[serde(default)]
    pub(crate) created_at: Option<String>,
    #[serde(default)]
    pub(crate) last_seen_at: Option<String>,
    /// When its admission token stops being accepted.
    #[serde(default)]
    pub(crate) expires_at: Option<String>,
    #[serde(default)]
    pub(crate) revoked_at: Option<String>,
    #[serde(default)]
    pub(crate) current: bool,
}

#[derive(Debug, Deserialize)]
pub(crate) struct SchedulePage {
    pub(crate) schedules: Vec<Schedule>,
    #[serde(default)]
    pub(crate) next_cursor: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RunPage {
    pub(crate) runs: Vec<Run>,
    #[serde(default)]
    pub(crate) next_cursor: Option<String>,
}

/// `GET /api/admin/allowlist`.
#[derive(Debug, Deserialize)]
pub(crate) struct AllowList {
    pub(crate) entries: Vec<AllowEntry>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct AllowEntry {
    pub(crate) executable: String,
    /// Where the entry leads on studiod's PATH now; `None` when nothing is there.
    #[serde(default)]
    pub(crate) resolved: Option<String>,
    #[serde(default)]
    pub(crate) added_at: Option<String>,
    #[serde(default)]
    pub(crate) added_by: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Sessions {
    pub(crate) sessions: Vec<Session>,
}

/// One page request's view of the daemon: its bearer and origin, borrowed from the page.
pub(crate) struct Daemon<'a> {
    proxy: &'a Proxy,
    bearer: &'a str,
    origin: &'a str,
}

impl<'a> Daemon<'a> {
    pub(crate) fn new(proxy: &'a Proxy, bearer: &'a str, origin: &'a str) -> Self {
        Self {
            proxy,
            bearer,
            origin,
        }
    }

    /// `GET path?query` decoded as `T`; the query pairs are percent-encoded here.
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T, DaemonError> {
        let target = with_query(path, query);
        let mut req = Request::builder()
            .method(Method::GET)
            .uri(&target)
            .header(header::ACCEPT, "application/json")
            .body(Body::empty())
            .map_err(|_| DaemonError::Other {
                status: 400,
                message: "invalid request target".into(),
            })?;
        if !self.origin.is_empty()
            && let Ok(v) = http::HeaderValue::from_str(self.origin)
        {
            req.headers_mut().insert(header::ORIGIN, v);
        }
        let upstream = self
            .proxy
            .rewrite(req, self.bearer, now_ms())
            .map_err(|e| DaemonError::Other {
                status: 400,
                message: e.message,
            })?;
        let response = self
            .proxy
            .send(upstream)
            .await
            .map_err(|_| DaemonError::Unavailable)?;
        let status = response.status();
        let body = tokio::time::timeout(
            self.proxy.timeout(),
            http_body_util::Limited::new(response.into_body(), MAX_BODY).collect(),
        )
        .await
        .map_err(|_| DaemonError::Unavailable)?
        .map_err(|_| DaemonError::Unavailable)?
        .to_bytes();
        if !status.is_success() {
            return Err(DaemonError::from_answer(status, &body));
        }
        serde_json::from_slice(&body).map_err(|e| DaemonError::Other {
            status: status.as_u16(),
            message: format!("unexpected answer: {e}"),
        })
    }

    pub(crate) async fn schedules(
        &self,
        query: &[(&str, &str)],
    ) -> Result<SchedulePage, DaemonError> {
        self.get("/api/schedules", query).await
    }

    pub(crate) async fn schedule(&self, id: &str) -> Result<Schedule, DaemonError> {
        self.get(&format!("/api/schedules/{}", segment(id)), &[])
            .await
    }

    pub(crate) async fn summary(&self) -> Result<Summary, DaemonError> {
        self.get("/api/summary", &[]).await
    }

    pub(crate) async fn runs(&self, query: &[(&str, &str)]) -> Result<RunPage, DaemonError> {
        self.get("/api/runs", query).await
    }

    pub(crate) async fn run(&self, id: &str) -> Result<Run, DaemonError> {
        self.get(&format!("/api/runs/{}", segment(id)), &[]).await
    }

    pub(crate) async fn sessions(&self) -> Result<Sessions, DaemonError> {
        self.get("/api/studio/sessions", &[]).await
    }

    pub(crate) async fn allowlist(&self) -> Result<AllowList, DaemonError> {
        self.get("/api/admin/allowlist", &[]).await
    }

    pub(crate) async fn identity(&self) -> Result<BTreeMap<String, Value>, DaemonError> {
        self.get("/api/identity", &[]).await
    }
}

/// Percent-encodes everything but unreserved characters (RFC 3986 §2.3).
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An id placed in a path: ids are opaque, so encode rather than trust them.
fn segment(id: &str) -> String {
    encode(id)
}

/// `path?k=v&…` with empty values left out (the API treats absent and empty alike).
pub(crate) fn with_query(path: &str, query: &[(&str, &str)]) -> String {
    let pairs: Vec<String> = query
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    if pairs.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", pairs.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_map_to_page_states() {
        let e = DaemonError::from_answer(
            StatusCode::UNAUTHORIZED,
            br#"{"code":"epoch_ended","message":"the epoch ended"}"#,
        );
        assert_eq!(e.page_state(), Some(PageState::EpochEnded));
        let e = DaemonError::from_answer(
            StatusCode::UNAUTHORIZED,
            br#"{"code":"unauthorized","message":"no"}"#,
        );
        assert_eq!(e.page_state(), Some(PageState::NotPaired));
        let e = DaemonError::from_answer(StatusCode::SERVICE_UNAVAILABLE, b"");
        assert_eq!(e.page_state(), Some(PageState::Unavailable));
        let e = DaemonError::from_answer(StatusCode::NOT_FOUND, b"{}");
        assert!(matches!(e, DaemonError::NotFound));
        assert_eq!(e.page_state(), None);
        let e = DaemonError::from_answer(
            StatusCode::CONFLICT,
            br#"{"code":"conflict","message":"changed"}"#,
        );
        assert!(
            matches!(e, DaemonError::Other { status: 409, ref message } if message == "changed")
        );
        assert_eq!(
            DaemonError::Unavailable.page_state(),
            Some(PageState::Unavailable)
        );
    }

    #[test]
    fn queries_are_encoded_and_empty_values_dropped() {
        assert_eq!(
            with_query(
                "/api/runs",
                &[("status", "failed"), ("schedule", ""), ("cursor", "a b&c")]
            ),
            "/api/runs?status=failed&cursor=a%20b%26c"
        );
        assert_eq!(with_query("/api/runs", &[]), "/api/runs");
        assert_eq!(segment("../x"), "..%2Fx");
    }

    #[test]
    fn views_decode_from_the_documented_shapes() {
        let s: Schedule = serde_json::from_str(
            r#"{"id":"s1","name":"n","spec":{"trigger":{"every":"15m"}},"enabled":true,
            "timezone":"UTC","next_fire_at":null,"health":"healthy","last_outcome":"completed",
            "runs_counted":3,"spend_usd":0.5,"revision":2,"extra":1}"#,
        )
        .expect("schedule");
        assert_eq!(s.last_outcome.as_deref(), Some("completed"));
        let r: Run = serde_json::from_str(
            r#"{"id":"r1","schedule_id":"s1","kind":"manual","status":"running",
            "transitions":[{"from":"queued","to":"running","reason":"dispatched","at":"2026-01-01T00:00:00Z"}]}"#,
        )
        .expect("run");
        assert!(r.active());
        assert_eq!(r.transitions.len(), 1);
    }
}
