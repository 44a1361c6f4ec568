//! The app's typed client to studiod's HTTP API, for server-rendered pages: the page's
//! bearer (from the cookie) as `Authorization`, the page's own origin asserted with the
//! app key (the proxy's signing), bounded by the upstream timeout.
//!
//! Invariant: the app never reads `state.db`; every page renders from these calls, and
//! every failure maps to one of the page states ([`DaemonError::page_state`]).

use axum::body::Body;
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use studio_contract::{
    error::{Code, ErrorBody},
    time::now_ms,
};

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

    /// Maps a non-success answer; the body is the API's error body (anything else, say
    /// a proxy's page, keeps only the status).
    pub(crate) fn from_answer(status: StatusCode, body: &[u8]) -> Self {
        let (code, message) = match serde_json::from_slice::<ErrorBody>(body) {
            Ok(e) => (e.code.as_str().to_owned(), e.message),
            Err(_) => (String::new(), format!("HTTP {}", status.as_u16())),
        };
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

pub(crate) use studio_api::{
    AllowEntry, AllowList, Approval, ApprovalPage, AuditEntry, AuditPage, EvidenceRow, HourCount,
    RunDetail, RunPage, Schedule, SchedulePage, Session, Sessions, Summary, TaskDetail, TaskPage,
    WorkerList,
};

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

    pub(crate) async fn run(&self, id: &str) -> Result<RunDetail, DaemonError> {
        self.get(&format!("/api/runs/{}", segment(id)), &[]).await
    }

    pub(crate) async fn audit(&self, query: &[(&str, &str)]) -> Result<AuditPage, DaemonError> {
        self.get("/api/audit", query).await
    }

    pub(crate) async fn approvals(
        &self,
        query: &[(&str, &str)],
    ) -> Result<ApprovalPage, DaemonError> {
        self.get("/api/approvals", query).await
    }

    pub(crate) async fn tasks(&self, query: &[(&str, &str)]) -> Result<TaskPage, DaemonError> {
        self.get("/api/tasks", query).await
    }

    pub(crate) async fn task(&self, id: &str) -> Result<TaskDetail, DaemonError> {
        self.get(&format!("/api/tasks/{}", segment(id)), &[]).await
    }

    /// Every worker, studiod's built-in one first.
    pub(crate) async fn workers(&self) -> Result<WorkerList, DaemonError> {
        self.get("/api/workers", &[]).await
    }

    pub(crate) async fn sessions(&self) -> Result<Sessions, DaemonError> {
        self.get("/api/studio/sessions", &[]).await
    }

    pub(crate) async fn allowlist(&self) -> Result<AllowList, DaemonError> {
        self.get("/api/admin/allowlist", &[]).await
    }
}

/// [`encode`] of an owned id: the id itself, moved, when it has nothing to escape.
pub(crate) fn encoded(s: String) -> String {
    if s.bytes().all(unreserved) {
        s
    } else {
        encode(&s)
    }
}

/// RFC 3986's unreserved characters: the only bytes a path segment carries as they are.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Percent-encodes everything but unreserved characters (RFC 3986 §2.3).
pub(crate) fn encode(s: &str) -> String {
    if s.bytes().all(unreserved) {
        // Every id Studio makes: nothing to escape.
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if unreserved(b) {
            out.push(char::from(b));
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
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
}
