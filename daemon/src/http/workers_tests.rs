//! `/api/workers` through the real router: the built-in worker is listed first; a join
//! token is an admin's (a browser's only with its decision token), checked before
//! anything is written, pins the listener's authority and reaches the audit trail only
//! as its labels and expiry; without a listener no token is made; a revocation is
//! answered again for a revoked worker and `worker_not_found` for an unknown one.

use std::sync::Arc;

use axum::body::Body;
use http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};
use studio_contract::role::Role;

use super::{APP, Api, api, api_on, authed, empty};
use crate::{scheduling::store::NewWorker, testing::DAEMON_TOKEN, workers::JoinDoor};

const TOKENS: &str = "/api/workers/tokens";

/// The API with a worker listener on 127.0.0.1:8767 whose authority has this fingerprint.
async fn api_with_door() -> (Api, String) {
    let fingerprint = "ab".repeat(32);
    let door = JoinDoor {
        addr: "127.0.0.1:8767".parse().expect("addr"),
        ca_fingerprint: fingerprint.clone(),
    };
    (api_on(|_| {}, Some(Arc::new(door))).await, fingerprint)
}

fn post(token: &str, path: &str, body: &Value) -> Request<Body> {
    authed(Method::POST, path, token)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("request")
}

fn delete(token: &str, path: &str) -> Request<Body> {
    empty(authed(Method::DELETE, path, token).header(header::CONTENT_TYPE, "application/json"))
}

async fn get(api: &Api, path: &str) -> Value {
    let (status, _, body) = api
        .send(empty(authed(Method::GET, path, DAEMON_TOKEN)))
        .await;
    assert_eq!(status, StatusCode::OK, "{path}: {body}");
    body
}

async fn create(api: &Api, body: &Value) -> (StatusCode, Value) {
    let (status, _, answer) = api.send(post(DAEMON_TOKEN, TOKENS, body)).await;
    (status, answer)
}

fn error_paths(body: &Value) -> Vec<&str> {
    body["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect()
}

/// Enrols a worker with a fresh token granting `labels`, as the listener's `Join` does.
async fn enrol(api: &Api, id: &str, labels: &[&str]) {
    let (status, created) = create(api, &json!({ "labels": labels })).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let token = studio_pki::JoinToken::parse(created["token"].as_str().expect("token"))
        .expect("a join token");
    let worker = NewWorker {
        id: id.to_owned(),
        name: format!("{id}-host"),
        cert_sha256: "cd".repeat(32),
        cert_serial: "01".to_owned(),
        cert_not_after_ms: studio_contract::time::now_ms() + 3_600_000,
    };
    let joined = api
        .scheduler
        .join_worker(&token.digest(), &worker, &api.authority.epoch())
        .await
        .expect("store");
    assert!(joined.is_some(), "the token admits it once");
}

#[tokio::test]
async fn the_builtin_worker_is_listed_first() {
    let (api, _) = api_with_door().await;
    let alone = get(&api, "/api/workers").await;
    let workers = alone["workers"].as_array().expect("workers");
    assert_eq!(workers.len(), 1, "{alone}");
    assert_eq!(
        (
            &workers[0]["id"],
            &workers[0]["builtin"],
            &workers[0]["connected"]
        ),
        (&json!("builtin"), &json!(true), &json!(true))
    );
    enrol(&api, "w-1", &["gpu", "linux"]).await;
    let list = get(&api, "/api/workers").await;
    let ids: Vec<&Value> = list["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| &w["id"])
        .collect();
    assert_eq!(ids, [&json!("builtin"), &json!("w-1")]);
    let w = &list["workers"][1];
    assert_eq!(w["builtin"], false);
    assert_eq!(w["granted"], json!(["gpu", "linux"]));
    assert_eq!(w["connected"], false, "no assignment stream is open");
    assert_eq!(w["revoked_at"], Value::Null);
    // A viewer reads the list too.
    let viewer = api.token_as(Role::Viewer).await;
    let (status, _, _) = api
        .send(empty(
            authed(Method::GET, "/api/workers", &viewer).header(header::ORIGIN, APP),
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_join_token_pins_the_listeners_authority() {
    let (api, fingerprint) = api_with_door().await;
    let (status, created) = create(
        &api,
        &json!({"labels": ["linux", "gpu", "linux"], "ttl": "30m"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let text = created["token"].as_str().expect("token");
    let token = studio_pki::JoinToken::parse(text).expect("a join token");
    assert_eq!(token.ca_fingerprint, fingerprint);
    assert_eq!(
        created["labels"],
        json!(["gpu", "linux"]),
        "sorted, no repeats"
    );
    assert_eq!(created["server"], "127.0.0.1:8767");
    let expires = created["expires_at"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .expect("an instant")
        .as_millisecond();
    let in_ms = expires - studio_contract::time::now_ms();
    assert!(
        (29 * 60_000..=30 * 60_000).contains(&in_ms),
        "30m from now: {in_ms}"
    );
    let (status, other) = create(&api, &json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{other}");
    assert_ne!(other["token"], created["token"], "each token is new");
    assert_eq!(other["labels"], json!([]));

    // The trail has each token's labels and expiry, never the token.
    let trail = get(&api, "/api/audit?kind=worker_token_created").await;
    let entries = trail["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 2, "{trail}");
    let all = get(&api, "/api/audit").await.to_string();
    for secret in [text, &token.secret, &token.digest()] {
        assert!(!all.contains(secret), "the trail holds {secret:?}: {all}");
    }
    assert!(
        entries
            .iter()
            .any(|e| e.to_string().contains("gpu") && e.to_string().contains("linux")),
        "{trail}"
    );
}

#[tokio::test]
async fn a_bad_token_request_is_refused_and_writes_nothing() {
    let (api, _) = api_with_door().await;
    let (status, body) = create(
        &api,
        &json!({"labels": ["gpu", "no spaces", "", "x".repeat(65)], "ttl": "8d"}),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("validation_failed")),
        "{body}"
    );
    assert_eq!(
        error_paths(&body),
        ["labels[1]", "labels[2]", "labels[3]", "ttl"]
    );
    let many: Vec<String> = (0..33).map(|i| format!("l{i}")).collect();
    let (status, body) = create(&api, &json!({ "labels": many })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(error_paths(&body), ["labels"]);
    for ttl in ["soon", "0s", "-1h"] {
        let (status, body) = create(&api, &json!({ "ttl": ttl })).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{ttl}: {body}");
        assert_eq!(error_paths(&body), ["ttl"], "{ttl}");
    }
    let (status, body) = create(&api, &json!({"labels": [], "role": "admin"})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("validation_failed")),
        "an unknown field: {body}"
    );
    // At the limits: 32 labels, 7 days, 64 characters.
    let most: Vec<String> = (0..32).map(|i| format!("l{i}")).collect();
    let (status, body) = create(&api, &json!({"labels": most, "ttl": "7d"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = create(&api, &json!({"labels": ["a.b_c-D9".repeat(8)]})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let trail = get(&api, "/api/audit?kind=worker_token_created").await;
    assert_eq!(
        trail["entries"].as_array().map(Vec::len),
        Some(2),
        "only the accepted requests wrote"
    );
}

#[tokio::test]
async fn no_token_without_a_worker_listener() {
    let api = api().await;
    let (status, body) = create(&api, &json!({"labels": ["gpu"]})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("conflict")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("STUDIO_WORKER_ADDR")),
        "{body}"
    );
    let trail = get(&api, "/api/audit?kind=worker_token_created").await;
    assert_eq!(trail["entries"], json!([]));
    // The list still answers: the built-in worker needs no listener.
    let list = get(&api, "/api/workers").await;
    assert_eq!(list["workers"][0]["id"], "builtin");
}

/// Join tokens and revocation are an admin's: a viewer and an operator are refused, an
/// admin's browser needs its decision token, the daemon token needs none.
#[tokio::test]
async fn only_an_admin_makes_tokens_and_revokes() {
    let (api, _) = api_with_door().await;
    enrol(&api, "w-1", &[]).await;
    for role in [Role::Viewer, Role::Operator] {
        let token = api.token_as(role).await;
        let mut request = post(&token, TOKENS, &json!({}));
        request
            .headers_mut()
            .insert(header::ORIGIN, http::HeaderValue::from_static(APP));
        assert_eq!(
            api.code_of(request).await,
            (StatusCode::FORBIDDEN, "forbidden".into()),
            "{role:?}"
        );
        let request = empty(
            authed(Method::DELETE, "/api/workers/w-1", &token)
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ORIGIN, APP),
        );
        assert_eq!(
            api.code_of(request).await,
            (StatusCode::FORBIDDEN, "forbidden".into()),
            "{role:?}"
        );
    }
    let admin = api.pair_as(Role::Admin).await;
    let token = admin["token"].as_str().expect("token");
    let decision = admin["decision_token"].as_str().expect("decision");
    let from_page = |decision: Option<&str>| {
        let mut r = authed(Method::POST, TOKENS, token)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ORIGIN, APP);
        if let Some(d) = decision {
            r = r.header("x-studio-decision-token", d);
        }
        r.body(Body::from("{}")).expect("request")
    };
    assert_eq!(
        api.code_of(from_page(None)).await,
        (StatusCode::FORBIDDEN, "decision_required".into())
    );
    let trail = get(&api, "/api/audit?kind=worker_token_created").await;
    assert_eq!(
        trail["entries"].as_array().map(Vec::len),
        Some(1),
        "only enrol's token so far"
    );
    let (status, _, body) = api.send(from_page(Some(decision))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let list = get(&api, "/api/workers").await;
    assert_eq!(list["workers"][1]["revoked_at"], Value::Null, "not revoked");
}

#[tokio::test]
async fn a_worker_is_revoked_once_and_an_unknown_one_is_not_found() {
    let (api, _) = api_with_door().await;
    enrol(&api, "w-1", &["gpu"]).await;
    let (status, _, first) = api.send(delete(DAEMON_TOKEN, "/api/workers/w-1")).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["id"], "w-1");
    assert_eq!(first["connected"], false);
    assert!(first["revoked_at"].is_string(), "{first}");
    let (status, _, again) = api.send(delete(DAEMON_TOKEN, "/api/workers/w-1")).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["revoked_at"], first["revoked_at"], "revoked once");
    let trail = get(&api, "/api/audit?kind=worker_revoked").await;
    assert_eq!(
        trail["entries"].as_array().map(Vec::len),
        Some(1),
        "{trail}"
    );
    let list = get(&api, "/api/workers").await;
    assert_eq!(list["workers"][1]["revoked_at"], first["revoked_at"]);
    for unknown in ["nope", "w-2"] {
        assert_eq!(
            api.code_of(delete(DAEMON_TOKEN, &format!("/api/workers/{unknown}")))
                .await,
            (StatusCode::NOT_FOUND, "worker_not_found".into()),
            "{unknown}"
        );
    }
}
