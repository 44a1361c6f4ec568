//! A failed run in a real browser, as a daily user meets it: the run page leads with its
//! schedule's name and a status mark, says why it failed above the fold (the outcome in
//! words, the last lines of the stream that holds the error, a link to the full log) and
//! opens its log on that stream; a run that never started shows its launch error; the
//! runs list leads with names and shows the error line; the attention item carries it
//! too. Set-up and helpers are the cockpit tests'.

use serde_json::json;
use studio_api::RunStatus;
use studio_tests::{
    Studio,
    api::{command_spec, cron},
    browser::Browser,
};

use super::cockpit::{Api, WAIT, open, paired_browser, sh, wait_terminal};

/// Whether the element with `testid` lies wholly inside the viewport as the page opens.
async fn above_the_fold(browser: &Browser, testid: &str) -> bool {
    let script = "const e = document.querySelector(`[data-testid='${arguments[0]}']`); \
                  if (!e) return false; const r = e.getBoundingClientRect(); \
                  return r.top >= 0 && r.bottom <= window.innerHeight;";
    browser.execute(script, vec![json!(testid)]).await == json!(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_says_why_at_the_top_and_its_name_leads_everywhere() {
    let studio = Studio::start_with(&[("STUDIO_COMMAND_ALLOWLIST", "sh")]);
    let api = Api::new(&studio);
    let error = r#"ERROR: relation "sales_2026" does not exist"#;
    // Much more stdout than stderr: a log opened on stdout would not show the error.
    let script = format!(
        "for i in $(seq 1 400); do echo fetching sales, step $i; done; \
         echo 'connecting to the warehouse' >&2; echo '{error}' >&2; exit 3"
    );
    let schedule = api.create(&sh("reports/daily-sales", &script)).await;
    let run = api.trigger(&schedule).await;
    assert_eq!(
        wait_terminal(&api, &run).await.run.core.status,
        RunStatus::Failed
    );
    let browser = paired_browser(&studio).await;

    open(&browser, &studio, &format!("/runs/{run}"), "run-why").await;
    let title = browser
        .execute("return document.title", vec![])
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(title.starts_with("✗ reports/daily-sales · Run "), "{title}");
    let heading = browser.text_of("run-heading").await.unwrap_or_default();
    assert!(
        heading.starts_with("reports/daily-sales · run "),
        "{heading}"
    );
    assert!(!heading.contains(&run), "the id is shortened: {heading}");
    assert_eq!(
        browser.text_of("run-why-outcome").await.as_deref(),
        Some("exited with code 3")
    );
    let tail = browser.text_of("run-why-tail").await.unwrap_or_default();
    assert!(tail.ends_with(error), "{tail}");
    assert!(
        above_the_fold(&browser, "run-why-tail").await,
        "below the fold"
    );
    let log = browser
        .attr("run-why-log", "href")
        .await
        .unwrap_or_default();
    assert!(
        log.ends_with(&format!("/api/runs/{run}/log?stream=stderr")),
        "{log}"
    );
    // The log opens on the stream that holds the error.
    browser.wait_for_text("log-text", error, WAIT).await;
    assert_eq!(
        browser.attr("log-stderr", "aria-pressed").await.as_deref(),
        Some("true")
    );

    // The runs list leads with the name and shows the line.
    open(&browser, &studio, "/runs", "runs-table").await;
    let row = format!(r#"[data-testid="run-row"][data-id="{run}"]"#);
    let first = browser
        .wait_for_css(&format!("{row} td:first-child"), WAIT)
        .await;
    assert_eq!(
        first.text().await.unwrap_or_default(),
        "reports/daily-sales"
    );
    let line = browser
        .wait_for_css(&format!(r#"{row} [data-testid="run-error-line"]"#), WAIT)
        .await;
    assert_eq!(line.text().await.unwrap_or_default(), error);

    // So does the attention item for the failed run.
    open(&browser, &studio, "/attention", "attention-list").await;
    let item = browser
        .wait_for_css(
            &format!(r#"[data-testid="attention-item"][data-id="run:{run}"]"#),
            WAIT,
        )
        .await;
    let text = item.text().await.unwrap_or_default();
    assert!(
        text.contains(&format!("exited with code 3: {error}")),
        "{text}"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_never_started_shows_its_launch_error() {
    // `li` is allowed but is no program on studiod's PATH: the launch fails.
    let studio = Studio::start_with(&[("STUDIO_COMMAND_ALLOWLIST", "sh,li")]);
    let api = Api::new(&studio);
    let schedule = api
        .create(&command_spec("ai/summarize", cron("0 0 1 1 *"), "li", &[]))
        .await;
    let run = api.trigger(&schedule).await;
    let detail = wait_terminal(&api, &run).await;
    assert_eq!(detail.run.core.reason.as_deref(), Some("spawn_failed"));
    let stored = detail.run.core.error_line.clone().unwrap_or_default();
    assert!(
        stored.contains("li"),
        "the launch error is stored: {stored}"
    );

    let browser = paired_browser(&studio).await;
    open(&browser, &studio, &format!("/runs/{run}"), "run-why").await;
    let outcome = browser.text_of("run-why-outcome").await.unwrap_or_default();
    assert_eq!(outcome, format!("never started: {stored}"));
    assert!(
        above_the_fold(&browser, "run-why-outcome").await,
        "below the fold"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedules_list_shows_recent_runs_at_a_glance() {
    let studio = Studio::start_with(&[("STUDIO_COMMAND_ALLOWLIST", "sh")]);
    let api = Api::new(&studio);
    let flaky = api
        .create(&sh("etl/flaky", "echo 'disk full' >&2; exit 1"))
        .await;
    for _ in 0..2 {
        let run = api.trigger(&flaky).await;
        wait_terminal(&api, &run).await;
    }
    let gate = studio.home_path().join("go");
    let slow = api
        .create(&sh(
            "ml/train",
            &format!("while [ ! -e '{}' ]; do sleep 0.1; done", gate.display()),
        ))
        .await;
    let running = api.trigger(&slow).await;
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/schedules", "schedules-table").await;

    let row = |id: &str| format!(r#"[data-testid="schedule-row"][data-id="{id}"]"#);
    let marks = browser
        .find_all_css(&format!(r#"{} [data-testid="run-strip"] a"#, row(&flaky)))
        .await;
    assert_eq!(marks.len(), 2);
    for mark in &marks {
        assert_eq!(
            mark.attr("class").await.ok().flatten().as_deref(),
            Some("mark m-failed")
        );
        let title = mark.attr("title").await.ok().flatten().unwrap_or_default();
        assert!(
            title.starts_with("failed ") && title.ends_with(": disk full"),
            "{title}"
        );
        let href = mark.attr("href").await.ok().flatten().unwrap_or_default();
        assert!(href.contains("/runs/"), "{href}");
    }
    let latest = browser
        .wait_for_css(
            &format!(r#"{} [data-testid="schedule-latest"]"#, row(&flaky)),
            WAIT,
        )
        .await;
    let latest = latest.text().await.unwrap_or_default();
    assert!(
        latest.starts_with("failed ") && latest.ends_with(" ago") || latest == "failed now",
        "{latest}"
    );
    browser
        .wait_for_css(
            &format!(r#"{} [data-testid="schedule-running"]"#, row(&slow)),
            WAIT,
        )
        .await;
    let health = browser
        .wait_for_css(
            &format!(r#"{} [data-testid="health-badge"]"#, row(&slow)),
            WAIT,
        )
        .await;
    assert_eq!(
        health.text().await.unwrap_or_default(),
        "no finished run yet"
    );

    std::fs::write(&gate, b"").expect("open the gate");
    wait_terminal(&api, &running).await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_lists_follow_new_runs_without_a_reload() {
    let studio = Studio::start_with(&[("STUDIO_COMMAND_ALLOWLIST", "sh")]);
    let api = Api::new(&studio);
    let schedule = api.create(&sh("ops/cleanup", "exit 0")).await;
    let first = api.trigger(&schedule).await;
    wait_terminal(&api, &first).await;
    let browser = paired_browser(&studio).await;
    // A mark that a reload would wipe.
    let mark = "window.__studioStayed = true; return true;";
    let stayed = "return window.__studioStayed === true;";

    open(&browser, &studio, "/runs", "runs-table").await;
    browser.execute(mark, vec![]).await;
    let second = api.trigger(&schedule).await;
    browser
        .wait_for_css(
            &format!(r#"[data-testid="run-row"][data-id="{second}"]"#),
            WAIT,
        )
        .await;
    assert_eq!(
        browser.execute(stayed, vec![]).await,
        json!(true),
        "reloaded"
    );

    open(&browser, &studio, "/schedules", "schedules-table").await;
    browser.execute(mark, vec![]).await;
    let marks = format!(
        r#"[data-testid="schedule-row"][data-id="{schedule}"] [data-testid="run-strip"] a"#
    );
    wait_terminal(&api, &second).await;
    assert_eq!(browser.find_all_css(&marks).await.len(), 2);
    let third = api.trigger(&schedule).await;
    wait_terminal(&api, &third).await;
    browser
        .wait_until(WAIT, "a third mark on the strip", || async {
            browser.find_all_css(&marks).await.len() == 3
        })
        .await;
    assert_eq!(
        browser.execute(stayed, vec![]).await,
        json!(true),
        "reloaded"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_log_follows_its_output_and_the_clock_ticks() {
    let studio = Studio::start_with(&[("STUDIO_COMMAND_ALLOWLIST", "sh")]);
    let api = Api::new(&studio);
    let gate = studio.home_path().join("go");
    // A line every 50 ms, until the gate opens.
    let script = format!(
        "i=0; while [ ! -e '{}' ]; do i=$((i+1)); echo line $i; sleep 0.05; done",
        gate.display()
    );
    let mut spec = sh("ml/train", &script);
    spec.policies.deadline = Some(600);
    let schedule = api.create(&spec).await;
    let run = api.trigger(&schedule).await;
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, &format!("/runs/{run}"), "log-view").await;
    browser.wait_for_text("log-text", "line 40", WAIT).await;

    // At the bottom, it stays at the bottom as lines arrive.
    let at_bottom = "const t = document.getElementById('log-text'); \
                     return t.scrollHeight - t.scrollTop - t.clientHeight < 8;";
    browser.wait_for_text("log-text", "line 80", WAIT).await;
    assert_eq!(browser.execute(at_bottom, vec![]).await, json!(true));
    // Scrolled up, it stays put and offers the new output instead.
    browser
        .execute(
            "document.getElementById('log-text').scrollTop = 0; return true;",
            vec![],
        )
        .await;
    browser
        .wait_until(WAIT, "the new-output button", || async {
            browser
                .execute("return !document.getElementById('log-new').hidden;", vec![])
                .await
                == json!(true)
        })
        .await;
    assert_eq!(browser.execute(at_bottom, vec![]).await, json!(false));
    browser.click("log-new").await;
    assert_eq!(browser.execute(at_bottom, vec![]).await, json!(true));

    // The byte count, the elapsed time and the time left tick.
    let tab = browser.text_of("log-stdout").await.unwrap_or_default();
    assert!(
        tab.starts_with("stdout (") && !tab.contains("(0 B)"),
        "{tab}"
    );
    let clock = browser
        .wait_for_text("run-duration", "left before its deadline", WAIT)
        .await;
    assert!(clock.starts_with("running for "), "{clock}");
    // The stream is in the address.
    assert!(browser.current_url().await.contains("stream=stdout"));
    browser.click("log-stderr").await;
    browser
        .wait_until(WAIT, "the stream in the address", || async {
            browser.current_url().await.contains("stream=stderr")
        })
        .await;

    std::fs::write(&gate, b"").expect("open the gate");
    wait_terminal(&api, &run).await;

    // Numbered lines: an address naming one opens the log at it, marked; the number is
    // drawn beside the line, not part of its text.
    open(
        &browser,
        &studio,
        &format!("/runs/{run}?stream=stdout#L5"),
        "log-view",
    )
    .await;
    browser.wait_for_css("#L5.marked", WAIT).await;
    let line5 = "const l = document.getElementById('L5');                  return [l.textContent, getComputedStyle(l, '::before').content];";
    assert_eq!(
        browser.execute(line5, vec![]).await,
        json!(["line 5\n", "\"5\""])
    );
    // Search marks the lines that hold the text, in any case.
    browser.fill("log-find", "LINE 12").await;
    let found = browser.wait_for_text("log-found", "line", WAIT).await;
    let hits = browser
        .execute(
            "return [...document.querySelectorAll('#log-text .ln.hit')].map(l => l.textContent)",
            vec![],
        )
        .await;
    let hits: Vec<String> = serde_json::from_value(hits).unwrap_or_default();
    assert_eq!(
        hits.first().map(String::as_str),
        Some("line 12\n"),
        "{hits:?}"
    );
    assert!(hits.iter().all(|h| h.starts_with("line 12")), "{hits:?}");
    assert!(
        found.starts_with(&hits.len().to_string()) || hits.len() == 1,
        "{found}"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_says_what_it_waits_for() {
    let studio = Studio::start_with(&[
        ("STUDIO_COMMAND_ALLOWLIST", "sh"),
        ("STUDIO_MAX_CONCURRENT_RUNS", "1"),
    ]);
    let api = Api::new(&studio);
    let gate = studio.home_path().join("go");
    let script = format!("while [ ! -e '{}' ]; do sleep 0.05; done", gate.display());
    let mut spec = sh("etl/hold", &script);
    spec.policies.overlap = studio_api::schedule::Overlap::Allow;
    let schedule = api.create(&spec).await;
    let holding = api.trigger(&schedule).await;
    let started = std::time::Instant::now();
    while api.run(&holding).await.run.core.status != RunStatus::Running {
        assert!(started.elapsed() < WAIT, "the first run did not start");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let second = api.trigger(&schedule).await;
    let third = api.trigger(&schedule).await;

    let detail = api.run(&third).await;
    assert_eq!(detail.run.core.status, RunStatus::Queued);
    let place = detail.queue.expect("a queued run names its place");
    assert_eq!((place.running, place.slots, place.ahead), (1, 1, 1));
    let place = api.run(&second).await.queue.expect("queued");
    assert_eq!(place.ahead, 0);
    assert_eq!(
        api.run(&holding).await.queue,
        None,
        "a running run waits for nothing"
    );

    let browser = paired_browser(&studio).await;
    open(&browser, &studio, &format!("/runs/{third}"), "run-waiting").await;
    assert_eq!(
        browser.text_of("run-waiting").await.as_deref(),
        Some("waiting for a slot: 1 of 1 running, 1 queued before it")
    );
    browser.close().await;

    std::fs::write(&gate, b"").expect("open the gate");
    for run in [&holding, &second, &third] {
        wait_terminal(&api, run).await;
    }
    assert_eq!(api.run(&third).await.queue, None);
}
