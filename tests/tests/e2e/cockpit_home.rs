//! The overview as a home page and the runs filters, in a real browser: what runs now
//! (its time ticking, a cancel button), what failed in the last 24 h with why, what
//! fires next, a chart bar that opens its hour's runs; filters by several statuses, a
//! name's part, a project and days, applied as they are chosen, with a way back.

use serde_json::json;
use studio_api::RunStatus;
use studio_tests::browser::Browser;

use super::cockpit::{Api, WAIT, open, paired_browser, sh, start, wait_terminal};

/// The ids of the rows the runs page shows now.
async fn run_names(browser: &Browser) -> Vec<String> {
    let mut names = Vec::new();
    for e in browser.find_all("run-schedule").await {
        names.push(e.text().await.unwrap_or_default());
    }
    names.sort();
    names
}

/// Waits until the address holds `needle` and the runs list has been rendered again.
async fn wait_for_url(browser: &Browser, needle: &str) {
    browser
        .wait_until(WAIT, &format!("an address with {needle}"), || async {
            browser.current_url().await.contains(needle)
        })
        .await;
    browser.wait_for_testid("runs-live", WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_shows_what_runs_failed_and_fires_next() {
    let studio = start();
    let api = Api::new(&studio);
    let slow = api.create(&sh("etl/load", "sleep 60")).await;
    let broken = api
        .create(&sh("etl/broken", "echo 'disk full on /var' >&2; exit 1"))
        .await;
    let failed = api.trigger(&broken).await;
    assert_eq!(
        wait_terminal(&api, &failed).await.run.core.status,
        RunStatus::Failed
    );
    let running = api.trigger(&slow).await;
    let browser = paired_browser(&studio).await;

    open(&browser, &studio, "/", "running-run").await;
    assert_eq!(
        browser.text_of("running-link").await.as_deref(),
        Some("etl/load")
    );
    // The elapsed time ticks in the page ("for 3 s").
    browser.wait_for_text("running-elapsed", "for ", WAIT).await;
    assert_eq!(
        browser.text_of("failed-link").await.as_deref(),
        Some("etl/broken")
    );
    assert_eq!(
        browser.text_of("failed-error-line").await.as_deref(),
        Some("disk full on /var")
    );
    let next = browser.text_of("up-next").await.unwrap_or_default();
    assert!(
        next.contains("etl/broken") && next.contains("etl/load"),
        "{next}"
    );
    // A failure while the page is open shows up in it, without a reload.
    browser
        .execute("window.__studioStayed = true; return true;", vec![])
        .await;
    let late = api
        .create(&sh("etl/late", "echo 'quota exceeded' >&2; exit 1"))
        .await;
    let late_run = api.trigger(&late).await;
    wait_terminal(&api, &late_run).await;
    browser
        .wait_for_css(
            &format!(r#"[data-testid="failed-run"][data-id="{late_run}"]"#),
            WAIT,
        )
        .await;
    assert_eq!(
        browser
            .execute("return window.__studioStayed === true;", vec![])
            .await,
        json!(true),
        "the overview reloaded"
    );
    // Cancel, from the lists as rendered again, after a question. The button reloads the
    // page once the run has ended: wait for that before clicking anything else, or the
    // reload may override a navigation the next click started.
    browser
        .execute("window.__studioBeforeCancel = true;", vec![])
        .await;
    browser.click("running-cancel").await;
    let asked = browser.accept_dialog(WAIT).await;
    assert!(asked.contains("etl/load"), "{asked}");
    assert_eq!(
        wait_terminal(&api, &running).await.run.core.status,
        RunStatus::Cancelled
    );
    browser
        .wait_until(WAIT, "the overview reloaded after the cancel", || async {
            browser
                .try_execute("return window.__studioBeforeCancel === undefined;")
                .await
                == Some(json!(true))
        })
        .await;
    browser.wait_for_testid("running-empty", WAIT).await;
    // The daemon's facts are out of the way, folded below.
    let open_facts = browser
        .execute(
            "return document.querySelector('[data-testid=daemon-facts]').open",
            vec![],
        )
        .await;
    assert_eq!(open_facts, json!(false));

    // This hour's bar opens this hour's runs: both are there.
    browser
        .execute(
            "const bars = document.querySelectorAll('[data-testid=chart-bar]'); \
             bars[bars.length - 1].dispatchEvent(new MouseEvent('click', {bubbles: true}));",
            vec![],
        )
        .await;
    wait_for_url(&browser, "until=").await;
    browser.wait_for_testid("filter-scope", WAIT).await;
    assert_eq!(
        run_names(&browser).await,
        ["etl/broken", "etl/late", "etl/load"]
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_filters_apply_as_chosen_and_clear() {
    let studio = start();
    let api = Api::new(&studio);
    for (name, script) in [
        ("etl/load", "true"),
        ("etl/broken", "exit 1"),
        ("web/ping", "true"),
        ("web/flaky", "exit 2"),
    ] {
        let schedule = api.create(&sh(name, script)).await;
        let run = api.trigger(&schedule).await;
        wait_terminal(&api, &run).await;
    }
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/runs", "run-row").await;
    assert_eq!(run_names(&browser).await.len(), 4);
    assert!(browser.try_find("filter-clear").await.is_none());

    // A status box applies as it is ticked; a second one adds to it.
    browser.click("filter-status-failed").await;
    wait_for_url(&browser, "status=failed").await;
    assert_eq!(run_names(&browser).await, ["etl/broken", "web/flaky"]);
    browser.click("filter-status-completed").await;
    wait_for_url(&browser, "status=completed").await;
    assert_eq!(run_names(&browser).await.len(), 4);
    let url = browser.current_url().await;
    assert!(
        !url.contains("q=&") && !url.contains("project=&"),
        "empty fields stay out of the address: {url}"
    );

    // The project box suggests every project, those of runs not on the page included.
    api.create(&sh("ml/train", "true")).await;
    browser.click("filter-project").await;
    browser.wait_for_css("#projects[data-loaded]", WAIT).await;
    let offered = browser
        .execute(
            "return [...document.querySelectorAll('#projects option')].map(o => [o.value, o.label]);",
            vec![],
        )
        .await;
    assert_eq!(
        offered,
        json!([
            ["etl", "2 schedules"],
            ["ml", "1 schedule"],
            ["web", "2 schedules"]
        ])
    );

    // A project, then a part of a name in any case (Enter applies a text box).
    browser.fill("filter-project", "web\u{E007}").await;
    wait_for_url(&browser, "project=web").await;
    assert_eq!(run_names(&browser).await, ["web/flaky", "web/ping"]);
    browser.fill("filter-q", "FLA\u{E007}").await;
    wait_for_url(&browser, "q=FLA").await;
    assert_eq!(run_names(&browser).await, ["web/flaky"]);

    // Days picked in the date boxes: tomorrow on has nothing, and says so.
    let tomorrow = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24))
        .strftime("%Y-%m-%d")
        .to_string();
    browser
        .execute(
            "const f = document.querySelector('[data-testid=filter-from]'); \
             f.value = arguments[0]; f.dispatchEvent(new Event('change', {bubbles: true}));",
            vec![json!(tomorrow)],
        )
        .await;
    wait_for_url(&browser, &format!("from={tomorrow}")).await;
    let empty = browser.text_of("runs-empty").await.unwrap_or_default();
    assert!(empty.contains("No runs match these filters"), "{empty}");

    // One click clears them all.
    browser.click("filter-clear").await;
    browser
        .wait_until(WAIT, "the plain runs page", || async {
            browser.current_url().await.ends_with("/runs")
        })
        .await;
    browser.wait_for_testid("run-row", WAIT).await;
    assert_eq!(run_names(&browser).await.len(), 4);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attention_groups_items_by_schedule_with_one_action_each() {
    let studio = start();
    let api = Api::new(&studio);
    let flaky = api.create(&sh("etl/flaky", "exit 1")).await;
    let other = api.create(&sh("web/down", "exit 2")).await;
    for schedule in [&flaky, &flaky, &other] {
        let run = api.trigger(schedule).await;
        wait_terminal(&api, &run).await;
    }
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/attention", "attention-group").await;
    let group = |id: &str| format!(r#"[data-testid="attention-group"][data-key="{id}"]"#);
    browser.wait_for_css(&group(&other), WAIT).await;
    // Two runs and the failing schedule under one name; one action covers all three.
    let items = browser
        .find_all_css(&format!(
            r#"{} [data-testid="attention-item"]"#,
            group(&flaky)
        ))
        .await;
    assert_eq!(items.len(), 3);
    // The navigation counts what the page lists.
    browser
        .wait_for_text("nav-attention-count", "5", WAIT)
        .await;
    let heading = browser
        .wait_for_css(&format!("{} h2", group(&flaky)), WAIT)
        .await
        .text()
        .await
        .unwrap_or_default();
    assert_eq!(heading, "etl/flaky · 3 items");
    let reason = browser
        .wait_for_css(r#"label[for$="-reason"]"#, WAIT)
        .await
        .text()
        .await
        .unwrap_or_default();
    assert_eq!(reason, "Reason (optional)");
    let all = browser
        .wait_for_css(
            &format!(r#"{} [data-testid="attention-group-ack"]"#, group(&flaky)),
            WAIT,
        )
        .await;
    assert_eq!(all.text().await.unwrap_or_default(), "Acknowledge all 3");
    all.click().await.expect("click");
    browser
        .wait_until(WAIT, "the acknowledged group to leave", || async {
            browser.try_find_css(&group(&flaky)).await.is_none()
        })
        .await;
    // The other schedule's items stay.
    assert_eq!(
        browser
            .find_all_css(&format!(
                r#"{} [data-testid="attention-item"]"#,
                group(&other)
            ))
            .await
            .len(),
        2
    );
    browser
        .wait_for_text("nav-attention-count", "2", WAIT)
        .await;
    // Every page's navigation says it (kept for a moment, not asked again per page).
    open(&browser, &studio, "/runs", "runs-live").await;
    browser
        .wait_for_text("nav-attention-count", "2", WAIT)
        .await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_a_theme_choice_and_a_runs_actions() {
    let studio = start();
    let api = Api::new(&studio);
    let schedule = api.create(&sh("etl/load", "exit 4")).await;
    let run = api.trigger(&schedule).await;
    wait_terminal(&api, &run).await;
    let browser = paired_browser(&studio).await;
    let key = |k: &'static str| {
        let browser = &browser;
        async move {
            browser
                .execute(
                    "document.body.dispatchEvent(new KeyboardEvent('keydown', \
                     {key: arguments[0], bubbles: true})); return true;",
                    vec![json!(k)],
                )
                .await;
        }
    };

    // "?" lists the shortcuts; "g r" goes to the runs, "/" to their search box.
    open(&browser, &studio, "/", "running-now").await;
    key("?").await;
    let help = browser.wait_for_testid("keys-help", WAIT).await;
    assert!(help.text().await.unwrap_or_default().contains("go to Runs"));
    key("?").await;
    key("g").await;
    key("r").await;
    browser.wait_for_testid("run-filters", WAIT).await;
    key("/").await;
    let focused = browser
        .execute("return document.activeElement.id", vec![])
        .await;
    assert_eq!(focused, json!("q"));

    // A run offers to run its schedule again, and to edit it.
    open(&browser, &studio, &format!("/runs/{run}"), "run-again").await;
    assert!(
        browser
            .attr("run-edit", "href")
            .await
            .unwrap_or_default()
            .ends_with(&format!("/schedules/{schedule}/edit"))
    );
    browser.click("run-again").await;
    browser
        .wait_until(WAIT, "the new run's page", || async {
            let url = browser.current_url().await;
            url.contains("/runs/") && !url.contains(&run)
        })
        .await;
    // The new run fails at once; its page reloads to say why. Wait for that page, so
    // the header's elements are the ones that stay.
    browser.wait_for_testid("run-why", WAIT).await;

    // The theme: auto, then dark, kept across pages.
    let theme = "return document.documentElement.dataset.theme || 'auto'";
    assert_eq!(browser.execute(theme, vec![]).await, json!("auto"));
    browser.click("theme-toggle").await;
    assert_eq!(browser.execute(theme, vec![]).await, json!("dark"));
    open(&browser, &studio, "/schedules", "schedules-live").await;
    assert_eq!(browser.execute(theme, vec![]).await, json!("dark"));
    let bg = browser
        .execute(
            "return getComputedStyle(document.body).backgroundColor",
            vec![],
        )
        .await;
    assert_eq!(bg, json!("rgb(21, 21, 21)"));
    assert_eq!(
        browser.text_of("theme-toggle").await.as_deref(),
        Some("Theme: dark")
    );
    browser.close().await;
}
