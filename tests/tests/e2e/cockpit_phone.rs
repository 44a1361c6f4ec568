//! The cockpit on a phone, in a real browser 420 px wide: no page scrolls sideways and
//! nothing in `main` is wider than the screen, even with long names, ids, log lines and
//! a long command waiting for approval or submitted as a task; the runs list shows each
//! run's name, status and outcome on screen; the nav stays on one line; a run page shows
//! its log before its facts and history. Back at desktop width the tables and the run
//! page are laid out as before. Set-up and helpers are the cockpit tests'.

use serde_json::{Value, json};
use studio_api::{RunStatus, schedule::ApprovalPolicy};
use studio_tests::browser::{Browser, WINDOW};

use super::cockpit::{Api, WAIT, open, paired_browser, sh, start, wait_task_ended, wait_terminal};

/// A phone's viewport.
const PHONE: (u32, u32) = (420, 900);

/// What overflows sideways now: the page's and the viewport's widths, the nav links'
/// distinct tops (one line: one top), and up to ten elements in `main` that reach past
/// either edge of the viewport.
const OVERFLOW: &str = r#"
const w = window.innerWidth;
const name = (e) => e.tagName.toLowerCase()
  + (e.dataset.testid ? `[data-testid=${e.dataset.testid}]` : '')
  + (e.className && typeof e.className === 'string' ? '.' + e.className.trim().split(/\s+/).join('.') : '');
const wide = [];
for (const e of document.querySelectorAll('main *')) {
  const r = e.getBoundingClientRect();
  if (r.width === 0 && r.height === 0) continue;
  if (r.width > w || r.right > w + 0.5 || r.left < -0.5) {
    wide.push(`${name(e)} ${Math.round(r.left)}..${Math.round(r.right)}`);
  }
}
const tops = new Set([...document.querySelectorAll('.top nav a')]
  .map((a) => Math.round(a.getBoundingClientRect().top)));
const nav = document.querySelector('.top nav').getBoundingClientRect();
return { inner: w, page: document.documentElement.scrollWidth, wide: wide.slice(0, 10),
         navLines: tops.size, navRight: nav.right };
"#;

/// The rectangle of the first element matching `arguments[0]`, or null.
const RECT: &str = r#"
const e = document.querySelector(arguments[0]);
if (!e) return null;
const r = e.getBoundingClientRect();
return { left: r.left, right: r.right, top: r.top, inner: window.innerWidth };
"#;

/// Asserts that the page open in `browser` (`what`) fits the viewport's width.
async fn assert_fits(browser: &Browser, what: &str) {
    let v = browser.execute(OVERFLOW, vec![]).await;
    let inner = v["inner"].as_f64().unwrap_or_default();
    assert_eq!(inner, f64::from(PHONE.0), "{what}: the viewport: {v}");
    assert!(
        v["page"].as_f64().unwrap_or(f64::MAX) <= inner,
        "{what} scrolls sideways: {v}"
    );
    assert_eq!(v["wide"], json!([]), "{what}: wider than the screen: {v}");
    assert_eq!(v["navLines"], json!(1), "{what}: the nav wraps: {v}");
    assert!(
        v["navRight"].as_f64().unwrap_or(f64::MAX) <= inner,
        "{what}: the nav is cut off: {v}"
    );
}

/// The rectangle of the element matching `css`, which must be on the page.
async fn rect(browser: &Browser, css: &str) -> Value {
    let r = browser.execute(RECT, vec![json!(css)]).await;
    assert!(r.is_object(), "no {css}");
    r
}

/// Asserts that the element matching `css` lies within the viewport's width.
async fn assert_on_screen(browser: &Browser, css: &str) {
    let r = rect(browser, css).await;
    let (left, right) = (r["left"].as_f64(), r["right"].as_f64());
    let inner = r["inner"].as_f64();
    assert!(
        left >= Some(0.0) && right <= inner,
        "{css} is off-screen: {r}"
    );
}

/// Whether the element matching `above` starts higher on the page than `below`.
async fn starts_above(browser: &Browser, above: &str, below: &str) -> bool {
    let (a, b) = (rect(browser, above).await, rect(browser, below).await);
    a["top"].as_f64() < b["top"].as_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_fits_a_phone_screen() {
    let studio = start();
    let api = Api::new(&studio);
    let failing = api
        .create(&sh(
            "reports/a-very-long-project-name/daily-sales-summary",
            "echo 'ERROR: /var/lib/warehouse/exports/2026/daily_sales_summary_for_every_region_and_every_store.parquet is missing' >&2; exit 3",
        ))
        .await;
    let passing = api
        .create(&sh(
            "ml/feature_store_backfill_for_the_customer_lifetime_value_model",
            "echo https://warehouse.example.com/exports/2026/daily_sales_summary_for_every_region_and_every_store.parquet",
        ))
        .await;
    api.create(&sh("etl/warehouse/nightly-incremental-load", "true"))
        .await;
    let mut gated = sh(
        "deploy/a-very-long-project-name/production-release",
        "rsync --archive --delete /var/lib/warehouse/exports/2026/daily_sales_summary_for_every_region_and_every_store/ backup:/srv",
    );
    gated.policies.approval = Some(ApprovalPolicy {
        required: true,
        expires_after: "1h".into(),
        distinct_from_requester: false,
    });
    let gated = api.create(&gated).await;
    let awaiting = api.trigger(&gated).await;
    let failed = api.trigger(&failing).await;
    let completed = api.trigger(&passing).await;
    assert_eq!(
        wait_terminal(&api, &failed).await.run.core.status,
        RunStatus::Failed
    );
    assert_eq!(
        wait_terminal(&api, &completed).await.run.core.status,
        RunStatus::Completed
    );

    let task = api
        .submit_task(&json!({
            "action": {"kind": "command", "executable": "sh", "args": ["-c",
                "echo /var/lib/warehouse/exports/2026/daily_sales_summary_for_every_region_and_every_store.parquet"]},
            "idempotency_key": "ci-pipeline-for-the-warehouse-exports-2026-daily-sales-summary-4711",
            "retry": {"max_attempts": 5, "exit_codes": [75, 76, 77]}
        }))
        .await;
    wait_task_ended(&api, &task.id).await;

    let browser = paired_browser(&studio).await;
    assert_eq!(browser.set_viewport(PHONE.0, PHONE.1).await, PHONE);
    let pages = [
        ("/".to_owned(), "daemon-facts"),
        ("/schedules".to_owned(), "schedules-table"),
        (format!("/schedules/{failing}"), "schedule-runs"),
        ("/schedules/new".to_owned(), "schedule-form"),
        (format!("/schedules/{failing}/edit"), "schedule-form"),
        ("/runs".to_owned(), "runs-table"),
        (format!("/runs/{failed}"), "run-why"),
        (format!("/runs/{completed}"), "log-view"),
        ("/attention".to_owned(), "attention-item"),
        ("/approvals".to_owned(), "approval"),
        ("/tasks".to_owned(), "tasks-table"),
        (format!("/tasks/{}", task.id), "log-view"),
        (format!("/runs/{awaiting}"), "run-awaiting"),
        ("/devices".to_owned(), "devices-table"),
        ("/commands".to_owned(), "commands-table"),
        ("/audit".to_owned(), "audit-table"),
    ];
    for (path, testid) in &pages {
        open(&browser, &studio, path, testid).await;
        if *testid == "log-view" || path.starts_with("/runs/") && *testid != "run-awaiting" {
            // The log has loaded, long line and all.
            browser.wait_for_text("log-text", ".parquet", WAIT).await;
        }
        assert_fits(&browser, path).await;
    }
    // The form with its Advanced section open, too.
    open(&browser, &studio, "/schedules/new", "schedule-form").await;
    browser.click("advanced-summary").await;
    browser
        .wait_for_attr("advanced", "open", &["", "true"], WAIT)
        .await;
    assert_fits(&browser, "/schedules/new, advanced").await;

    // The runs list: each run's name, status and outcome are on screen, the outcome
    // labelled with its column's name.
    open(&browser, &studio, "/runs", "runs-table").await;
    let row = format!(r#"[data-testid="run-row"][data-id="{failed}"]"#);
    for cell in ["run-schedule", "run-status", "run-outcome"] {
        assert_on_screen(&browser, &format!(r#"{row} [data-testid="{cell}"]"#)).await;
    }
    let label = browser
        .execute(
            "return getComputedStyle(document.querySelector(arguments[0]), '::before').content",
            vec![json!(format!(r#"{row} [data-testid="run-outcome"]"#))],
        )
        .await;
    assert_eq!(label, json!(r#""Outcome""#));
    // So are a schedule's health and its latest runs in the schedules list.
    open(&browser, &studio, "/schedules", "schedules-table").await;
    let row = format!(r#"[data-testid="schedule-row"][data-id="{failing}"]"#);
    for cell in [
        "schedule-link",
        "health-badge",
        "run-strip",
        "schedule-latest",
    ] {
        assert_on_screen(&browser, &format!(r#"{row} [data-testid="{cell}"]"#)).await;
    }

    // A run page: the log right after the status line and the why box, the facts and
    // the history after it.
    open(&browser, &studio, &format!("/runs/{failed}"), "run-why").await;
    let (log, history) = (
        r#"[data-testid="log-view"]"#,
        r#"[data-testid="run-transitions"]"#,
    );
    assert!(
        starts_above(&browser, log, history).await,
        "the log is not first"
    );
    assert!(starts_above(&browser, r#"[data-testid="run-why"]"#, log).await);
    assert!(starts_above(&browser, log, r#"[data-testid="run-outcome"]"#).await);

    // At desktop width the page is as it was: the history above the log, tables as tables.
    browser.set_viewport(WINDOW.0, WINDOW.1).await;
    assert!(
        starts_above(&browser, history, log).await,
        "the log moved on desktop"
    );
    open(&browser, &studio, "/runs", "runs-table").await;
    let display = browser
        .execute(
            "return getComputedStyle(document.querySelector('[data-testid=\"run-outcome\"]')).display",
            vec![],
        )
        .await;
    assert_eq!(display, json!("table-cell"));
    browser.close().await;
}
