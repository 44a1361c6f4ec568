//! A pairing outlives the browser session: the admission cookie carries the token's
//! remaining lifetime (`Max-Age`), so Chromium keeps it across a restart on the same
//! profile; and `studio sessions` lists each paired browser with when it expires.

use jiff::Timestamp;
use studio_api::{Sessions, app::BrowserPaired};
use studio_contract::ADMISSION_TTL_MS;
use studio_tests::{Reply, Studio, TempDir, browser::Browser};

use crate::{
    cockpit::{self, WAIT},
    pair,
};

/// Milliseconds since the Unix epoch of an RFC 3339 string.
fn ms(v: &str) -> i64 {
    v.parse::<Timestamp>()
        .ok()
        .unwrap_or_else(|| panic!("not an RFC 3339 instant: {v}"))
        .as_millisecond()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pairing_survives_a_browser_restart() {
    let studio = cockpit::start();
    let profile = TempDir::new("profile");
    let browser = Browser::start_with_profile(profile.path()).await;
    browser.goto(&studio.pair_url).await;
    browser
        .wait_for_attr("state-banner", "data-server-state", &["paired"], WAIT)
        .await;
    browser.quit().await;

    // Reopened on the same profile, the browser still holds its admission cookie: the
    // server renders the paired page at once, with no pairing link involved.
    let reopened = Browser::start_with_profile(profile.path()).await;
    reopened.goto(&studio.app_url("/devices")).await;
    let state = reopened.attr("state-banner", "data-server-state").await;
    assert_eq!(
        state.as_deref(),
        Some("paired"),
        "a browser restart lost the pairing"
    );
    reopened.wait_for_testid("device-current", WAIT).await;
    // The browser is named as its User-Agent says.
    let label = reopened.text_of("device-label").await.unwrap_or_default();
    assert!(
        label.contains("Chrome ") && label.ends_with(" on Linux"),
        "device label {label:?}"
    );
    // The row shows when this pairing ends, about 30 days on.
    let expires = reopened
        .execute(
            r#"return document.querySelector('[data-testid="device-expires"] time')
                   .getAttribute('datetime');"#,
            vec![],
        )
        .await;
    let left = ms(expires.as_str().unwrap_or_default()) - Timestamp::now().as_millisecond();
    assert!(
        (ADMISSION_TTL_MS - 10 * 60_000..=ADMISSION_TTL_MS).contains(&left),
        "expires {expires} is not 30 days on"
    );
    reopened.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_sessions_lists_the_paired_browser_with_its_expiry() {
    let studio = Studio::start();
    let resp = pair(&studio, &studio.first_code()).await;
    let set_cookie = resp
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body: BrowserPaired = Reply::of(resp).await.expect(200);
    let expires_at = body.expires_at.as_deref().expect("expires_at");
    // The cookie lives exactly as long as the token has left, in whole seconds.
    let max_age: i64 = set_cookie
        .split("; ")
        .find_map(|a| a.strip_prefix("Max-Age="))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no Max-Age in {set_cookie:?}"));
    let left = ms(expires_at) - Timestamp::now().as_millisecond();
    assert!(
        max_age * 1000 <= left + 1000 && max_age * 1000 > left - 60_000,
        "Max-Age={max_age} s against {left} ms left"
    );

    let out = studio.cli(&["sessions", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Sessions = serde_json::from_slice(&out.stdout).expect("JSON");
    let sessions = &listed.sessions;
    assert_eq!(sessions.len(), 1, "{listed:?}");
    let s = &sessions[0];
    assert_eq!(s.id, body.principal);
    assert_eq!(s.origin, studio.app_origin());
    assert_eq!(s.expires_at, expires_at);
    assert_eq!(ms(&s.expires_at) - ms(&s.created_at), ADMISSION_TTL_MS);
    assert_eq!(s.revoked_at, None);
    // What it paired with, in words made from its User-Agent.
    assert_eq!(s.device.as_deref(), Some("Firefox 133 on Linux"));

    let out = studio.cli(&["sessions"]);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split("  ").collect();
    let header: Vec<&str> = header
        .iter()
        .map(|h| h.trim())
        .filter(|h| !h.is_empty())
        .collect();
    assert_eq!(
        header,
        [
            "ID",
            "ROLE",
            "DEVICE",
            "ORIGIN",
            "CREATED",
            "LAST SEEN",
            "EXPIRES",
            "REVOKED"
        ],
        "{table}"
    );
    let row = lines.next().unwrap_or_default();
    let id = s.id.as_str();
    assert!(
        row.starts_with(id)
            && row.contains(" Firefox 133 on Linux ")
            && row.contains(" in 29d ")
            && row.ends_with(" -"),
        "{table}"
    );
}

/// `studio pair --role viewer` mints a link whose browser may read and not change: the
/// daemon refuses its writes through the app (`403 forbidden`, naming the role needed)
/// and `studio sessions` says its role; a bad role is a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_link_pairs_a_browser_that_reads_and_cannot_change() {
    let studio = Studio::start_with(&[("STUDIO_COMMAND_ALLOWLIST", "sh")]);
    let out = studio.cli(&["pair", "--role", "viewer"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let code = studio_tests::code_from_link(&text).expect("a link");
    let resp = pair(&studio, &code).await;
    let cookie = studio_tests::admission_cookie(&resp).expect("a cookie");
    let body: BrowserPaired = Reply::of(resp).await.expect(200);

    let client = studio_tests::http();
    let list = client
        .get(studio.app_url("/api/schedules"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("list");
    assert_eq!(list.status(), 200);
    let create = client
        .post(studio.app_url("/api/schedules"))
        .header("cookie", &cookie)
        .header("origin", studio.app_origin())
        .json(&studio_tests::api::command_spec(
            "etl/nightly",
            studio_tests::api::cron("0 3 * * *"),
            "true",
            &[],
        ))
        .send()
        .await
        .expect("create");
    let refused = Reply::of(create).await;
    assert_eq!(
        refused.code(),
        (403, studio_api::Code::Forbidden),
        "{refused}"
    );
    assert!(refused.to_string().contains("operator"), "{refused}");

    let out = studio.cli(&["sessions", "--json"]);
    let listed: Sessions = serde_json::from_slice(&out.stdout).expect("JSON");
    let mine = listed
        .sessions
        .iter()
        .find(|s| s.id == body.principal)
        .expect("listed");
    assert_eq!(mine.role, studio_api::Role::Viewer);

    // Made an operator from the terminal, the same browser may create at once (the app
    // drops what it cached of the old role); revoked, it may do nothing.
    let out = studio.cli(&["sessions", "role", &body.principal, "operator"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{} is now operator", body.principal)
    );
    let create = |name: &str| {
        client
            .post(studio.app_url("/api/schedules"))
            .header("cookie", &cookie)
            .header("origin", studio.app_origin())
            .json(&studio_tests::api::command_spec(
                name,
                studio_tests::api::cron("0 3 * * *"),
                "sh",
                &[],
            ))
            .send()
    };
    let made = Reply::of(create("etl/by-operator").await.expect("create")).await;
    assert_eq!(made.status, 201, "{made}");
    let out = studio.cli(&["sessions", "revoke", &body.principal]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = Reply::of(create("etl/after-revoke").await.expect("create")).await;
    assert_eq!(after.status, 401, "{after}");
    let out = studio.cli(&["sessions", "role", "nobody", "admin"]);
    assert_eq!(out.status.code(), Some(1));

    // The trail says who made the schedule, as what, from where; and the role change
    // and the revocation that followed.
    let out = studio.cli(&["audit", "--schedule", "etl/by-operator", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trail: studio_api::AuditPage = serde_json::from_slice(&out.stdout).expect("JSON");
    let [created] = &trail.entries[..] else {
        panic!("one row for the schedule: {trail:?}");
    };
    assert_eq!(created.kind, "schedule_created");
    assert_eq!(created.principal.as_deref(), Some(body.principal.as_str()));
    assert_eq!(created.role, Some(studio_api::Role::Operator));
    assert_eq!(
        created.origin.as_deref(),
        Some(studio.app_origin().as_str())
    );
    assert_eq!(created.detail["name"], "etl/by-operator");
    let out = studio.cli(&["audit", "--kind", "role_changed,session_revoked"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("role_changed") && table.contains("session_revoked"),
        "{table}"
    );

    let out = studio.cli(&["pair", "--role", "root"]);
    assert_eq!(out.status.code(), Some(2));

    // A viewer's browser is offered no change: a schedule's page has no action but a note.
    let made = client
        .post(studio.daemon_url("/api/schedules"))
        .bearer_auth(studio.token())
        .json(&studio_tests::api::command_spec(
            "etl/nightly",
            studio_tests::api::cron("0 3 * * *"),
            "sh",
            &[],
        ))
        .send()
        .await
        .expect("create");
    let made: studio_api::Schedule = Reply::of(made).await.expect(201);
    let out = studio.cli(&["pair", "--role", "viewer"]);
    let link = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("Studio is ready: "))
        .expect("a link")
        .to_owned();
    let browser = Browser::start().await;
    browser.goto(&link).await;
    browser
        .wait_for_attr("state-banner", "data-server-state", &["paired"], WAIT)
        .await;
    browser
        .goto(&studio.app_url(&format!("/schedules/{}", made.id)))
        .await;
    let note = browser.wait_for_text("role-note", "viewer", WAIT).await;
    assert!(note.contains("changes nothing"), "{note}");
    assert!(browser.try_find("schedule-trigger").await.is_none());
    assert!(browser.try_find("schedule-delete").await.is_none());

    // Its attention queue lists a failed run with its history, and no decision.
    let broken = client
        .post(studio.daemon_url("/api/schedules"))
        .bearer_auth(studio.token())
        .json(&studio_tests::api::command_spec(
            "etl/broken",
            studio_tests::api::cron("0 3 * * *"),
            "sh",
            &["-c", "exit 3"],
        ))
        .send()
        .await
        .expect("create");
    let broken: studio_api::Schedule = Reply::of(broken).await.expect(201);
    let run = client
        .post(studio.daemon_url(&format!("/api/schedules/{}/trigger", broken.id)))
        .bearer_auth(studio.token())
        .header("content-type", "application/json")
        .send()
        .await
        .expect("trigger");
    let run: studio_api::Run = Reply::of(run).await.expect(202);
    browser.goto(&studio.app_url("/attention")).await;
    let item = format!("run:{}", run.core.id);
    browser
        .wait_until(WAIT, "the failed run in the queue", || async {
            browser.refresh().await;
            browser
                .wait_for_attr("attention-list", "data-state", &["loaded"], WAIT)
                .await;
            browser
                .find_all_css(&format!(
                    r#"[data-testid="attention-item"][data-id="{item}"]"#
                ))
                .await
                .len()
                == 1
        })
        .await;
    assert!(browser.try_find("attention-history-toggle").await.is_some());
    for action in ["attention-ack", "attention-resolve", "attention-reason"] {
        assert!(browser.try_find(action).await.is_none(), "{action} offered");
    }
    browser.quit().await;
}
