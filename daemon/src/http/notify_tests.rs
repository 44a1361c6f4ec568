//! `/api/notify` through the real router: an endpoint's signing secret is answered once
//! and kept nowhere anyone reads; URLs are checked (scheme, credentials, this machine's
//! own listeners); rules must name an endpoint that exists; an endpoint in use is kept;
//! a test delivery is queued; deliveries filter and refuse a bad status.

use axum::body::Body;
use http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};

use super::{Api, api_with, authed, empty};
use crate::testing::DAEMON_TOKEN;

async fn send(api: &Api, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let b = authed(method, path, DAEMON_TOKEN).header(header::CONTENT_TYPE, "application/json");
    let req: Request<Body> = match body {
        Some(body) => b.body(Body::from(body.to_string())).expect("request"),
        None => empty(b),
    };
    let (status, _, answer) = api.send(req).await;
    (status, answer)
}

fn paths(body: &Value) -> Vec<&str> {
    body["errors"]
        .as_array()
        .map(|e| e.iter().filter_map(|e| e["path"].as_str()).collect())
        .unwrap_or_default()
}

/// The API with `true` allowed, and 8766 / 8765 as this machine's own listeners.
async fn notify_api() -> Api {
    api_with(|c| {
        c.allowlist_seed = vec!["true".into()];
        c.own_ports = vec![8765, 8766];
    })
    .await
}

#[tokio::test]
async fn an_endpoint_secret_is_shown_once_and_urls_are_checked() {
    let api = notify_api().await;
    let endpoints = "/api/notify/endpoints";
    let (status, created) = send(
        &api,
        Method::POST,
        endpoints,
        Some(json!({"name": "ops", "url": "https://hooks.example/studio", "format": "slack"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let secret = created["signing_secret"]
        .as_str()
        .expect("secret")
        .to_owned();
    assert_eq!(secret.len(), 64);
    assert_eq!(created["endpoint"]["format"], "slack");
    // Its path (often the webhook's credential) is shown nowhere.
    assert_eq!(created["endpoint"]["url"], "https://hooks.example/…");
    let (status, again) = send(
        &api,
        Method::POST,
        endpoints,
        Some(json!({"name": "ops", "url": "https://other.example/"})),
    )
    .await;
    assert_eq!(
        (status, again["code"].as_str()),
        (StatusCode::CONFLICT, Some("name_taken"))
    );
    for (url, why) in [
        ("ftp://hooks.example/", "must be http or https"),
        ("https://user:pw@hooks.example/", "credentials"),
        (
            "http://127.0.0.1:8766/api/schedules",
            "own Studio listeners",
        ),
        ("http://localhost:8765/", "own Studio listeners"),
        ("http://[::1]:8766/", "own Studio listeners"),
        ("not a url", "not a URL"),
    ] {
        let (status, body) = send(
            &api,
            Method::POST,
            endpoints,
            Some(json!({"name": "bad", "url": url})),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {body}");
        assert_eq!(paths(&body), ["url"], "{url}");
        assert!(body.to_string().contains(why), "{url}: {body}");
    }
    // Another port on this machine is anyone's receiver.
    let (status, body) = send(
        &api,
        Method::POST,
        endpoints,
        Some(json!({"name": "local", "url": "http://127.0.0.1:9999/hook"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // The secret is in no listing, trail or export.
    let mut seen = String::new();
    for path in [endpoints, "/api/audit", "/api/notify/deliveries"] {
        let (status, body) = send(&api, Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        seen.push_str(&body.to_string());
    }
    assert!(!seen.contains(&secret), "{seen}");
    assert!(!seen.contains("/studio"), "the webhook's path: {seen}");
    assert!(seen.contains("endpoint_created"), "{seen}");
}

#[tokio::test]
async fn rules_name_existing_endpoints_and_an_endpoint_in_use_is_kept() {
    let api = notify_api().await;
    let schedule = |to: &str| {
        json!({
            "name": "nightly", "trigger": {"every": "1h"},
            "action": {"kind": "command", "executable": "true"},
            "notify": [{"on": ["failed"], "to": to, "after": 3, "cooldown": "1h"}],
        })
    };
    let (status, body) = send(&api, Method::POST, "/api/schedules", Some(schedule("ops"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(paths(&body), ["notify[0].to"]);
    let bad = json!({
        "name": "bad", "trigger": {"every": "1h"},
        "action": {"kind": "command", "executable": "true"},
        "notify": [{"on": [], "to": "no such/name", "after": 0, "cooldown": "soon"}],
    });
    let (status, body) = send(&api, Method::POST, "/api/schedules", Some(bad)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        paths(&body),
        [
            "notify[0].on",
            "notify[0].to",
            "notify[0].after",
            "notify[0].cooldown"
        ]
    );
    let (status, _) = send(
        &api,
        Method::POST,
        "/api/notify/endpoints",
        Some(json!({"name": "ops", "url": "http://127.0.0.1:9999/hook"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = send(&api, Method::POST, "/api/schedules", Some(schedule("ops"))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, list) = send(&api, Method::GET, "/api/notify/endpoints", None).await;
    assert_eq!(list["endpoints"][0]["used_by"], json!(["nightly"]));
    let (status, body) = send(&api, Method::DELETE, "/api/notify/endpoints/ops", None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("endpoint_in_use")),
        "{body}"
    );
    // A test is queued (the sender of this test API does not run: it stays pending).
    let (status, queued) = send(&api, Method::POST, "/api/notify/endpoints/ops/test", None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    assert_eq!(
        (queued["event"].as_str(), queued["status"].as_str()),
        (Some("test"), Some("pending"))
    );
    let (status, _) = send(&api, Method::POST, "/api/notify/endpoints/nope/test", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, found) = send(
        &api,
        Method::GET,
        "/api/notify/deliveries?endpoint=ops&status=pending",
        None,
    )
    .await;
    assert_eq!(
        found["deliveries"].as_array().map(Vec::len),
        Some(1),
        "{found}"
    );
    let (_, none) = send(
        &api,
        Method::GET,
        "/api/notify/deliveries?status=dead",
        None,
    )
    .await;
    assert_eq!(none["deliveries"], json!([]));
    let (status, body) = send(
        &api,
        Method::GET,
        "/api/notify/deliveries?status=lost",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}
