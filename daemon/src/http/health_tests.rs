//! `/metrics` answers the machine's owner only; readiness answers an admin with its
//! figures and a committed probe write.

use http::{Method, StatusCode, header};
use studio_contract::role::Role;

use super::{APP, api, authed, empty};
use crate::testing::DAEMON_TOKEN;

#[tokio::test]
async fn metrics_answer_the_daemon_token_only_and_readiness_an_admin() {
    let api = api().await;
    let answer = tower::ServiceExt::oneshot(
        api.router.clone(),
        empty(authed(Method::GET, "/metrics", DAEMON_TOKEN)),
    )
    .await
    .expect("infallible");
    assert_eq!(answer.status(), StatusCode::OK);
    let headers = answer.headers().clone();
    let text = axum::body::to_bytes(answer.into_body(), usize::MAX)
        .await
        .expect("body");
    assert!(
        String::from_utf8_lossy(&text).contains("# TYPE studio_fires counter"),
        "{text:?}"
    );
    assert!(
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/openmetrics-text")),
        "{headers:?}"
    );
    // A browser's admin session, directly or with its Origin: refused.
    let admin = api.token_as(Role::Admin).await;
    for req in [
        empty(authed(Method::GET, "/metrics", &admin)),
        empty(authed(Method::GET, "/metrics", &admin).header(header::ORIGIN, APP)),
        empty(authed(Method::GET, "/metrics", DAEMON_TOKEN).header(header::ORIGIN, APP)),
    ] {
        let (status, _, body) = api.send(req).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("daemon_token_required")),
            "{body}"
        );
    }
    let (status, _, ready) = api
        .send(empty(
            authed(Method::GET, "/api/admin/readiness", &admin).header(header::ORIGIN, APP),
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    assert_eq!(ready["ready"], true, "{ready}");
    assert_eq!(ready["store_writable"], true);
    let viewer = api.token_as(Role::Viewer).await;
    let (status, _, _) = api
        .send(empty(
            authed(Method::GET, "/api/admin/readiness", &viewer).header(header::ORIGIN, APP),
        ))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_backup_is_the_machine_owners_and_never_overwrites() {
    let api = api().await;
    let post = |token: &str, body: serde_json::Value| {
        authed(Method::POST, "/api/admin/backup", token)
            .header(header::CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(body.to_string()))
            .expect("request")
    };
    let out = crate::testing::TempDir::new("backup-out");
    let dir = out.path().join("b").display().to_string();
    let admin = api.token_as(Role::Admin).await;
    let (status, _, body) = api
        .send(post(&admin, serde_json::json!({ "dir": dir })))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("daemon_token_required"))
    );
    assert!(!out.path().join("b").exists(), "nothing was written");
    let (status, _, body) = api
        .send(post(
            DAEMON_TOKEN,
            serde_json::json!({ "dir": "relative/dir" }),
        ))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _, made) = api
        .send(post(DAEMON_TOKEN, serde_json::json!({ "dir": dir })))
        .await;
    if crate::testing::on_postgres() {
        // The state is the server's: its backups are pg_dump's, not a file of the home.
        assert_eq!(status, StatusCode::CONFLICT, "{made}");
        assert!(
            made["message"]
                .as_str()
                .is_some_and(|m| m.contains("pg_dump")),
            "{made}"
        );
        return;
    }
    assert_eq!(status, StatusCode::OK, "{made}");
    assert_eq!(made["file"], "state.db");
    assert_eq!(made["sha256"].as_str().map(str::len), Some(64));
    let on_disk =
        studio_contract::secret::sha256_file(&out.path().join("b/state.db")).expect("the copy");
    assert_eq!(made["sha256"], on_disk.as_str());
    let (status, _, again) = api
        .send(post(DAEMON_TOKEN, serde_json::json!({ "dir": dir })))
        .await;
    assert_eq!(
        (status, again["code"].as_str()),
        (StatusCode::CONFLICT, Some("conflict"))
    );
}
