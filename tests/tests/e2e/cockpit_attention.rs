//! The attention page's snooze, history and hidden items in a real browser: a snooze
//! refused for an "until" in the past says so next to the field; a snooze with a reason
//! and an "until" takes the item out of the queue and into the hidden count; "show
//! hidden" lists it as snoozed with its until; its history holds the snooze; clearing it
//! brings it back, and the overview counts it again. Set-up and helpers are the cockpit
//! tests'.

use jiff::Timestamp;
// WebDriver script arguments are JSON values: the browser's protocol, not the API.
use serde_json::json;
use studio_api::app::{AttentionItem, AttentionList, Decision};
use studio_tests::{Reply, browser::Browser};

use super::cockpit::{Api, WAIT, open, paired_browser, sh, start, wait_terminal};
use super::{get_with_cookie, paired_cookie};

/// `[data-testid=<testid>]` inside the item `item` (a CSS selector).
fn within(item: &str, testid: &str) -> String {
    format!(r#"{item} [data-testid="{testid}"]"#)
}

async fn click_css(browser: &Browser, css: &str) {
    let e = browser.wait_for_css(css, WAIT).await;
    e.click()
        .await
        .unwrap_or_else(|err| panic!("click {css}: {err}"));
}

async fn text_css(browser: &Browser, css: &str) -> String {
    let e = browser.wait_for_css(css, WAIT).await;
    e.text().await.unwrap_or_default()
}

async fn attr_css(browser: &Browser, css: &str, name: &str) -> Option<String> {
    let e = browser.wait_for_css(css, WAIT).await;
    e.attr(name).await.ok().flatten()
}

/// Sets a field's value as a person choosing it would (an `input` event follows).
async fn set_value(browser: &Browser, css: &str, value: &str) {
    browser
        .execute(
            "const e = document.querySelector(arguments[0]); e.value = arguments[1]; \
             e.dispatchEvent(new Event('input', { bubbles: true }));",
            vec![json!(css), json!(value)],
        )
        .await;
}

/// Waits for the list to have loaded the view `all` asks for.
async fn wait_loaded(browser: &Browser, all: bool) {
    let want = all.to_string();
    browser
        .wait_until(
            WAIT,
            &format!("the list loaded with all={want}"),
            || async {
                let list = browser.try_find("attention-list").await;
                let Some(list) = list else { return false };
                list.attr("data-state").await.ok().flatten().as_deref() == Some("loaded")
                    && list.attr("data-all").await.ok().flatten().as_deref() == Some(want.as_str())
            },
        )
        .await;
}

/// The item as the app's API lists it (hidden ones included), read with its own pairing.
async fn api_item(studio: &studio_tests::Studio, cookie: &str, id: &str) -> AttentionItem {
    let body: AttentionList =
        Reply::of(get_with_cookie(studio, "/api/app/attention?all=true", cookie).await)
            .await
            .expect(200);
    body.items
        .iter()
        .find(|i| i.id == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} is not listed: {body:?}"))
}

fn instant(text: &str) -> Timestamp {
    text.parse()
        .unwrap_or_else(|e| panic!("{text:?} is not an instant: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snoozed_item_is_hidden_shown_on_request_with_its_history_and_cleared_back() {
    let studio = start();
    let api = Api::new(&studio);
    let schedule = api.create(&sh("flaky", "echo broken >&2; exit 3")).await;
    let run = api.trigger(&schedule).await;
    wait_terminal(&api, &run).await;
    let id = format!("run:{run}");
    let item = format!(r#"[data-testid="attention-item"][data-id="{id}"]"#);
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/attention", "attention-item").await;
    browser.wait_for_css(&item, WAIT).await;
    wait_loaded(&browser, false).await;
    browser
        .wait_for_text("attention-hidden-count", "Nothing hidden", WAIT)
        .await;

    // The snooze form opens on the "until" field.
    let toggle = within(&item, "attention-snooze-toggle");
    click_css(&browser, &toggle).await;
    assert_eq!(
        attr_css(&browser, &toggle, "aria-expanded")
            .await
            .as_deref(),
        Some("true")
    );
    let focused = browser
        .execute("return document.activeElement.dataset.testid || ''", vec![])
        .await;
    assert_eq!(focused, json!("attention-snooze-until"));

    // An "until" in the past: the API's words next to the field, and the item stays.
    let until = within(&item, "attention-snooze-until");
    let reason = "waiting for the mirror to come back";
    browser
        .wait_for_css(&within(&item, "attention-reason"), WAIT)
        .await
        .send_keys(reason)
        .await
        .expect("type the reason");
    set_value(&browser, &until, "2001-02-03T04:05").await;
    click_css(&browser, &within(&item, "attention-snooze")).await;
    let error = text_css(&browser, &within(&item, "attention-error-until")).await;
    assert!(error.contains("must be in the future"), "{error}");
    assert_eq!(
        attr_css(&browser, &until, "aria-invalid").await.as_deref(),
        Some("true")
    );
    browser.wait_for_css(&item, WAIT).await;

    // "in 1 day" fills the field with the viewer's wall clock a day from now.
    click_css(&browser, &within(&item, "attention-snooze-1d")).await;
    let chosen = browser
        .execute(
            "const v = document.querySelector(arguments[0]).value; \
             return [v, new Date(v).toISOString(), new Date(v) - Date.now()];",
            vec![json!(until)],
        )
        .await;
    let expected = instant(chosen[1].as_str().expect("the chosen instant"));
    let ahead_ms = chosen[2].as_f64().expect("milliseconds ahead");
    assert!(
        (86_300_000.0..=86_500_000.0).contains(&ahead_ms),
        "a day ahead: {chosen}"
    );
    click_css(&browser, &within(&item, "attention-snooze")).await;

    // It leaves the queue and is counted as hidden.
    browser
        .wait_until(WAIT, "the snoozed item to leave the queue", || async {
            browser.try_find_css(&item).await.is_none()
        })
        .await;
    wait_loaded(&browser, false).await;
    browser
        .wait_for_text("attention-hidden-count", "1 hidden", WAIT)
        .await;
    browser
        .wait_for_text("attention-status", "snoozed", WAIT)
        .await;
    // The instant the API holds is the one chosen in the viewer's zone.
    let cookie = paired_cookie(&studio).await;
    let listed = api_item(&studio, &cookie, &id).await;
    assert!(listed.hidden, "{listed:?}");
    let disposition = listed.disposition.as_ref().expect("a disposition");
    assert_eq!(disposition.state, Decision::Snoozed, "{listed:?}");
    assert_eq!(disposition.reason, reason, "{listed:?}");
    let held = instant(disposition.until.as_deref().expect("until"));
    assert_eq!(held, expected, "{listed:?}");

    // "Show hidden" lists it, marked, with its disposition and until.
    click_css(&browser, r#"[data-testid="attention-show-hidden"]"#).await;
    wait_loaded(&browser, true).await;
    assert!(browser.current_url().await.contains("all=true"));
    let hidden = format!(r#"{item}[data-hidden="true"]"#);
    browser.wait_for_css(&hidden, WAIT).await;
    let said = text_css(&browser, &within(&hidden, "attention-disposition")).await;
    assert!(said.contains("snoozed") && said.contains(reason), "{said}");
    let shown_until = within(&hidden, "attention-until");
    let datetime = attr_css(&browser, &shown_until, "datetime")
        .await
        .expect("a datetime");
    assert_eq!(instant(&datetime), expected);
    let title = attr_css(&browser, &shown_until, "title")
        .await
        .unwrap_or_default();
    assert!(title.ends_with(" UTC"), "{title}");

    // Its history holds the snooze: who, what, until, why.
    click_css(&browser, &within(&hidden, "attention-history-toggle")).await;
    browser
        .wait_for_css(
            &format!(r#"{hidden} [data-testid="attention-history"][data-state="loaded"]"#),
            WAIT,
        )
        .await;
    let entry = format!(
        r#"{hidden} [data-testid="attention-history-entry"][data-op="put"][data-state="snoozed"]"#
    );
    let text = text_css(&browser, &entry).await;
    assert!(text.contains(reason) && text.contains("until"), "{text}");
    let by = disposition.by.as_str();
    assert!(text.contains(by), "{text} names {by}");

    // On a narrow window nothing runs off the side.
    browser
        .client()
        .set_window_size(420, 900)
        .await
        .expect("narrow the window");
    let overflow = browser
        .execute(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
            vec![],
        )
        .await;
    assert!(overflow.as_i64().is_some_and(|px| px <= 0), "{overflow}");
    browser
        .client()
        .set_window_size(1280, 900)
        .await
        .expect("widen the window");

    // Clearing returns it to the queue.
    click_css(&browser, &within(&hidden, "attention-clear")).await;
    browser
        .wait_for_css(&format!(r#"{item}[data-hidden="false"]"#), WAIT)
        .await;
    wait_loaded(&browser, true).await;
    browser
        .wait_for_text("attention-hidden-count", "Nothing hidden", WAIT)
        .await;
    click_css(&browser, r#"[data-testid="attention-show-hidden"]"#).await;
    wait_loaded(&browser, false).await;
    browser.wait_for_css(&item, WAIT).await;
    let listed = api_item(&studio, &cookie, &id).await;
    assert!(!listed.hidden, "{listed:?}");
    assert_eq!(listed.disposition, None, "{listed:?}");

    // The overview counts what needs attention now (the run and its failing schedule).
    open(&browser, &studio, "/", "attention-summary").await;
    browser
        .wait_for_text("attention-summary", "2 items need attention now", WAIT)
        .await;
    browser.close().await;
}
