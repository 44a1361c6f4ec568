//! Pairing: single use, expiry, origin binding, epochs, rate limiting, revocation.

use std::time::Duration;

use serde_json::json;
use studio_tests::{Studio, admission_cookie, http, wait_for};

use crate::{get_with_cookie, get_with_token, json_of, pair, paired_cookie};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pairing_code_redeems_once() {
    let studio = Studio::start();
    let code = studio.first_code();
    let resp = pair(&studio, &code).await;
    let set_cookie: Vec<String> = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    let cookie = admission_cookie(&resp).expect("admission cookie");
    let (status, body) = json_of(resp).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["paired"], true);
    assert!(
        body["decision_token"]
            .as_str()
            .is_some_and(|t| t.len() >= 40)
    );
    assert!(body["epoch"].as_str().is_some_and(|e| e.len() == 32));
    assert!(body["principal"].is_string());
    assert!(
        body["decision_expires_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert!(
        body.get("token").is_none(),
        "the admission token stays out of page script"
    );
    let attrs = set_cookie.join("; ").to_ascii_lowercase();
    assert!(
        attrs.contains("httponly") && attrs.contains("samesite=strict"),
        "{attrs}"
    );
    assert!(
        !cookie.contains(&studio.token()),
        "the daemon token is never handed out"
    );

    let (status, body) = json_of(pair(&studio, &code).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (401, Some("pairing_code_invalid"))
    );

    let (status, body) = json_of(get_with_cookie(&studio, "/api/identity", &cookie).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["identity"], "studio");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_code_fails() {
    let studio = Studio::start_with(&[("STUDIO_PAIRING_TTL_SECS", "1")]);
    let code = studio.pair_code();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let (status, body) = json_of(pair(&studio, &code).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (401, Some("pairing_code_invalid"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_origin_is_refused_without_spending_the_code() {
    let studio = Studio::start();
    let code = studio.first_code();
    for origin in ["http://evil.example", "http://127.0.0.1:1", "null"] {
        let resp = http()
            .post(studio.app_url("/api/studio/pair"))
            .header("origin", origin)
            .json(&json!({ "code": code }))
            .send()
            .await
            .expect("request");
        let (status, body) = json_of(resp).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("origin_not_allowed")),
            "{origin}"
        );
    }
    let resp = http()
        .post(studio.app_url("/api/studio/pair"))
        .json(&json!({ "code": code }))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), 403, "pairing without an Origin is refused");
    let (status, _) = json_of(pair(&studio, &code).await).await;
    assert_eq!(status, 200, "the refused attempts did not spend the code");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_from_before_a_daemon_restart_fail_with_epoch_ended() {
    let studio = Studio::start();
    let cookie = paired_cookie(&studio).await;
    let unused_code = studio.pair_code();
    let old_pid = studio.child_pid("daemon");
    let old_epoch = studio.child("daemon")["epoch"].clone();

    let out = studio.cli(&["restart", "daemon"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    studio.wait_running("daemon", Some(old_pid), Duration::from_secs(20));
    let new_epoch = studio.child("daemon")["epoch"].clone();
    assert_ne!(old_epoch, new_epoch);

    let refused = wait_for(Duration::from_secs(10), || {
        let resp = futures_block(get_with_cookie(&studio, "/api/identity", &cookie));
        let (status, body) = futures_block(json_of(resp));
        (status == 401).then_some(body)
    })
    .expect("the old token is refused once the app sees the new epoch");
    assert_eq!(refused["code"], "epoch_ended");

    let (status, body) = json_of(pair(&studio, &unused_code).await).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("epoch_ended")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_redemptions_are_rate_limited() {
    let studio = Studio::start();
    let mut statuses = Vec::new();
    for i in 0..12 {
        let resp = pair(&studio, &format!("not-a-code-{i}")).await;
        statuses.push(resp.status().as_u16());
    }
    assert!(statuses[..10].iter().all(|s| *s == 401), "{statuses:?}");
    assert_eq!(statuses[11], 429, "{statuses:?}");
    let (status, body) = json_of(pair(&studio, &studio.first_code()).await).await;
    assert_eq!((status, body["code"].as_str()), (429, Some("rate_limited")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_session_is_refused_at_once_through_the_app() {
    let studio = Studio::start();
    let cookie = paired_cookie(&studio).await;
    for _ in 0..3 {
        // Warm the app's verdict cache: revocation must beat it.
        assert_eq!(
            get_with_cookie(&studio, "/api/identity", &cookie)
                .await
                .status(),
            200
        );
    }
    let (status, body) =
        json_of(get_with_token(&studio, &studio.app_url("/api/studio/sessions")).await).await;
    assert_eq!(status, 200, "{body}");
    let sessions = body["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 1, "{body}");
    let id = sessions[0]["id"].as_str().expect("id").to_owned();
    assert_eq!(sessions[0]["origin"], studio.app_origin());

    let resp = http()
        .delete(studio.app_url(&format!("/api/studio/sessions/{id}")))
        .bearer_auth(studio.token())
        .header("content-type", "application/json")
        .send()
        .await
        .expect("revoke");
    let (status, body) = json_of(resp).await;
    assert_eq!(status, 200, "{body}");

    let (status, body) = json_of(get_with_cookie(&studio, "/api/identity", &cookie).await).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("revoked")));

    let resp = http()
        .delete(studio.app_url("/api/studio/sessions/0190aaaa-0000-7000-8000-000000000000"))
        .bearer_auth(studio.token())
        .header("content-type", "application/json")
        .send()
        .await
        .expect("revoke unknown");
    let (status, body) = json_of(resp).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("session_not_found"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_revokes_the_callers_own_tokens_and_clears_the_cookie() {
    let studio = Studio::start();
    let mine = paired_cookie(&studio).await;
    let other = paired_cookie(&studio).await;
    let resp = http()
        .post(studio.app_url("/api/studio/disconnect"))
        .header("cookie", &mine)
        .header("origin", studio.app_origin())
        .header("content-type", "application/json")
        .send()
        .await
        .expect("disconnect");
    let cleared = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.starts_with("studio_admission=") && v.to_ascii_lowercase().contains("max-age=0")
        });
    let (status, body) = json_of(resp).await;
    assert_eq!(status, 200, "{body}");
    assert!(cleared, "disconnect clears the cookie");
    assert_eq!(
        get_with_cookie(&studio, "/api/identity", &mine)
            .await
            .status(),
        401
    );
    assert_eq!(
        get_with_cookie(&studio, "/api/identity", &other)
            .await
            .status(),
        200
    );
}

/// Runs a future to completion from synchronous polling code inside a test.
fn futures_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}
