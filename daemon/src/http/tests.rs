//! The HTTP admission stack and routes, driven through the real router.

use std::sync::Arc;

use axum::{Router, body::Body};
use http::{HeaderMap, Method, Request, StatusCode, header};
use serde_json::{Value, json};
use studio_contract::{forward, host::HostPolicy, role::Role, secret::AppKey, time::now_ms};
use tower::ServiceExt;

use super::{ApiState, BODY_LIMIT, FrontDoor, router};
use crate::{
    admission::Authority,
    testing::{APP, DAEMON_TOKEN, TempDir, authority},
};

const HOST: &str = "127.0.0.1:8766";

struct Api {
    _dir: TempDir,
    router: Router,
    authority: Arc<Authority>,
    key: AppKey,
    /// The scheduler behind the router (for what no route does: a worker's enrolment).
    scheduler: Arc<crate::scheduling::Scheduler>,
}

async fn api() -> Api {
    api_with(|_| {}).await
}

/// The API over a scheduler configured by `configure` (the engine loop is not started),
/// without a worker listener (`STUDIO_WORKER_ADDR=off`).
async fn api_with(configure: impl FnOnce(&mut crate::scheduling::SchedulerConfig)) -> Api {
    api_on(configure, None).await
}

/// [`api_with`], with the worker listener `workers` when there is one.
async fn api_on(
    configure: impl FnOnce(&mut crate::scheduling::SchedulerConfig),
    workers: Option<Arc<crate::workers::JoinDoor>>,
) -> Api {
    let mut config = crate::scheduling::SchedulerConfig::default();
    configure(&mut config);
    let dir = TempDir::new("http");
    let (store, authority) = authority(&dir, "0123456789abcdef0123456789abcdef").await;
    let stop_rx = studio_contract::lifecycle::Shutdown::new();
    let scheduler = crate::scheduling::Scheduler::new(
        crate::scheduling::store::SchedStore::with_test_key(&store),
        config,
        studio_schedule::Zone::utc(),
        dir.path().join("runs"),
        dir.path().join("run"),
        stop_rx,
        None,
    )
    .await
    .expect("scheduler");
    let authority = Arc::new(authority);
    let key = AppKey::generate();
    let front = Arc::new(FrontDoor {
        host: HostPolicy::new([127, 0, 0, 1].into(), 8766, 80),
        app_key: key.clone(),
    });
    let router = router(ApiState {
        authority: authority.clone(),
        front,
        scheduler: scheduler.clone(),
        started_at_ms: 0,
        workers,
        apps: None,
    });
    Api {
        _dir: dir,
        router,
        authority,
        key,
        scheduler,
    }
}

fn req(method: Method, path: &str) -> http::request::Builder {
    Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, HOST)
}

fn authed(method: Method, path: &str, token: &str) -> http::request::Builder {
    req(method, path).header(header::AUTHORIZATION, format!("Bearer {token}"))
}

fn json_post(path: &str, body: &Value) -> Request<Body> {
    req(Method::POST, path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ORIGIN, APP)
        .body(Body::from(body.to_string()))
        .expect("request")
}

impl Api {
    async fn send(&self, request: Request<Body>) -> (StatusCode, HeaderMap, Value) {
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("infallible");
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.expect("body");
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("every answer is JSON")
        };
        (parts.status, parts.headers, value)
    }

    async fn code_of(&self, request: Request<Body>) -> (StatusCode, String) {
        let (status, _, body) = self.send(request).await;
        (status, body["code"].as_str().unwrap_or_default().to_owned())
    }

    async fn pair(&self) -> Value {
        self.pair_as(Role::Admin).await
    }

    /// The admission token of a new session of `role`.
    async fn token_as(&self, role: Role) -> String {
        self.pair_as(role).await["token"]
            .as_str()
            .expect("token")
            .to_owned()
    }

    /// Adds `executables` to the command allow-list (the daemon token's change).
    async fn allow(&self, executables: &[&str]) {
        let allow = authed(Method::POST, "/api/admin/allowlist", DAEMON_TOKEN)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(json!({ "add": executables }).to_string()))
            .expect("request");
        assert_eq!(self.send(allow).await.0, StatusCode::OK);
    }

    /// Pairs as an Edge on Windows would (its `User-Agent`).
    async fn pair_as(&self, role: Role) -> Value {
        let code = self
            .authority
            .mint_code("test", role, now_ms())
            .await
            .expect("mint")
            .code;
        let mut request = json_post("/api/studio/pair", &json!({ "code": code }));
        request.headers_mut().insert(
            header::USER_AGENT,
            http::HeaderValue::from_static(
                "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like \
                 Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.2903.70",
            ),
        );
        let (status, _, body) = self.send(request).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }
}

fn empty(b: http::request::Builder) -> Request<Body> {
    b.body(Body::empty()).expect("request")
}

#[tokio::test]
async fn host_comes_first_and_health_is_open() {
    let api = api().await;
    let bad = empty(
        Request::builder()
            .uri("/health")
            .header(header::HOST, "evil.example"),
    );
    assert_eq!(
        api.code_of(bad).await,
        (StatusCode::BAD_REQUEST, "invalid_host".into())
    );
    let wrong_port = empty(
        Request::builder()
            .uri("/health")
            .header(header::HOST, "127.0.0.1:1"),
    );
    assert_eq!(api.code_of(wrong_port).await.1, "invalid_host");
    let (status, _, body) = api.send(empty(req(Method::GET, "/health"))).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "status": "ok" })));
}

#[tokio::test]
async fn bearer_rules_and_identity() {
    let api = api().await;
    let none = empty(req(Method::GET, "/api/identity"));
    assert_eq!(
        api.code_of(none).await,
        (StatusCode::UNAUTHORIZED, "unauthorized".into())
    );
    let wrong = empty(authed(Method::GET, "/api/identity", "nope"));
    assert_eq!(api.code_of(wrong).await.1, "unauthorized");
    let (status, _, body) = api
        .send(empty(authed(Method::GET, "/api/identity", DAEMON_TOKEN)))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["identity"], "studio");
    assert_eq!(body["epoch"], api.authority.epoch());
    assert!(body["version"].is_string());
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_json() {
    let api = api().await;
    for path in ["/api/nope", "/api", "/elsewhere"] {
        let r = empty(authed(Method::GET, path, DAEMON_TOKEN));
        assert_eq!(
            api.code_of(r).await,
            (StatusCode::NOT_FOUND, "not_found".into()),
            "{path}"
        );
    }
    let r = empty(authed(Method::GET, "/api/studio/disconnect", DAEMON_TOKEN));
    assert_eq!(
        api.code_of(r).await,
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed".into())
    );
}

#[tokio::test]
async fn unsafe_api_methods_need_json() {
    let api = api().await;
    let bodyless = empty(authed(Method::POST, "/api/studio/disconnect", DAEMON_TOKEN));
    assert_eq!(
        api.code_of(bodyless).await,
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type".into()
        )
    );
    let text = empty(
        authed(Method::DELETE, "/api/studio/sessions/x", DAEMON_TOKEN)
            .header(header::CONTENT_TYPE, "text/plain"),
    );
    assert_eq!(api.code_of(text).await.1, "unsupported_media_type");
    let ok = empty(
        authed(Method::DELETE, "/api/studio/sessions/x", DAEMON_TOKEN)
            .header(header::CONTENT_TYPE, "Application/JSON; charset=utf-8"),
    );
    assert_eq!(
        api.code_of(ok).await,
        (StatusCode::NOT_FOUND, "session_not_found".into())
    );
}

#[tokio::test]
async fn cors_allows_listed_origins_only() {
    let api = api().await;
    let evil = empty(
        authed(Method::GET, "/api/identity", DAEMON_TOKEN)
            .header(header::ORIGIN, "http://evil.example"),
    );
    assert_eq!(
        api.code_of(evil).await,
        (StatusCode::FORBIDDEN, "origin_not_allowed".into())
    );
    let evil_preflight =
        empty(req(Method::OPTIONS, "/api/identity").header(header::ORIGIN, "null"));
    assert_eq!(api.code_of(evil_preflight).await.1, "origin_not_allowed");

    let preflight = empty(req(Method::OPTIONS, "/api/studio/pair").header(header::ORIGIN, APP));
    let (status, h, _) = api.send(preflight).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(h[header::ACCESS_CONTROL_ALLOW_ORIGIN], APP);
    assert_eq!(
        h[header::ACCESS_CONTROL_ALLOW_METHODS],
        "GET, POST, PUT, PATCH, DELETE"
    );
    assert_eq!(
        h[header::ACCESS_CONTROL_ALLOW_HEADERS],
        "authorization, content-type, x-studio-decision-token"
    );
    assert_eq!(h[header::ACCESS_CONTROL_ALLOW_CREDENTIALS], "true");
    assert_eq!(h[header::ACCESS_CONTROL_MAX_AGE], "600");
    assert_eq!(h[header::VARY], "Origin");

    let actual =
        empty(authed(Method::GET, "/api/identity", DAEMON_TOKEN).header(header::ORIGIN, APP));
    let (status, h, _) = api.send(actual).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(h[header::ACCESS_CONTROL_ALLOW_ORIGIN], APP);
    assert_eq!(h[header::ACCESS_CONTROL_ALLOW_CREDENTIALS], "true");
    assert!(h.get(header::ACCESS_CONTROL_ALLOW_METHODS).is_none());
}

#[tokio::test]
async fn forwarded_origin_needs_a_valid_signature() {
    let api = api().await;
    let path = "/api/identity";
    let sig = forward::sign(&api.key, now_ms(), "GET", path, APP);
    // Signed: the forwarded origin counts and the raw Origin is ignored.
    let signed = empty(
        authed(Method::GET, path, DAEMON_TOKEN)
            .header(header::ORIGIN, "http://evil.example")
            .header(forward::ORIGIN_HEADER, APP)
            .header(forward::SIGNATURE_HEADER, &sig),
    );
    assert_eq!(api.send(signed).await.0, StatusCode::OK);
    // A signature over another origin does not verify.
    let forged = empty(
        authed(Method::GET, path, DAEMON_TOKEN)
            .header(forward::ORIGIN_HEADER, "http://evil.example")
            .header(forward::SIGNATURE_HEADER, &sig),
    );
    assert_eq!(
        api.code_of(forged).await,
        (StatusCode::UNAUTHORIZED, "unauthorized".into())
    );
    // Unsigned: the claimed forwarded origin is ignored, the raw one judged.
    let unsigned = empty(
        authed(Method::GET, path, DAEMON_TOKEN)
            .header(header::ORIGIN, "http://evil.example")
            .header(forward::ORIGIN_HEADER, APP),
    );
    assert_eq!(api.code_of(unsigned).await.1, "origin_not_allowed");
    // A signed empty origin means none: allowed to pass CORS, but pairing needs one.
    let code = api
        .authority
        .mint_code("test", Role::Admin, now_ms())
        .await
        .expect("mint")
        .code;
    let pair_path = "/api/studio/pair";
    let none_sig = forward::sign(&api.key, now_ms(), "POST", pair_path, "");
    let no_origin = req(Method::POST, pair_path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ORIGIN, APP)
        .header(forward::ORIGIN_HEADER, "")
        .header(forward::SIGNATURE_HEADER, none_sig)
        .body(Body::from(json!({ "code": code }).to_string()))
        .expect("request");
    assert_eq!(
        api.code_of(no_origin).await,
        (StatusCode::FORBIDDEN, "origin_not_allowed".into())
    );
}

#[tokio::test]
async fn pairing_over_http() {
    let api = api().await;
    let code = api
        .authority
        .mint_code("test", Role::Admin, now_ms())
        .await
        .expect("mint")
        .code;
    let (status, _, body) = api
        .send(json_post("/api/studio/pair", &json!({ "code": code })))
        .await;
    assert_eq!(status, StatusCode::OK);
    for key in [
        "token",
        "decision_token",
        "epoch",
        "principal",
        "decision_expires_at",
        "expires_at",
    ] {
        assert!(body[key].is_string(), "{key} in {body}");
    }
    assert_ne!(
        body["token"], DAEMON_TOKEN,
        "the daemon token never reaches a browser"
    );
    assert!(
        body["decision_expires_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    let again = json_post("/api/studio/pair", &json!({ "code": code }));
    assert_eq!(
        api.code_of(again).await,
        (StatusCode::UNAUTHORIZED, "pairing_code_invalid".into())
    );

    for _ in 0..9 {
        api.send(json_post("/api/studio/pair", &json!({ "code": "bad" })))
            .await;
    }
    let fresh = api
        .authority
        .mint_code("test", Role::Admin, now_ms())
        .await
        .expect("mint")
        .code;
    let limited = json_post("/api/studio/pair", &json!({ "code": fresh }));
    assert_eq!(
        api.code_of(limited).await,
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited".into())
    );
}

#[tokio::test]
async fn bodies_that_cannot_be_read_answer_json() {
    let api = api().await;
    let malformed = req(Method::POST, "/api/studio/pair")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ORIGIN, APP)
        .body(Body::from("{nope"))
        .expect("request");
    assert_eq!(
        api.code_of(malformed).await,
        (StatusCode::BAD_REQUEST, "bad_request".into())
    );
    let missing_field = json_post("/api/studio/pair", &json!({ "cod": "x" }));
    assert_eq!(api.code_of(missing_field).await.1, "bad_request");
    let huge = json_post(
        "/api/studio/pair",
        &json!({ "code": "x".repeat(BODY_LIMIT) }),
    );
    assert_eq!(
        api.code_of(huge).await,
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large".into())
    );
}

/// Routes that read their body as text (to name a bad field's path) refuse an oversize or
/// non-UTF-8 body with the JSON error contract too, never axum's plain text.
#[tokio::test]
async fn text_bodies_that_cannot_be_read_answer_json() {
    let api = api().await;
    for path in [
        "/api/schedules",
        "/api/schedules/preview",
        "/api/declarations/plan",
    ] {
        let not_utf8 = authed(Method::POST, path, DAEMON_TOKEN)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ORIGIN, APP)
            .body(Body::from(&b"{\"name\":\"\xff\xfe\"}"[..]))
            .expect("request");
        assert_eq!(
            api.code_of(not_utf8).await,
            (StatusCode::BAD_REQUEST, "bad_request".into()),
            "{path}"
        );
        let huge = authed(Method::POST, path, DAEMON_TOKEN)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ORIGIN, APP)
            .body(Body::from("a".repeat(BODY_LIMIT + 1)))
            .expect("request");
        assert_eq!(
            api.code_of(huge).await,
            (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large".into()),
            "{path}"
        );
    }
}

/// A token paired a lifetime ago is refused by the bearer stage, with its own code.
#[tokio::test]
async fn an_expired_admission_token_is_refused() {
    let api = api().await;
    let then = now_ms() - studio_contract::ADMISSION_TTL_MS - 1_000;
    let code = api
        .authority
        .mint_code("test", Role::Admin, then)
        .await
        .expect("mint")
        .code;
    let paired = api
        .authority
        .redeem(&code, Some(APP), None, then)
        .await
        .expect("paired");
    let fresh = api.pair().await;
    for _ in 0..2 {
        // Twice: first from memory, then from the durable record.
        let expired = empty(authed(Method::GET, "/api/identity", &paired.token));
        assert_eq!(
            api.code_of(expired).await,
            (StatusCode::UNAUTHORIZED, "session_expired".into())
        );
    }
    let token = fresh["token"].as_str().expect("token");
    let (status, _, body) = api
        .send(empty(authed(Method::GET, "/api/studio/sessions", token)))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["sessions"][0]["expires_at"],
        studio_contract::time::rfc3339(paired.expires_at_ms),
        "an expired session is still listed, with when it ended"
    );
}

#[tokio::test]
async fn sessions_disconnect_and_revoke() {
    let api = api().await;
    let first = api.pair().await;
    let second = api.pair().await;
    let token = first["token"].as_str().expect("token");

    let (status, _, body) = api
        .send(empty(authed(Method::GET, "/api/studio/sessions", token)))
        .await;
    assert_eq!(status, StatusCode::OK);
    let sessions = body["sessions"].as_array().expect("list");
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[0]["id"], first["principal"]);
    assert_eq!(sessions[0]["current"], true);
    assert_eq!(sessions[1]["current"], false);
    assert_eq!(sessions[0]["origin"], APP);
    assert_eq!(sessions[0]["device"], "Edge 131 on Windows");
    assert_eq!(sessions[0]["revoked_at"], Value::Null);
    assert!(sessions[0]["created_at"].is_string() && sessions[0]["last_seen_at"].is_string());
    assert_eq!(sessions[0]["expires_at"], first["expires_at"]);

    // Revoking another browser is destructive: from a browser it needs that browser's
    // own decision token, sent from its own origin; refused, nothing changes.
    let id = second["principal"].as_str().expect("id");
    let delete = |decision: Option<&str>| {
        let mut r = authed(Method::DELETE, &format!("/api/studio/sessions/{id}"), token)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ORIGIN, APP);
        if let Some(d) = decision {
            r = r.header("x-studio-decision-token", d);
        }
        empty(r)
    };
    let others = second["decision_token"].as_str().expect("decision");
    for (decision, why) in [
        (None, "no decision token was sent"),
        (Some(others), "the decision token is another session's"),
        (Some("std_forged"), ""),
    ] {
        let (status, _, body) = api.send(delete(decision)).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("decision_required")),
            "{body}"
        );
        assert!(
            body["message"]
                .as_str()
                .unwrap_or_default()
                .starts_with(why),
            "{body}"
        );
    }
    let still = empty(authed(
        Method::GET,
        "/api/identity",
        second["token"].as_str().expect("t"),
    ));
    assert_eq!(
        api.send(still).await.0,
        StatusCode::OK,
        "the refusals revoked nothing"
    );
    let mine = first["decision_token"].as_str().expect("decision");
    let (status, _, body) = api.send(delete(Some(mine))).await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({ "revoked": true, "id": id }))
    );
    let revoked = empty(authed(
        Method::GET,
        "/api/identity",
        second["token"].as_str().expect("t"),
    ));
    assert_eq!(
        api.code_of(revoked).await,
        (StatusCode::UNAUTHORIZED, "revoked".into())
    );

    let disconnect = empty(
        authed(Method::POST, "/api/studio/disconnect", token)
            .header(header::CONTENT_TYPE, "application/json"),
    );
    let (status, _, body) = api.send(disconnect).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::OK,
            json!({ "revoked": true, "principal": first["principal"] })
        )
    );
    assert_eq!(
        api.code_of(empty(authed(Method::GET, "/api/identity", token)))
            .await
            .1,
        "revoked"
    );

    let (_, _, body) = api
        .send(empty(authed(
            Method::GET,
            "/api/studio/sessions",
            DAEMON_TOKEN,
        )))
        .await;
    let sessions = body["sessions"].as_array().expect("list");
    assert!(
        sessions
            .iter()
            .all(|s| s["revoked_at"].is_string() && s["current"] == false)
    );

    // The trail says who revoked whom: the first browser the second, then itself.
    let (_, _, trail) = api
        .send(empty(authed(
            Method::GET,
            "/api/audit?kind=session_revoked",
            DAEMON_TOKEN,
        )))
        .await;
    let said: Vec<(Value, Value, Value)> = trail["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["principal"].clone(),
                e["object"].clone(),
                e["detail"]["reason"].clone(),
            )
        })
        .collect();
    let first_id = first["principal"].as_str().expect("id");
    let (_, _, paired) = api
        .send(empty(authed(
            Method::GET,
            &format!("/api/audit?kind=pairing_redeemed&principal={first_id}"),
            DAEMON_TOKEN,
        )))
        .await;
    let paired = &paired["entries"][0];
    assert_eq!(
        (
            &paired["object"],
            &paired["role"],
            &paired["origin"],
            &paired["detail"]["device"]
        ),
        (
            &json!(format!("session:{first_id}")),
            &json!("admin"),
            &json!(APP),
            &json!("Edge 131 on Windows")
        ),
        "a pairing is its session's own row"
    );
    assert_eq!(
        said,
        [
            (
                json!(first_id),
                json!(format!("session:{first_id}")),
                json!("disconnect")
            ),
            (
                json!(first_id),
                json!(format!("session:{id}")),
                json!("revoked_by_user")
            ),
        ]
    );
}

#[path = "declarations_tests.rs"]
mod declarations;

#[path = "schedules_tests.rs"]
mod schedules;

#[path = "approvals_tests.rs"]
mod approvals;

#[path = "tasks_tests.rs"]
mod tasks;

#[path = "workers_tests.rs"]
mod workers;

#[path = "secrets_tests.rs"]
mod secrets;

#[path = "notify_tests.rs"]
mod notify;

#[path = "health_tests.rs"]
mod health;

#[path = "retention_tests.rs"]
mod retention;

/// The live router against the document: every (method, path) the document names is
/// served (never the fallback's `not_found` nor `method_not_allowed`), and every method
/// the document does not name on a path is answered `405` — so nothing is served that the
/// document leaves out. Path parameters are filled with an id nobody has.
#[tokio::test]
async fn the_router_serves_exactly_the_documented_routes() {
    let api = api().await;
    let doc: Value =
        serde_json::from_str(&studio_api::openapi::to_text(&studio_api::daemon_document()))
            .expect("document");
    let paths = doc["paths"].as_object().expect("paths");
    assert_eq!(paths.len(), {
        let mut p: Vec<&str> = studio_api::routes::ROUTES.iter().map(|r| r.path).collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    });
    for (template, item) in paths {
        let path = template.replace("{id}", "no-such-id");
        for method in [
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ] {
            let documented = item.get(method.as_str().to_ascii_lowercase()).is_some();
            let mut r = authed(method.clone(), &path, DAEMON_TOKEN);
            if method != Method::GET {
                r = r.header(header::CONTENT_TYPE, "application/json");
            }
            let request = r.body(Body::from("{}")).expect("request");
            let response = api
                .router
                .clone()
                .oneshot(request)
                .await
                .expect("infallible");
            let status = response.status();
            // Read only refusals: an admitted event stream never ends.
            let body = if status.is_client_error() {
                let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                    .await
                    .expect("body");
                serde_json::from_slice::<studio_api::ErrorBody>(&bytes)
                    .map(|e| e.code.as_str().to_owned())
                    .unwrap_or_default()
            } else {
                String::new()
            };
            if documented {
                assert!(
                    !(status == StatusCode::NOT_FOUND && body == "not_found")
                        && status != StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {template} is documented but answered {status} {body}"
                );
            } else {
                assert_eq!(
                    (status, body.as_str()),
                    (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
                    "{method} {template} is served but not documented"
                );
            }
        }
    }
}

#[tokio::test]
async fn the_document_is_served_as_checked_in() {
    let api = api().await;
    let (status, _, body) = api
        .send(empty(authed(
            Method::GET,
            "/api/openapi.json",
            DAEMON_TOKEN,
        )))
        .await;
    assert_eq!(status, StatusCode::OK);
    let checked_in: Value =
        serde_json::from_str(include_str!("../../../docs/openapi.json")).expect("checked in");
    assert!(
        body == checked_in,
        "GET /api/openapi.json differs from docs/openapi.json (see the studio-api documents test)"
    );
    let anonymous = empty(req(Method::GET, "/api/openapi.json"));
    assert_eq!(
        api.code_of(anonymous).await,
        (StatusCode::UNAUTHORIZED, "unauthorized".into()),
        "the document is admitted like the rest of /api"
    );
}

/// Each route needs a role (the inventory's `needs`): a viewer reads and may end its own
/// session, an operator also changes schedules, only an admin deletes one; the daemon
/// token has every role. A refusal names the role needed and changes nothing.
#[tokio::test]
async fn roles_are_enforced_from_the_inventory() {
    let api = api().await;
    let viewer = api.token_as(Role::Viewer).await;
    let operator = api.token_as(Role::Operator).await;
    api.allow(&["true"]).await;
    let spec = json!({
        "name": "nightly", "trigger": {"cron": {"expression": "0 3 * * *"}},
        "action": {"kind": "command", "executable": "true"}
    });
    let create = |token: &str| {
        authed(Method::POST, "/api/schedules", token)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(spec.to_string()))
            .expect("request")
    };

    let (status, _, body) = api.send(create(&viewer)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
    assert_eq!(
        body["message"],
        "this needs the operator role; this session is a viewer"
    );
    let (status, _, list) = api
        .send(empty(authed(Method::GET, "/api/schedules", &viewer)))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["schedules"], json!([]), "the refusal created nothing");

    let (status, _, created) = api.send(create(&operator)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    let delete = |token: &str| {
        empty(
            authed(Method::DELETE, &format!("/api/schedules/{id}"), token)
                .header(header::CONTENT_TYPE, "application/json"),
        )
    };
    let (status, _, body) = api.send(delete(&operator)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        body["message"],
        "this needs the admin role; this session is an operator"
    );
    let (status, _, _) = api.send(delete(DAEMON_TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "the daemon token has every role");

    // Sessions say their roles; a viewer ends its own session.
    let (_, _, sessions) = api
        .send(empty(authed(
            Method::GET,
            "/api/studio/sessions",
            DAEMON_TOKEN,
        )))
        .await;
    let mut roles: Vec<&str> = sessions["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter_map(|s| s["role"].as_str())
        .collect();
    roles.sort_unstable();
    assert_eq!(roles, ["operator", "viewer"]);
    // An admin makes the viewer an operator: its next request may create.
    let viewer_id = sessions["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|s| s["role"] == "viewer")
        .and_then(|s| s["id"].as_str())
        .expect("the viewer")
        .to_owned();
    let change = |token: &str, id: &str, body: &str| {
        authed(Method::PATCH, &format!("/api/studio/sessions/{id}"), token)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_owned()))
            .expect("request")
    };
    let (status, _, _) = api
        .send(change(&operator, &viewer_id, r#"{"role":"operator"}"#))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "an operator changes no role");
    let (status, _, body) = api
        .send(change(DAEMON_TOKEN, &viewer_id, r#"{"role":"emperor"}"#))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("validation_failed"))
    );
    let (status, _, body) = api
        .send(change(DAEMON_TOKEN, "nobody", r#"{"role":"operator"}"#))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("session_not_found"))
    );
    let (status, _, body) = api
        .send(change(DAEMON_TOKEN, &viewer_id, r#"{"role":"operator"}"#))
        .await;
    assert_eq!(
        (status, body["role"].as_str()),
        (StatusCode::OK, Some("operator")),
        "{body}"
    );
    let (status, _, body) = api.send(create(&viewer)).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "judged by its new role: {body}"
    );

    let disconnect = authed(Method::POST, "/api/studio/disconnect", &viewer)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ORIGIN, APP)
        .body(Body::from("{}"))
        .expect("request");
    let (status, _, body) = api.send(disconnect).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Each change made through the API is in the trail with who made it, in what role,
/// from where; a refused change leaves no row; the trail pages and filters, and a bad
/// filter or a cursor from another list is refused.
#[tokio::test]
async fn every_change_is_in_the_audit_trail_with_who_made_it() {
    let api = api().await;
    let operator = api.pair_as(Role::Operator).await;
    let (operator, session) = (
        operator["token"].as_str().expect("token").to_owned(),
        operator["principal"].as_str().expect("id").to_owned(),
    );
    let viewer = api.token_as(Role::Viewer).await;
    api.allow(&["true"]).await;
    let post = |path: &str, token: &str, body: Value| {
        authed(Method::POST, path, token)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ORIGIN, APP)
            .body(Body::from(body.to_string()))
            .expect("request")
    };
    let spec = json!({
        "name": "audited", "trigger": {"cron": {"expression": "0 3 * * *"}},
        "action": {"kind": "command", "executable": "true"}
    });
    let (status, _, created) = api.send(post("/api/schedules", &operator, spec)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    let (status, _, _) = api
        .send(post(
            &format!("/api/schedules/{id}/disable"),
            &viewer,
            json!({}),
        ))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    for action in ["disable", "enable"] {
        let (status, _, body) = api
            .send(post(
                &format!("/api/schedules/{id}/{action}"),
                &operator,
                json!({}),
            ))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, _, run) = api
        .send(post(
            &format!("/api/schedules/{id}/trigger"),
            &operator,
            json!({}),
        ))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{run}");
    let run_id = run["id"].as_str().expect("run id").to_owned();
    let delete = authed(
        Method::DELETE,
        &format!("/api/schedules/{id}"),
        DAEMON_TOKEN,
    )
    .header(header::CONTENT_TYPE, "application/json")
    .body(Body::empty())
    .expect("request");
    assert_eq!(api.send(delete).await.0, StatusCode::OK);

    let get = |path: &str| empty(authed(Method::GET, path, &viewer));
    let (status, _, page) = api.send(get(&format!("/api/audit?schedule={id}"))).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let entries = page["entries"].as_array().expect("entries");
    let kinds: Vec<&str> = entries.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "schedule_deleted",
            "run_triggered",
            "schedule_enabled",
            "schedule_disabled",
            "schedule_created"
        ],
        "the viewer's refused disable left no row"
    );
    let deleted = &entries[0];
    assert_eq!(deleted["principal"], "daemon");
    assert_eq!(deleted["role"], "admin");
    assert_eq!(deleted["origin"], Value::Null);
    assert_eq!(deleted["detail"]["name"], "audited");
    let triggered = &entries[1];
    assert_eq!(triggered["principal"], session.as_str());
    assert_eq!(triggered["role"], "operator");
    assert_eq!(triggered["origin"], APP);
    assert_eq!(triggered["object"], format!("run:{run_id}"));
    assert_eq!(triggered["schedule_id"], id.as_str());
    assert_eq!(entries[4]["object"], format!("schedule:{id}"));

    // Filters: a principal, a kind; pages of one, each cursor bound to its filters.
    let (_, _, mine) = api
        .send(get(&format!(
            "/api/audit?principal={session}&kind=schedule_created,run_triggered"
        )))
        .await;
    let kinds: Vec<&str> = mine["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["run_triggered", "schedule_created"]);
    let (_, _, first) = api
        .send(get(&format!("/api/audit?schedule={id}&limit=1")))
        .await;
    let cursor = first["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let (_, _, second) = api
        .send(get(&format!(
            "/api/audit?schedule={id}&limit=1&cursor={cursor}"
        )))
        .await;
    assert_eq!(second["entries"][0]["kind"], "run_triggered");
    let (status, _, body) = api
        .send(get(&format!("/api/audit?limit=1&cursor={cursor}")))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_cursor"))
    );
    let (status, _, body) = api.send(get("/api/audit?kind=schedule_eaten")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request"))
    );
    let (status, _, body) = api.send(get("/api/audit?since=yesterday")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request"))
    );
}
