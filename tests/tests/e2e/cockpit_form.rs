//! The schedule form's "Advanced" section in a real browser: environment, policies and
//! follow-ups are created through the form, their API errors sit next to their controls,
//! and saving an untouched edit leaves the stored spec and its revision as they were.
//! What is asserted about storage is read back through studiod's API.

use serde_json::{Value, json};
use studio_tests::{Studio, browser::Browser};

use crate::cockpit::{Api, WAIT, open, paired_browser, start};

/// A schedule as studiod serves it, by id (the daemon token as bearer).
async fn schedule(studio: &Studio, id: &str) -> Value {
    let url = studio.daemon_url(&format!("/api/schedules/{id}"));
    let (status, body) = crate::json_of(crate::get_with_token(studio, &url).await).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Every schedule studiod holds.
async fn schedules(studio: &Studio) -> Vec<Value> {
    let url = studio.daemon_url("/api/schedules");
    let (status, body) = crate::json_of(crate::get_with_token(studio, &url).await).await;
    assert_eq!(status, 200, "{body}");
    body["schedules"].as_array().cloned().unwrap_or_default()
}

/// Whether the element with `data-testid="<error>"` sits in the same field box as the
/// control `data-testid="<control>"`, and that control is marked invalid.
async fn error_beside(browser: &Browser, error: &str, control: &str) -> bool {
    let found = browser
        .execute(
            r#"const [error, control] = arguments;
               const e = document.querySelector(`[data-testid="${error}"]`);
               const box = e && e.closest('.field');
               const c = box && box.querySelector(`[data-testid="${control}"]`);
               return !!c && c.getAttribute('aria-invalid') === 'true'
                 && (c.getAttribute('aria-describedby') || '').split(' ').includes(e.id);"#,
            vec![json!(error), json!(control)],
        )
        .await;
    found == json!(true)
}

async fn advanced_is_open(browser: &Browser) -> bool {
    browser.attr("advanced", "open").await.is_some()
}

/// A field's current value.
async fn value_of(browser: &Browser, testid: &str) -> String {
    browser
        .find(testid)
        .await
        .prop("value")
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_a_policy_and_a_follow_up_are_created_through_the_form() {
    let studio = start();
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/schedules/new", "schedule-form").await;
    browser.fill("field-name", "with-extras").await;
    browser.fill("field-cron", "30 2 * * *").await;
    browser.fill("field-executable", "sh").await;
    browser.fill("field-args", "-c\necho \"$MODE\"").await;
    assert!(
        !advanced_is_open(&browser).await,
        "a new schedule starts calm"
    );
    browser.click("advanced-summary").await;
    browser
        .fill("field-env", "MODE=full\nGREETING=hello world")
        .await;
    browser.fill("field-overlap", "replace").await;
    browser.fill("field-deadline", "600").await;
    browser.fill("field-on-fail-kind", "command").await;
    browser.fill("field-on-fail-executable", "sh").await;
    browser.fill("field-on-fail-args", "-c\necho failed").await;
    browser.click("schedule-submit").await;
    browser
        .wait_for_text("schedule-name", "with-extras", WAIT)
        .await;

    let all = schedules(&studio).await;
    assert_eq!(all.len(), 1, "{all:?}");
    let spec = &all[0]["spec"];
    assert_eq!(
        spec["env"],
        json!({"MODE": "full", "GREETING": "hello world"})
    );
    assert_eq!(
        spec["policies"],
        json!({"missed_fire": "skip", "overlap": "replace", "deadline": 600}),
        "untouched policies stay at their defaults"
    );
    assert_eq!(
        spec["on_fail"],
        json!({"action": {"kind": "command", "executable": "sh", "args": ["-c", "echo failed"]}})
    );
    assert!(spec.get("on_success").is_none(), "{spec}");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_error_is_shown_next_to_its_control() {
    let studio = start();
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/schedules/new", "schedule-form").await;
    browser.fill("field-name", "refused").await;
    browser.fill("field-cron", "30 2 * * *").await;
    browser.fill("field-executable", "reindex").await;
    browser.click("advanced-summary").await;
    browser.fill("field-deadline", "0").await;
    browser.fill("field-env", "STUDIO_RUN_ID=mine").await;
    // Closed again before saving: an error inside opens the section by itself.
    browser.click("advanced-summary").await;
    assert!(!advanced_is_open(&browser).await);
    browser.click("schedule-submit").await;

    let error = browser.wait_for_testid("error-deadline", WAIT).await;
    let message = error.text().await.expect("error text");
    assert!(message.contains("at least 1 second"), "{message:?}");
    assert!(
        error_beside(&browser, "error-deadline", "field-deadline").await,
        "the daemon's message sits in the deadline's box and describes it"
    );
    assert!(
        advanced_is_open(&browser).await,
        "the error opened its section"
    );
    let env = browser
        .wait_for_text("error-env", "STUDIO_RUN_ID", WAIT)
        .await;
    assert!(env.contains("runner"), "{env:?}");
    assert!(error_beside(&browser, "error-env", "field-env").await);
    // Off the allow-list: the exact command that allows it, beside the executable.
    let exe = browser
        .wait_for_text("error-executable", "studio allow add reindex", WAIT)
        .await;
    assert!(exe.contains("terminal"), "{exe:?}");
    assert!(error_beside(&browser, "error-executable", "field-executable").await);
    assert!(schedules(&studio).await.is_empty(), "nothing was created");

    // Half a rate limit is refused before anything is sent, next to the missing half.
    browser.fill("field-executable", "true").await;
    browser.fill("field-deadline", "600").await;
    browser.fill("field-env", "MODE=ok").await;
    browser.fill("field-max-fires", "3").await;
    browser.click("schedule-submit").await;
    browser
        .wait_for_text("error-window-seconds", "both", WAIT)
        .await;
    assert!(browser.try_find("error-deadline").await.is_none());
    assert!(error_beside(&browser, "error-window-seconds", "field-window-seconds").await);

    browser.fill("field-window-seconds", "60").await;
    browser.click("schedule-submit").await;
    browser
        .wait_for_text("schedule-name", "refused", WAIT)
        .await;
    let all = schedules(&studio).await;
    assert_eq!(
        all[0]["spec"]["policies"]["rate_limit"],
        json!({"max_fires": 3, "window_seconds": 60})
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saving_an_untouched_edit_keeps_the_spec_and_its_revision() {
    let studio = start();
    let api = Api::new(&studio);
    // Every field set, some in ways the form would not write them (padded arguments, a
    // chain below the follow-up): untouched, each must survive as stored.
    let id = api
        .create(&json!({
            "name": "everything", "description": "all fields",
            "trigger": {"cron": {"expression": "0 3 * * *", "timezone": "Europe/Berlin"}},
            "action": {"kind": "command", "executable": "sh", "args": ["-c", " echo  padded "]},
            "cwd": "/tmp",
            "env": {"MODE": "full", "PADDED": " kept ", "QUERY": "a=b"},
            "policies": {"missed_fire": "run_once", "overlap": "allow", "max_runs": 5,
                         "deadline": 600, "budget_usd": 2.5,
                         "rate_limit": {"max_fires": 3, "window_seconds": 60}},
            "on_success": {"action": {"kind": "agent", "prompt": "summarise", "model": "large", "profile": "ops"},
                           "on_fail": {"action": {"kind": "command", "executable": "false"}}},
            "on_fail": {"action": {"kind": "command", "executable": "true", "args": ["failed"]}},
        }))
        .await;
    let before = schedule(&studio, &id).await;
    let browser = paired_browser(&studio).await;
    let edit = format!("/schedules/{id}/edit");

    open(&browser, &studio, &edit, "schedule-form").await;
    assert!(advanced_is_open(&browser).await, "set fields are on show");
    assert_eq!(value_of(&browser, "field-deadline").await, "600");
    assert_eq!(value_of(&browser, "field-overlap").await, "allow");
    assert_eq!(value_of(&browser, "field-on-success-model").await, "large");
    browser.wait_for_testid("on-success-chain", WAIT).await;
    browser.click("schedule-submit").await;
    browser
        .wait_for_text("schedule-name", "everything", WAIT)
        .await;
    let after = schedule(&studio, &id).await;
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(after["revision"], before["revision"], "nothing was written");

    // One field changed and one cleared: only they move; the rest stays as stored.
    open(&browser, &studio, &edit, "schedule-form").await;
    browser.fill("field-description", "edited").await;
    browser.fill("field-deadline", "").await;
    browser.click("schedule-submit").await;
    browser
        .wait_until(WAIT, "the saved schedule's page", || async {
            browser
                .current_url()
                .await
                .ends_with(&format!("/schedules/{id}"))
        })
        .await;
    browser
        .wait_for_text("schedule-name", "everything", WAIT)
        .await;
    let edited = schedule(&studio, &id).await;
    let mut want = before["spec"].clone();
    want["description"] = json!("edited");
    want["policies"]
        .as_object_mut()
        .expect("policies")
        .remove("deadline");
    assert_eq!(edited["spec"], want);
    assert_eq!(
        edited["revision"].as_i64(),
        before["revision"].as_i64().map(|r| r + 1)
    );
    browser.close().await;
}
