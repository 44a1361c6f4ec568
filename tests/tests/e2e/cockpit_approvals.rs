//! Approvals in a real browser: a request appears live on `/approvals` with exactly what
//! will run, and a grant with a reason launches its run once; a denial ends the run
//! `denied`, which its page, open in another tab, then shows with its evidence, after the
//! overview, the run's page and the attention queue pointed at the request; a viewer is offered no decision; the
//! browser that asked for a run of a schedule whose requester may not approve is told so
//! in words, and nothing changes; the form sets the policy and an edit keeps or drops it.
//! Set-up and helpers are the cockpit tests'; what is asserted about storage is read
//! back through studiod's API.

use serde_json::json;
use studio_api::{
    ApprovalStatus, RunDetail, RunPage, RunStatus, Schedule,
    schedule::{ApprovalPolicy, ScheduleSpec},
};
use studio_tests::{
    Reply, Studio,
    api::{command_spec, cron},
    browser::Browser,
};

use super::cockpit::{Api, WAIT, open, paired_browser, start, wait_terminal};

/// A schedule that only runs when triggered, and then only once a person grants it.
fn gated(name: &str, distinct_from_requester: bool) -> ScheduleSpec {
    let mut spec = command_spec(name, cron("0 0 1 1 *"), "true", &["--target", "a b"]);
    spec.policies.approval = Some(ApprovalPolicy {
        required: true,
        expires_after: "15m".into(),
        distinct_from_requester,
    });
    spec
}

/// `GET path` on studiod with the daemon token, decoded.
async fn daemon_get<T: serde::de::DeserializeOwned>(studio: &Studio, path: &str) -> T {
    let url = studio.daemon_url(path);
    Reply::of(crate::get_with_token(studio, &url).await)
        .await
        .expect(200)
}

/// The card of the request for `run` on the Approvals page.
fn card(run: &str) -> String {
    format!(r#"[data-testid="approval"][data-run="{run}"]"#)
}

/// The run the browser landed on, from its address.
async fn run_in_address(browser: &Browser) -> String {
    let url = browser.current_url().await;
    url.rsplit_once("/runs/")
        .and_then(|(_, id)| id.split(['?', '#']).next())
        .unwrap_or_else(|| panic!("not on a run page: {url}"))
        .to_owned()
}

/// A mark that a reload of the page would wipe, and whether it is still there.
const MARK: &str = "window.__studioStayed = true; return true;";
const STAYED: &str = "return window.__studioStayed === true;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_appears_live_and_a_grant_with_a_reason_launches_its_run_once() {
    let studio = start();
    let api = Api::new(&studio);
    let schedule = api.create(&gated("deploy/prod", false)).await;
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/approvals", "approvals-empty").await;
    browser.execute(MARK, vec![]).await;

    let run = api.trigger(&schedule).await;
    let mine = card(&run);
    browser.wait_for_css(&mine, WAIT).await;
    assert_eq!(
        browser.execute(STAYED, vec![]).await,
        json!(true),
        "reloaded"
    );
    assert_eq!(
        browser.text_of("approval-command").await.as_deref(),
        Some("true --target 'a b'")
    );
    assert_eq!(
        browser
            .text_of("approval-requester")
            .await
            .map(|t| t.starts_with("daemon token")),
        Some(true)
    );
    browser
        .wait_for_text("nav-approvals-count", "1", WAIT)
        .await;
    // The countdown ticks, with the instant it counts to beside it.
    let before = browser
        .text_of("approval-countdown")
        .await
        .unwrap_or_default();
    assert!(before.ends_with(" s left"), "{before}");
    browser
        .wait_until(WAIT, "the countdown to tick", || async {
            browser
                .text_of("approval-countdown")
                .await
                .is_some_and(|t| t != before)
        })
        .await;
    assert!(browser.attr("approval-expires", "datetime").await.is_some());

    browser
        .fill("approval-reason", "release 4.2, checked")
        .await;
    // Another request arriving meanwhile renders the list again; what was typed stays.
    let other = api.create(&gated("deploy/staging", false)).await;
    let other_run = api.trigger(&other).await;
    browser.wait_for_css(&card(&other_run), WAIT).await;
    browser
        .wait_for_text("nav-approvals-count", "2", WAIT)
        .await;
    let reason = browser
        .wait_for_css(&format!(r#"{mine} [data-testid="approval-reason"]"#), WAIT)
        .await;
    assert_eq!(
        reason.prop("value").await.ok().flatten().as_deref(),
        Some("release 4.2, checked")
    );
    let grant = browser
        .wait_for_css(&format!(r#"{mine} [data-testid="approval-grant"]"#), WAIT)
        .await;
    grant.click().await.expect("press Grant");
    browser
        .wait_for_text("approvals-status", "Granted: run", WAIT)
        .await;
    let detail = wait_terminal(&api, &run).await;
    assert_eq!(detail.run.core.status, RunStatus::Completed);
    let [approval] = &detail.approvals[..] else {
        panic!("one request: {:?}", detail.approvals);
    };
    assert_eq!(approval.status, ApprovalStatus::Consumed);
    assert_eq!(approval.reason.as_deref(), Some("release 4.2, checked"));
    let runs: RunPage = daemon_get(&studio, &format!("/api/runs?schedule={schedule}")).await;
    assert_eq!(runs.runs.len(), 1, "launched once: {runs:?}");

    // The request leaves the pending list for the history, which names who decided.
    browser
        .wait_until(
            WAIT,
            "the granted request to leave the pending list",
            || async { browser.find_all_css(&mine).await.is_empty() },
        )
        .await;
    assert_eq!(browser.find_all_css(&card(&other_run)).await.len(), 1);
    let decided = format!(r#"[data-testid="decided-row"][data-id="{}"]"#, approval.id);
    // The row may first show the grant and then, live, its run's launch.
    browser
        .wait_until(WAIT, "the decided row to say the run launched", || async {
            match browser.find_all_css(&decided).await.first() {
                Some(row) => row
                    .text()
                    .await
                    .unwrap_or_default()
                    .contains("granted, its run launched"),
                None => false,
            }
        })
        .await;
    let row = browser.wait_for_css(&decided, WAIT).await;
    let text = row.text().await.unwrap_or_default();
    assert!(text.contains("granted, its run launched"), "{text}");
    assert!(text.contains("release 4.2, checked"), "{text}");
    assert!(text.contains("(this browser) (admin)"), "{text}");
    assert_eq!(
        browser.execute(STAYED, vec![]).await,
        json!(true),
        "reloaded"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_ends_the_run_denied_and_its_page_shows_the_request_and_evidence() {
    let studio = start();
    let api = Api::new(&studio);
    let schedule = api.create(&gated("db/migrate", false)).await;
    let run = api.trigger(&schedule).await;
    let browser = paired_browser(&studio).await;

    // The overview counts it, the attention queue lists it, the run's page points at it.
    open(&browser, &studio, "/", "approvals-summary").await;
    assert_eq!(
        browser.text_of("approvals-summary").await.as_deref(),
        Some("1 run waits for approval.")
    );
    open(&browser, &studio, "/attention", "attention-list").await;
    let item = browser
        .wait_for_css(
            &format!(r#"[data-testid="attention-item"][data-id="run:{run}"]"#),
            WAIT,
        )
        .await;
    let text = item.text().await.unwrap_or_default();
    assert!(text.contains("db/migrate: run awaits approval"), "{text}");
    let run_page = format!("/runs/{run}");
    open(&browser, &studio, &run_page, "run-awaiting").await;
    browser.click("run-decide").await;
    browser.wait_for_css(&card(&run), WAIT).await;

    // Another tab keeps the run's page open while this one decides.
    let client = browser.client();
    let deciding = client.window().await.expect("this tab");
    let watching = client.new_window(true).await.expect("a new tab").handle;
    client
        .switch_to_window(watching.clone())
        .await
        .expect("to the new tab");
    open(&browser, &studio, &run_page, "run-awaiting").await;
    browser.execute(MARK, vec![]).await;
    client
        .switch_to_window(deciding)
        .await
        .expect("back to the deciding tab");
    browser.click("approval-deny").await;
    browser
        .wait_for_text("approvals-status", "Denied: run", WAIT)
        .await;
    assert_eq!(
        wait_terminal(&api, &run).await.run.core.status,
        RunStatus::Denied
    );

    // The run's page reloaded itself with the outcome.
    client
        .switch_to_window(watching)
        .await
        .expect("to the run's tab");
    browser.wait_for_text("run-status", "denied", WAIT).await;
    assert_eq!(browser.execute(STAYED, vec![]).await, json!(false));
    browser.wait_for_testid("run-approvals", WAIT).await;
    assert_eq!(
        browser.text_of("run-status").await.as_deref(),
        Some("denied")
    );
    assert!(browser.try_find("run-awaiting").await.is_none());
    assert_eq!(
        browser.text_of("run-approval-status").await.as_deref(),
        Some("denied")
    );
    let decider = browser
        .text_of("run-approval-decider")
        .await
        .unwrap_or_default();
    assert!(decider.ends_with("(this browser)"), "{decider}");
    let kinds: Vec<String> = {
        let mut out = Vec::new();
        for e in browser.find_all("evidence-kind").await {
            out.push(e.text().await.unwrap_or_default());
        }
        out
    };
    assert_eq!(kinds, ["requested", "denied"]);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_sees_the_requests_and_is_offered_no_decision() {
    let studio = start();
    let api = Api::new(&studio);
    let schedule = api.create(&gated("deploy/prod", false)).await;
    let run = api.trigger(&schedule).await;
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

    open(&browser, &studio, "/approvals", "approval").await;
    browser.wait_for_css(&card(&run), WAIT).await;
    assert!(browser.text_of("approval-command").await.is_some());
    for offered in ["approval-grant", "approval-deny", "approval-reason"] {
        assert!(
            browser.try_find(offered).await.is_none(),
            "{offered} offered"
        );
    }
    browser.wait_for_text("role-note", "viewer", WAIT).await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_that_asked_for_a_run_is_told_it_may_not_grant_it() {
    let studio = start();
    let api = Api::new(&studio);
    let schedule = api.create(&gated("deploy/prod", true)).await;
    let browser = paired_browser(&studio).await;
    open(
        &browser,
        &studio,
        &format!("/schedules/{schedule}"),
        "schedule-trigger",
    )
    .await;
    browser.click("schedule-trigger").await;
    browser.wait_for_testid("run-awaiting", WAIT).await;
    let run = run_in_address(&browser).await;
    browser.click("run-decide").await;
    browser.wait_for_css(&card(&run), WAIT).await;
    browser
        .wait_for_text("approval-distinct", "This browser asked for this run", WAIT)
        .await;

    browser.fill("approval-reason", "looks fine to me").await;
    browser.click("approval-grant").await;
    let said = browser
        .wait_for_text("approval-result", "another person must", WAIT)
        .await;
    assert!(said.starts_with("Not granted: "), "{said}");
    let detail: RunDetail = api.run(&run).await;
    assert_eq!(detail.run.core.status, RunStatus::AwaitingApproval);
    assert_eq!(detail.approvals.len(), 1);
    assert_eq!(detail.approvals[0].status, ApprovalStatus::Pending);
    assert_eq!(
        browser.find_all_css(&card(&run)).await.len(),
        1,
        "still pending"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_form_sets_the_approval_policy_and_an_edit_keeps_or_drops_it() {
    let studio = start();
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/schedules/new", "schedule-form").await;
    browser.fill("field-name", "deploy/prod").await;
    browser.fill("field-cron", "30 2 * * *").await;
    browser.fill("field-executable", "true").await;
    let shown = |testid: &'static str| {
        let browser = &browser;
        async move {
            browser
                .execute(
                    "return !document.querySelector(`[data-testid='${arguments[0]}']`).closest('.field').hidden",
                    vec![json!(testid)],
                )
                .await
                == json!(true)
        }
    };
    assert!(
        !shown("field-approval-expires-after").await,
        "shown only when required"
    );
    browser.click("field-approval-required").await;
    assert!(shown("field-approval-expires-after").await);
    browser.fill("field-approval-expires-after", "15m").await;
    browser.click("field-approval-distinct").await;
    browser.click("schedule-submit").await;
    browser
        .wait_for_text("schedule-name", "deploy/prod", WAIT)
        .await;
    let listed: studio_api::SchedulePage = daemon_get(&studio, "/api/schedules").await;
    let id = listed.schedules[0].id.clone();
    let path = format!("/api/schedules/{id}");
    let made: Schedule = daemon_get(&studio, &path).await;
    assert_eq!(
        made.spec.policies.approval,
        Some(ApprovalPolicy {
            required: true,
            expires_after: "15m".into(),
            distinct_from_requester: true,
        })
    );

    // Untouched, an edit writes nothing; the boxes show the policy as stored.
    let edit = format!("/schedules/{id}/edit");
    open(&browser, &studio, &edit, "schedule-form").await;
    let checked = |testid: &'static str| {
        let browser = &browser;
        async move {
            browser
                .find(testid)
                .await
                .prop("checked")
                .await
                .ok()
                .flatten()
                .as_deref()
                == Some("true")
        }
    };
    assert!(checked("field-approval-required").await);
    assert!(checked("field-approval-distinct").await);
    browser.click("schedule-submit").await;
    browser
        .wait_for_text("schedule-name", "deploy/prod", WAIT)
        .await;
    let kept: Schedule = daemon_get(&studio, &path).await;
    assert_eq!(kept.revision, made.revision, "nothing was written");

    // Unticked, the policy goes; another edit of a schedule without one adds none.
    open(&browser, &studio, &edit, "schedule-form").await;
    browser.click("field-approval-required").await;
    browser.click("schedule-submit").await;
    browser
        .wait_until(WAIT, "the policy to go", || async {
            let now: Schedule = daemon_get(&studio, &path).await;
            now.revision > made.revision
        })
        .await;
    let dropped: Schedule = daemon_get(&studio, &path).await;
    assert_eq!(dropped.spec.policies.approval, None);
    open(&browser, &studio, &edit, "schedule-form").await;
    assert!(!checked("field-approval-required").await);
    browser.fill("field-description", "weekly").await;
    browser.click("schedule-submit").await;
    browser
        .wait_until(WAIT, "the description to be saved", || async {
            let now: Schedule = daemon_get(&studio, &path).await;
            now.spec.description == "weekly"
        })
        .await;
    let edited: Schedule = daemon_get(&studio, &path).await;
    assert_eq!(edited.spec.policies, dropped.spec.policies);
    browser.close().await;
}
