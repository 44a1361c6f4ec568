//! `/api/admin/retention` and `/api/admin/archives/restore`: who may set the policy, run
//! a pass and restore, and what bad input gets; and who reads `/api/admin/cluster`.

use http::{Method, StatusCode, header};
use serde_json::{Value, json};
use studio_contract::role::Role;

use super::{APP, Api, api, authed, empty};
use crate::testing::DAEMON_TOKEN;

fn with_body(
    method: Method,
    path: &str,
    token: &str,
    body: &Value,
) -> http::Request<axum::body::Body> {
    authed(method, path, token)
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .expect("request")
}

async fn send(api: &Api, req: http::Request<axum::body::Body>) -> (StatusCode, Value) {
    let (status, _, body) = api.send(req).await;
    (status, body)
}

#[tokio::test]
async fn the_policy_is_an_admins_and_bad_policies_name_their_field() {
    let api = api().await;
    let (status, state) = send(
        &api,
        empty(authed(Method::GET, "/api/admin/retention", DAEMON_TOKEN)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{state}");
    assert_eq!(
        (state["source"].as_str(), &state["policy"]),
        (Some("default"), &json!({}))
    );

    let policy = json!({"runs": {"max_age": "30d", "keep_last": 100},
        "logs": {"max_bytes": 5_368_709_120_u64},
        "notifications": {"delivered": "7d", "dead": "30d"}});
    let (status, state) = send(
        &api,
        with_body(Method::PUT, "/api/admin/retention", DAEMON_TOKEN, &policy),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{state}");
    assert_eq!(state["policy"], policy);
    assert_eq!(state["source"], "api");

    for (bad, path) in [
        (json!({"runs": {"max_age": "3x"}}), "runs.max_age"),
        (json!({"runs": {"keep_last": 0}}), "runs.keep_last"),
        (json!({"logs": {"max_bytes": 10}}), "logs.max_bytes"),
        (json!({"interval": "10s"}), "interval"),
        (json!({"archive_dir": "relative/dir"}), "archive_dir"),
        (json!({"runs": {"forever": true}}), "runs"),
    ] {
        let (status, body) = send(
            &api,
            with_body(Method::PUT, "/api/admin/retention", DAEMON_TOKEN, &bad),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(body["code"], "validation_failed");
        assert!(
            body["errors"].as_array().is_some_and(|e| e
                .iter()
                .any(|e| e["path"].as_str().is_some_and(|p| p.starts_with(path)))),
            "{bad}: {body}"
        );
    }
    // Unchanged by the refusals.
    let (_, state) = send(
        &api,
        empty(authed(Method::GET, "/api/admin/retention", DAEMON_TOKEN)),
    )
    .await;
    assert_eq!(state["policy"], policy);

    // A browser admin with its decision token changes the policy, but not where files
    // are written: that is the machine owner's.
    let paired = api.pair_as(Role::Admin).await;
    let put_as_browser = |body: &Value| {
        authed(
            Method::PUT,
            "/api/admin/retention",
            paired["token"].as_str().expect("token"),
        )
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ORIGIN, APP)
        .header(
            "x-studio-decision-token",
            paired["decision_token"].as_str().expect("decision"),
        )
        .body(axum::body::Body::from(body.to_string()))
        .expect("request")
    };
    let (status, body) = send(&api, put_as_browser(&json!({"archive_dir": "/etc/cron.d"}))).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("daemon_token_required")),
        "{body}"
    );
    let (status, body) = send(&api, put_as_browser(&json!({"runs": {"keep_last": 5}}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = send(
        &api,
        with_body(
            Method::PUT,
            "/api/admin/retention",
            DAEMON_TOKEN,
            &json!({"archive_dir": "/srv/a"}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Keeping the one set is the browser's to do.
    let (status, body) = send(
        &api,
        put_as_browser(&json!({"archive_dir": "/srv/a", "runs": {"keep_last": 9}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // A browser: an operator may not; an admin needs its decision token.
    let operator = api.token_as(Role::Operator).await;
    let admin = api.token_as(Role::Admin).await;
    for (token, code) in [(&operator, "forbidden"), (&admin, "decision_required")] {
        let req = authed(Method::PUT, "/api/admin/retention", token)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ORIGIN, APP)
            .body(axum::body::Body::from(json!({}).to_string()))
            .expect("request");
        let (status, body) = send(&api, req).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::FORBIDDEN, Some(code)),
            "{body}"
        );
    }
}

#[tokio::test]
async fn a_pass_and_a_restore_are_the_machine_owners() {
    let api = api().await;
    let admin = api.token_as(Role::Admin).await;
    for path in ["/api/admin/retention/run", "/api/admin/archives/restore"] {
        let body = json!({"file": "/x.zip"});
        let req = authed(Method::POST, path, &admin)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ORIGIN, APP)
            .body(axum::body::Body::from(body.to_string()))
            .expect("request");
        let (status, body) = send(&api, req).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("daemon_token_required")),
            "{path}: {body}"
        );
    }
    let (status, pass) = send(
        &api,
        with_body(
            Method::POST,
            "/api/admin/retention/run",
            DAEMON_TOKEN,
            &json!({}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{pass}");
    assert_eq!(
        (pass["outcome"].as_str(), pass["trigger"].as_str()),
        (Some("completed"), Some("request"))
    );
    // PostgreSQL checkpoints its own log: a pass there records none.
    let postgres = crate::testing::on_postgres();
    if postgres {
        assert!(pass["checkpoint"].is_null(), "{pass}");
    } else {
        assert_eq!(pass["checkpoint"]["busy"], false, "{pass}");
    }
    let (_, ready) = send(
        &api,
        empty(authed(Method::GET, "/api/admin/readiness", DAEMON_TOKEN)),
    )
    .await;
    assert!(ready["last_retention_pass_at"].is_string(), "{ready}");
    assert_eq!(
        ready["last_checkpoint_at"].is_string(),
        !postgres,
        "{ready}"
    );

    let (status, body) = send(
        &api,
        with_body(
            Method::POST,
            "/api/admin/retention/run",
            DAEMON_TOKEN,
            &json!({"archive_dir": "rel"}),
        ),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("validation_failed"))
    );

    let junk = crate::testing::TempDir::new("junk-archive");
    let file = junk.path().join("not.zip");
    std::fs::write(&file, "not a zip").expect("write");
    for (req, what) in [
        (json!({"file": "relative.zip"}), "a relative path"),
        (json!({"file": file.display().to_string()}), "no archive"),
        (json!({"file": "/nonexistent/a.zip"}), "no file"),
        (json!({"path": "/x.zip"}), "another field"),
    ] {
        let (status, body) = send(
            &api,
            with_body(
                Method::POST,
                "/api/admin/archives/restore",
                DAEMON_TOKEN,
                &req,
            ),
        )
        .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("validation_failed")),
            "{what}: {body}"
        );
    }
}

/// `GET /api/admin/cluster`: an admin's (the daemon token, an admin browser), not an
/// operator's; before the scheduler's loop has joined it, no member and term 0.
#[tokio::test]
async fn the_cluster_is_an_admins_to_read() {
    let api = api().await;
    let (status, cluster) = send(
        &api,
        empty(authed(Method::GET, "/api/admin/cluster", DAEMON_TOKEN)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{cluster}");
    let database = if crate::testing::on_postgres() {
        "postgres"
    } else {
        "sqlite"
    };
    assert_eq!(
        cluster,
        json!({"database": database, "term": 0, "leader": null, "leader_since": null,
            "answered_by": "lone", "failover_secs": 5, "members": []})
    );
    let operator = api.token_as(Role::Operator).await;
    let (status, body) = send(
        &api,
        empty(authed(Method::GET, "/api/admin/cluster", &operator).header(header::ORIGIN, APP)),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
    let admin = api.token_as(Role::Admin).await;
    let (status, _) = send(
        &api,
        empty(authed(Method::GET, "/api/admin/cluster", &admin).header(header::ORIGIN, APP)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

/// `POST /api/admin/epoch/rotate`: the daemon token's alone (an admin browser is
/// refused); once rotated, the browser's pairing answers `epoch_ended`.
#[tokio::test]
async fn only_the_daemon_token_rotates_the_epoch_and_it_ends_every_pairing() {
    let api = api().await;
    let admin = api.token_as(Role::Admin).await;
    let (status, body) = send(
        &api,
        empty(
            authed(Method::POST, "/api/admin/epoch/rotate", &admin)
                .header(header::ORIGIN, APP)
                .header(header::CONTENT_TYPE, "application/json"),
        ),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("daemon_token_required")),
        "{body}"
    );
    let before = api.authority.epoch();
    let (status, rotated) = send(
        &api,
        empty(
            authed(Method::POST, "/api/admin/epoch/rotate", DAEMON_TOKEN)
                .header(header::CONTENT_TYPE, "application/json"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    assert_eq!(rotated["previous"], before);
    assert_eq!(rotated["epoch"], api.authority.epoch());
    assert_ne!(rotated["epoch"], rotated["previous"]);
    let (status, body) = send(
        &api,
        empty(authed(Method::GET, "/api/admin/cluster", &admin).header(header::ORIGIN, APP)),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("epoch_ended")),
        "{body}"
    );
}
