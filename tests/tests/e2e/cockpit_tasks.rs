//! Tasks in a real browser: the Tasks page lists the workers that serve the queue,
//! studiod's built-in one first with its labels and load; a task submitted through the
//! API appears live on `/tasks` and ends completed, its page lists its attempt (named by
//! the worker that ran it) linked to the run and shows its log, and the run links back; a running task is cancelled from its page; a failed one is
//! retried from its page and gets a second attempt; a viewer is offered neither; a task
//! that needs a label no worker has is marked unmatched (`g t` leads to the list).
//! Set-up and helpers are the cockpit tests'; what is asserted about storage is read
//! back through studiod's API.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use studio_api::{TaskDetail, TaskStatus};
use studio_tests::{Studio, browser::Browser};

use super::cockpit::{Api, WAIT, open, paired_browser, start, wait_task_ended};

/// A task that runs `sh -c <script>`.
fn sh(script: &str) -> Value {
    json!({"action": {"kind": "command", "executable": "sh", "args": ["-c", script]}})
}

/// Polls the task until `done` holds of it.
async fn task_until(
    api: &Api,
    id: &str,
    what: &str,
    done: impl Fn(&TaskDetail) -> bool,
) -> TaskDetail {
    let deadline = Instant::now() + WAIT;
    loop {
        let t = api.task(id).await;
        if done(&t) {
            return t;
        }
        assert!(Instant::now() < deadline, "waiting for {what}: {t:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A browser paired as a viewer, on the paired overview.
async fn viewer_browser(studio: &Studio) -> Browser {
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
}

/// The row of `task` on the Tasks page.
fn row(task: &str) -> String {
    format!(r#"[data-testid="task-row"][data-id="{task}"]"#)
}

/// A key pressed on the page, outside any text field.
async fn press(browser: &Browser, key: &str) {
    browser
        .execute(
            "document.body.dispatchEvent(new KeyboardEvent('keydown', \
             {key: arguments[0], bubbles: true})); return true;",
            vec![json!(key)],
        )
        .await;
}

/// The texts of every element with `testid`, in page order.
async fn texts(browser: &Browser, testid: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in browser.find_all(testid).await {
        out.push(e.text().await.unwrap_or_default());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_page_lists_studiods_built_in_worker_first() {
    let studio = Studio::start_with(&[
        ("STUDIO_COMMAND_ALLOWLIST", "sleep"),
        ("STUDIO_SCHEDULER_TZ", "UTC"),
        ("STUDIO_LOCAL_LABELS", "linux"),
    ]);
    let api = Api::new(&studio);
    let sleeping = api
        .submit_task(&json!({"action": {"kind": "command", "executable": "sleep", "args": ["30"]}}))
        .await;
    task_until(&api, &sleeping.id, "the task to run", |t| {
        t.task.status == TaskStatus::Running
    })
    .await;
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/tasks", "workers-table").await;
    // Alone, studiod's own worker: built-in, connected, serving its label, busy with one.
    assert_eq!(texts(&browser, "worker-name").await, ["studiod"]);
    let first = r#"[data-testid="worker-row"]:first-child"#;
    assert_eq!(
        browser
            .wait_for_css(
                &format!(r#"{first}[data-id="builtin"] [data-testid="worker-builtin"]"#),
                WAIT
            )
            .await
            .text()
            .await
            .unwrap_or_default(),
        "built-in"
    );
    assert_eq!(texts(&browser, "worker-state").await, ["connected"]);
    assert_eq!(texts(&browser, "worker-labels").await, ["linux"]);
    let load = browser.text_of("worker-load").await.unwrap_or_default();
    assert!(load.starts_with("1 / "), "{load}");
    assert!(browser.try_find("workers-problem").await.is_none());
    assert!(browser.try_find("workers-revoked").await.is_none());
    // The section sits above the queue.
    assert_eq!(
        browser
            .execute(
                "return !!(document.querySelector('[data-testid=workers]')\
                   .compareDocumentPosition(document.querySelector('[data-testid=tasks-table]'))\
                   & Node.DOCUMENT_POSITION_FOLLOWING);",
                vec![],
            )
            .await,
        json!(true)
    );
    // Cancelled, the task frees its slot and the section follows without a reload.
    let out = studio.cli(&["task", "cancel", &sleeping.id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    browser
        .wait_until(WAIT, "the worker to run nothing", || async {
            browser
                .text_of("worker-load")
                .await
                .is_some_and(|l| l.starts_with("0 / "))
        })
        .await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_task_appears_live_and_its_page_links_its_attempt_to_the_run() {
    let studio = start();
    let api = Api::new(&studio);
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/tasks", "tasks-empty").await;
    browser
        .execute("window.__studioStayed = true; return true;", vec![])
        .await;

    let submitted = api.submit_task(&sh("echo hello from a task")).await;
    let mine = row(&submitted.id);
    browser
        .wait_for_css(&format!(r#"{mine}[data-status="completed"]"#), WAIT)
        .await;
    assert_eq!(
        browser
            .execute("return window.__studioStayed === true;", vec![])
            .await,
        json!(true),
        "reloaded"
    );
    let work = browser
        .wait_for_css(&format!(r#"{mine} [data-testid="task-work"]"#), WAIT)
        .await;
    assert_eq!(
        work.text().await.unwrap_or_default(),
        "sh -c 'echo hello from a task'"
    );
    let done = api.task(&submitted.id).await;
    assert_eq!(done.task.status, TaskStatus::Completed);
    let [attempt] = &done.attempts[..] else {
        panic!("one attempt: {done:?}");
    };
    let run = attempt.core.id.clone();

    browser
        .wait_for_css(&format!(r#"{mine} [data-testid="task-link"]"#), WAIT)
        .await
        .click()
        .await
        .expect("open the task");
    let attempt_row = browser
        .wait_for_css(
            &format!(r#"[data-testid="attempt-row"][data-run="{run}"]"#),
            WAIT,
        )
        .await;
    assert_eq!(
        attempt_row
            .attr("data-attempt")
            .await
            .ok()
            .flatten()
            .as_deref(),
        Some("1")
    );
    // Named by the worker that ran it: studiod's own.
    assert_eq!(texts(&browser, "attempt-worker").await, ["studiod"]);
    assert_eq!(texts(&browser, "attempt-status").await, ["completed"]);
    let href = browser
        .attr("attempt-link", "href")
        .await
        .unwrap_or_default();
    assert!(href.ends_with(&format!("/runs/{run}")), "{href}");
    assert_eq!(
        browser.text_of("task-status").await.as_deref(),
        Some("completed")
    );
    browser
        .wait_for_text("log-text", "hello from a task", WAIT)
        .await;

    // The attempt's run page leads back to its task.
    browser.click("attempt-link").await;
    browser.wait_for_testid("log-view", WAIT).await;
    let back = browser
        .attr("run-schedule", "href")
        .await
        .unwrap_or_default();
    assert!(
        back.ends_with(&format!("/tasks/{}", submitted.id)),
        "{back}"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_is_cancelled_from_its_page() {
    let studio = start();
    let api = Api::new(&studio);
    let submitted = api
        .submit_task(&json!({"action": {"kind": "command", "executable": "sleep", "args": ["30"]}}))
        .await;
    task_until(&api, &submitted.id, "the task to run", |t| {
        t.task.status == TaskStatus::Running
    })
    .await;
    let browser = paired_browser(&studio).await;
    // The overview counts it.
    open(&browser, &studio, "/", "tasks-summary").await;
    assert_eq!(
        browser.text_of("tasks-running").await.as_deref(),
        Some("1 running")
    );

    open(
        &browser,
        &studio,
        &format!("/tasks/{}", submitted.id),
        "task-cancel",
    )
    .await;
    assert!(browser.try_find("task-retry").await.is_none());
    browser.click("task-cancel").await;
    let asked = browser.accept_dialog(WAIT).await;
    assert!(asked.contains("Cancel this task"), "{asked}");
    browser
        .wait_for_text("task-status", "cancelled", WAIT)
        .await;
    let ended = api.task(&submitted.id).await;
    assert_eq!(ended.task.status, TaskStatus::Cancelled);
    browser.wait_gone("task-cancel", WAIT).await;
    browser
        .wait_for_text("attempt-status", "cancelled", WAIT)
        .await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_task_is_retried_from_its_page_and_gets_a_second_attempt() {
    let studio = start();
    let api = Api::new(&studio);
    let submitted = api
        .submit_task(&sh("echo attempt failing >&2; exit 3"))
        .await;
    let failed = wait_task_ended(&api, &submitted.id).await;
    assert_eq!(failed.task.status, TaskStatus::Failed);
    let browser = paired_browser(&studio).await;
    open(
        &browser,
        &studio,
        &format!("/tasks/{}", submitted.id),
        "task-retry",
    )
    .await;
    assert_eq!(texts(&browser, "attempt-exit").await, ["3"]);
    assert!(browser.try_find("task-cancel").await.is_none());
    browser
        .wait_for_text("log-text", "attempt failing", WAIT)
        .await;

    browser.click("task-retry").await;
    browser
        .wait_for_css(r#"[data-testid="attempt-row"][data-attempt="2"]"#, WAIT)
        .await;
    let again = task_until(&api, &submitted.id, "the second attempt to end", |t| {
        t.task.status.is_terminal() && t.attempts.len() == 2
    })
    .await;
    assert_eq!(again.task.status, TaskStatus::Failed);
    let numbers: Vec<i64> = again.attempts.iter().map(|a| a.core.attempt).collect();
    assert_eq!(numbers, [1, 2]);
    browser
        .wait_for_text("task-attempt-count", "2 attempts", WAIT)
        .await;
    browser
        .wait_until(WAIT, "both attempts to show as failed", || async {
            texts(&browser, "attempt-status").await == ["failed", "failed"]
        })
        .await;
    // The log follows the newest attempt.
    let second = &again.attempts[1].core.id;
    browser
        .wait_for_css(
            &format!(r#"[data-testid="log-view"][data-run="{second}"]"#),
            WAIT,
        )
        .await;
    browser.wait_for_testid("task-retry", WAIT).await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_is_offered_neither_cancel_nor_retry() {
    let studio = start();
    let api = Api::new(&studio);
    let failed = api.submit_task(&sh("exit 3")).await;
    let waiting = api
        .submit_task(
            &json!({"action": {"kind": "command", "executable": "true"}, "labels": ["gpu"]}),
        )
        .await;
    wait_task_ended(&api, &failed.id).await;
    let browser = viewer_browser(&studio).await;
    for id in [&failed.id, &waiting.id] {
        open(&browser, &studio, &format!("/tasks/{id}"), "task-status").await;
        browser.wait_for_text("role-note", "viewer", WAIT).await;
        for offered in ["task-cancel", "task-retry"] {
            assert!(
                browser.try_find(offered).await.is_none(),
                "{offered} offered for {id}"
            );
        }
    }
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_labels_no_worker_has_is_marked_unmatched() {
    let studio = start();
    let api = Api::new(&studio);
    let waiting = api
        .submit_task(
            &json!({"action": {"kind": "command", "executable": "true"}, "labels": ["gpu"]}),
        )
        .await;
    assert!(waiting.unmatched, "{waiting:?}");
    let browser = paired_browser(&studio).await;
    // "g t" goes to the Tasks page, and "/" to its label filter.
    for key in ["g", "t"] {
        press(&browser, key).await;
    }
    browser.wait_for_testid("tasks-table", WAIT).await;
    press(&browser, "/").await;
    assert_eq!(
        browser
            .execute("return document.activeElement.id", vec![])
            .await,
        json!("label")
    );
    let mark = browser
        .wait_for_css(
            &format!(r#"{} [data-testid="task-unmatched"]"#, row(&waiting.id)),
            WAIT,
        )
        .await;
    assert_eq!(mark.text().await.unwrap_or_default(), "unmatched");
    let tip = mark.attr("title").await.ok().flatten().unwrap_or_default();
    assert!(tip.starts_with("No worker has these labels"), "{tip}");

    open(
        &browser,
        &studio,
        &format!("/tasks/{}", waiting.id),
        "task-unmatched-note",
    )
    .await;
    assert_eq!(
        browser.text_of("task-status").await.as_deref(),
        Some("queued")
    );
    browser.wait_for_testid("attempts-empty", WAIT).await;
    assert!(browser.try_find("log-view").await.is_none());
    browser.close().await;
}
