//! The front door every request to either listener passes, in this order: a request span
//! → Host → the Origin it is judged by → CORS on `/api` → the JSON media type on every
//! unsafe `/api` method → the process's own [`Stage`] → the route.
//!
//! One function runs the whole sequence (one service per request rather than a layer per
//! rule), and each refusal is the shared error body ([`ApiError`]). What differs between
//! studiod and studio-app is only their [`Stage`]: which Origin a request is judged by
//! (studiod trusts the app's signed assertion), which origins are allowed, and how a
//! request is admitted (studiod: the bearer; studio-app: the verifier).
//!
//! Invariant: a route sees a request only if its Host names this listener, any Origin it
//! carries on `/api` is allowed, an unsafe `/api` method carries JSON, and its stage let
//! it through.

use std::{future::Future, pin::Pin, sync::Arc};

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::{
    Router,
    extract::{Request, State},
    middleware::{Next, from_fn_with_state},
    response::{IntoResponse, Response},
};
use studio_contract::{
    error::{ApiError, Code},
    host::HostPolicy,
};
use tracing::Instrument;

/// The request headers a cross-origin caller may send (the decision token among them).
pub const ALLOW_HEADERS: &str = "authorization, content-type, x-studio-decision-token";
const ALLOW_METHODS: &str = "GET, POST, PUT, PATCH, DELETE";

/// The Origin the request was judged by (`None`: it carried none), for the routes of a
/// process whose stage puts it in the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestOrigin(pub Option<String>);

/// A stage's judgement of a request: the request to route with its admitted caller
/// (`None`: a request that needs none), or the answer to give instead with the refused
/// request.
pub type Judged<A> = Result<(Request, Option<A>), (Response, Request)>;

/// What one process adds to the front door.
pub trait Stage: Send + Sync + 'static {
    /// What admission learned of the caller: handed to the door's next step, which in
    /// front of a router puts it in the request's extensions for the routes.
    type Admitted: Clone + Send + Sync + 'static;

    /// The Origin this request is judged by (`Ok(None)`: none). By default its `Origin`
    /// header, refused when repeated or not text.
    fn origin(&self, req: &Request) -> Result<Option<String>, ApiError> {
        header_origin(req.headers()).map(|o| o.map(str::to_owned))
    }

    /// Whether a browser at `origin` may call this listener's `/api`.
    fn origin_allowed(&self, origin: &str) -> bool;

    /// Told of a request refused for its origin, before the refusal is sent.
    fn origin_refused(
        &self,
        _method: &Method,
        _path: &str,
        _origin: &str,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// The process's own admission of a request from `origin` (what [`Stage::origin`]
    /// said, already allowed). The door reads a refused request's body before answering.
    fn admit(
        &self,
        req: Request,
        origin: Option<String>,
    ) -> impl Future<Output = Judged<Self::Admitted>> + Send;
}

/// How long a refused request's body is read before the refusal is sent anyway.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// An answer given before the request's body was read. The body is read first (and
/// dropped), up to the API's body limit and for at most [`DRAIN_TIME`]: a client still
/// writing a large body then gets this answer instead of a reset connection (which a
/// proxy would report as the upstream failing). Bodies over the limit are not read: the
/// connection closes, as for any request too large to take.
///
/// Boxed: a refusal is the rare path, and the drain's state would otherwise be carried
/// (and moved) by the future of every request the door lets through.
pub fn after_body(
    req: Request,
    answer: Response,
) -> Pin<Box<dyn Future<Output = Response> + Send>> {
    Box::pin(async move {
        let body = axum::body::to_bytes(req.into_body(), studio_contract::API_BODY_LIMIT);
        let _ = tokio::time::timeout(DRAIN_TIME, body).await;
        answer
    })
}

/// A listener's front door: its Host rule and its process's stage.
pub struct Door<S> {
    hosts: HostPolicy,
    stage: S,
}

impl<S: Stage> Door<S> {
    pub fn new(hosts: HostPolicy, stage: S) -> Self {
        Self { hosts, stage }
    }

    pub fn stage(&self) -> &S {
        &self.stage
    }

    pub fn hosts(&self) -> &HostPolicy {
        &self.hosts
    }

    /// `router` behind this door (the door is the outermost layer).
    pub fn guard<T>(self: Arc<Self>, router: Router<T>) -> Router<T>
    where
        T: Clone + Send + Sync + 'static,
    {
        router.layer(from_fn_with_state(self, guarded::<S>))
    }

    /// The whole door for `req`, in its request span: `next` answers what it lets in,
    /// given its admitted caller. [`Door::guard`] puts it in front of a router; a process
    /// may also call it from a service of its own (studio-app forwards to studiod this
    /// way, past its router).
    pub async fn enter<F, Fut>(&self, req: Request, next: F) -> Response
    where
        F: FnOnce(Request, Option<S::Admitted>) -> Fut,
        Fut: Future<Output = Response>,
    {
        let span = tracing::info_span!(
            "request",
            method = req.method().as_str(),
            path = req.uri().path(),
            status = tracing::field::Empty,
            principal = tracing::field::Empty,
        );
        async move {
            let response = self.answer(req, next).await;
            tracing::Span::current().record("status", response.status().as_u16());
            tracing::debug!("answered");
            response
        }
        .instrument(span)
        .await
    }

    async fn answer<F, Fut>(&self, req: Request, next: F) -> Response
    where
        F: FnOnce(Request, Option<S::Admitted>) -> Fut,
        Fut: Future<Output = Response>,
    {
        if !self.hosts.accepts_request(req.headers(), req.uri()) {
            let refusal = ApiError::new(Code::InvalidHost, "host not allowed");
            return after_body(req, refusal.into_response()).await;
        }
        let origin = match self.stage.origin(&req) {
            Ok(origin) => origin,
            Err(refusal) => return after_body(req, refusal.into_response()).await,
        };
        let api = is_api(req.uri().path());
        let cors = match origin.as_deref() {
            Some(origin) if api => {
                let allowed = self.stage.origin_allowed(origin);
                match HeaderValue::from_str(origin) {
                    Ok(value) if allowed => Some(value),
                    _ => {
                        self.stage
                            .origin_refused(req.method(), req.uri().path(), origin)
                            .await;
                        return after_body(req, origin_not_allowed().into_response()).await;
                    }
                }
            }
            _ => None,
        };
        if let Some(allow) = cors.clone()
            && req.method() == Method::OPTIONS
        {
            return with_cors(preflight(), allow);
        }
        if api && is_unsafe(req.method()) && !is_json(req.headers().get(header::CONTENT_TYPE)) {
            let refusal = ApiError::new(
                Code::UnsupportedMediaType,
                "content-type must be application/json",
            );
            return with_cors_maybe(after_body(req, refusal.into_response()).await, cors);
        }
        let response = match self.stage.admit(req, origin).await {
            Ok((req, admitted)) => next(req, admitted).await,
            Err((refusal, req)) => after_body(req, refusal).await,
        };
        with_cors_maybe(response, cors)
    }
}

/// The door as a router's outermost layer. One span per request (the path only: a query
/// string could carry anything); the stage records `principal` once it knows who is
/// calling.
async fn guarded<S: Stage>(State(door): State<Arc<Door<S>>>, req: Request, next: Next) -> Response {
    door.enter(req, |mut req, admitted| {
        if let Some(admitted) = admitted {
            req.extensions_mut().insert(admitted);
        }
        next.run(req)
    })
    .await
}

fn origin_not_allowed() -> ApiError {
    ApiError::new(Code::OriginNotAllowed, "origin not allowed")
}

fn preflight() -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(ALLOW_METHODS),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(ALLOW_HEADERS),
    );
    headers.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    response
}

fn with_cors_maybe(response: Response, allow: Option<HeaderValue>) -> Response {
    match allow {
        Some(allow) => with_cors(response, allow),
        None => response,
    }
}

fn with_cors(mut response: Response, allow: HeaderValue) -> Response {
    let headers = response.headers_mut();
    // Insert, not append: a proxied answer may carry the daemon's own CORS headers.
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow);
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    if !headers.get_all(header::VARY).iter().any(|v| v == "Origin") {
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    response
}

/// `/api` itself or anything under `/api/`.
pub fn is_api(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/")
}

/// Methods that may change state.
pub fn is_unsafe(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Media type `application/json`, parameters allowed, case-insensitive.
pub fn is_json(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// The Origin header: `Ok(None)` when absent, refused when repeated or not text (such an
/// origin is never allowed).
pub fn header_origin(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let mut all = headers.get_all(header::ORIGIN).iter();
    match (all.next(), all.next()) {
        (None, _) => Ok(None),
        (Some(v), None) => v.to_str().map(Some).map_err(|_| origin_not_allowed()),
        (Some(_), Some(_)) => Err(origin_not_allowed()),
    }
}

/// `Authorization: Bearer <token>`: `Ok(None)` without the header, `Err` when it is there
/// but is not a non-empty bearer.
pub fn bearer(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|token| !token.is_empty())
        .map(Some)
        .ok_or_else(|| ApiError::new(Code::Unauthorized, "malformed authorization header"))
}

/// The answer to a path nobody serves.
pub async fn not_found() -> Response {
    ApiError::no_such_path().into_response()
}

/// The answer to a method a served path does not take.
pub async fn method_not_allowed() -> Response {
    ApiError::wrong_method().into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_paths_and_unsafe_methods() {
        assert!(is_api("/api") && is_api("/api/x"));
        assert!(!is_api("/apix") && !is_api("/"));
        assert!(is_unsafe(&Method::POST) && is_unsafe(&Method::DELETE));
        assert!(!is_unsafe(&Method::HEAD) && !is_unsafe(&Method::OPTIONS));
    }

    #[test]
    fn the_json_media_type_rule() {
        let v = HeaderValue::from_static;
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            " application/json ;x=y",
        ] {
            assert!(is_json(Some(&v(ok))), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/jsonx",
            "application/json-patch+json",
            "application/x-www-form-urlencoded",
            "",
        ] {
            assert!(!is_json(Some(&v(bad))), "{bad}");
        }
        assert!(!is_json(None));
    }

    #[test]
    fn a_repeated_origin_is_never_read() {
        let mut h = HeaderMap::new();
        assert_eq!(header_origin(&h).expect("absent"), None);
        h.append(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:1"),
        );
        assert_eq!(header_origin(&h).expect("one"), Some("http://127.0.0.1:1"));
        h.append(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        let refused = header_origin(&h).expect_err("repeated");
        assert_eq!(refused.code, Code::OriginNotAllowed);
    }

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h).expect("absent"), None);
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer(&h).expect("bearer"), Some("abc"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  abc "),
        );
        assert_eq!(bearer(&h).expect("bearer"), Some("abc"));
        for bad in ["Basic abc", "Bearer ", "Bearer"] {
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(bad));
            assert_eq!(bearer(&h).expect_err(bad).code, Code::Unauthorized);
        }
    }
}

#[cfg(test)]
mod refusal_tests {
    use std::time::Duration;

    use axum::routing::post;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A stage that refuses every request before its body is read.
    struct RefuseAll;

    impl Stage for RefuseAll {
        type Admitted = ();

        fn origin_allowed(&self, _origin: &str) -> bool {
            true
        }

        async fn admit(&self, req: Request, _origin: Option<String>) -> Judged<()> {
            let refusal = ApiError::new(Code::Forbidden, "refused before the body");
            Err((refusal.into_response(), req))
        }
    }

    /// A client still writing a large body when the stage refuses gets the refusal, not
    /// a reset connection (through a proxy, that reset read as "the daemon is gone").
    #[tokio::test]
    async fn a_refusal_before_the_body_reaches_a_client_still_sending_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let door = Arc::new(Door::new(
            HostPolicy::new([127, 0, 0, 1].into(), addr.port(), addr.port()),
            RefuseAll,
        ));
        let router = door.guard(Router::new().route("/api/x", post(|| async { "taken" })));
        let limits = crate::Limits {
            max_connections: 4,
            header_timeout: Duration::from_secs(5),
        };
        tokio::spawn(crate::serve(
            crate::Lanes::here(),
            listener,
            None,
            router,
            limits,
            std::future::pending(),
        ));
        let body = vec![b'x'; 900 * 1024];
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let head = format!(
            "POST /api/x HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            addr.port(),
            body.len()
        );
        stream.write_all(head.as_bytes()).await.expect("head");
        // Written in pieces, with pauses: the answer is decided long before the end.
        for piece in body.chunks(64 * 1024) {
            stream
                .write_all(piece)
                .await
                .expect("the body is taken, not reset");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&answer).contains("refused before the body") {
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                .await
                .expect("answers in time")
                .expect("the answer, not a reset");
            assert!(n > 0, "closed before answering: {answer:?}");
            answer.extend_from_slice(&buf[..n]);
        }
        assert!(
            String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 403"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
}
