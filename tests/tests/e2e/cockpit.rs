//! The web cockpit in a real browser (chromedriver + headless Chromium, see
//! `studio_tests::browser`): pairing through the link, the schedule form, a live run log,
//! cancelling, the attention queue, and recovery when the app or the daemon goes away.
//! Data is set up through studiod's API with the daemon token; everything asserted is
//! what the page shows.

use std::time::Duration;

use reqwest::Method;
use rustix::process::Signal;
use serde_json::json;
use studio_api::{
    Run, RunDetail, RunStatus, Schedule, SchedulePage,
    schedule::{Action, ScheduleSpec, Trigger},
};
use studio_tests::{
    Reply, Studio,
    api::{command_spec, cron, every},
    browser::{Browser, screenshot_dir},
    signal,
};

/// Executables the cockpit's schedules run.
const ALLOW: &str = "sh,true,false,sleep";
/// The bound on anything the page should show within seconds.
pub(super) const WAIT: Duration = Duration::from_secs(30);

pub(super) fn start() -> Studio {
    Studio::start_with(&[
        ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
        ("STUDIO_SCHEDULER_TZ", "UTC"),
    ])
}

/// studiod's API with the daemon token, for setting up what the pages then show.
pub(super) struct Api {
    client: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    pub(super) fn new(studio: &Studio) -> Self {
        Self {
            client: studio_tests::http(),
            base: studio.daemon_url(""),
            token: studio.token(),
        }
    }

    /// One request; `body` as JSON (none for a route that takes none).
    async fn send(&self, method: Method, path: &str, body: Option<&ScheduleSpec>) -> Reply {
        let mut req = self
            .client
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if method != Method::GET {
            req = req.header("content-type", "application/json");
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        Reply::of(resp).await
    }

    pub(super) async fn create(&self, spec: &ScheduleSpec) -> String {
        let reply = self.send(Method::POST, "/api/schedules", Some(spec)).await;
        reply.expect::<Schedule>(201).id
    }

    pub(super) async fn trigger(&self, schedule: &str) -> String {
        let path = format!("/api/schedules/{schedule}/trigger");
        let reply = self.send(Method::POST, &path, None).await;
        reply.expect::<Run>(202).core.id
    }

    pub(super) async fn run(&self, id: &str) -> RunDetail {
        self.send(Method::GET, &format!("/api/runs/{id}"), None)
            .await
            .expect(200)
    }

    /// Submits a task: the task studiod made.
    pub(super) async fn submit_task(&self, spec: &serde_json::Value) -> studio_api::Task {
        let resp = self
            .client
            .post(format!("{}/api/tasks", self.base))
            .bearer_auth(&self.token)
            .json(spec)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST /api/tasks: {e}"));
        Reply::of(resp).await.expect(201)
    }

    pub(super) async fn task(&self, id: &str) -> studio_api::TaskDetail {
        self.send(Method::GET, &format!("/api/tasks/{id}"), None)
            .await
            .expect(200)
    }

    async fn schedules(&self) -> Vec<Schedule> {
        let reply = self.send(Method::GET, "/api/schedules", None).await;
        reply.expect::<SchedulePage>(200).schedules
    }
}

/// A `sh -c <script>` schedule that only runs when triggered (a yearly cron).
pub(super) fn sh(name: &str, script: &str) -> ScheduleSpec {
    command_spec(name, cron("0 0 1 1 *"), "sh", &["-c", script])
}

/// A browser paired through `studio up`'s link, on the server-rendered paired overview.
pub(super) async fn paired_browser(studio: &Studio) -> Browser {
    let browser = Browser::start().await;
    browser.goto(&studio.pair_url).await;
    browser
        .wait_for_attr("state-banner", "data-state", &["paired"], WAIT)
        .await;
    // The page reloads itself once paired, so the server renders the paired page too.
    browser
        .wait_for_attr("state-banner", "data-server-state", &["paired"], WAIT)
        .await;
    browser
}

/// Opens `path` on the app and waits for its paired, server-rendered content.
pub(super) async fn open(browser: &Browser, studio: &Studio, path: &str, testid: &str) {
    browser.goto(&studio.app_url(path)).await;
    browser.wait_for_testid(testid, WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pairing_link_pairs_the_browser() {
    let studio = start();
    let browser = paired_browser(&studio).await;
    let epoch = studio.child("daemon")["epoch"]
        .as_str()
        .expect("daemon epoch")
        .to_owned();
    // Paired: a small indicator, its epoch in the tooltip; no disconnect button on
    // every page (that is on Devices, and asks first).
    browser
        .wait_until(WAIT, "the epoch in the indicator's tooltip", || async {
            browser
                .attr("state-banner", "title")
                .await
                .is_some_and(|t| t.contains(&epoch))
        })
        .await;
    assert_eq!(
        browser
            .text_of("state-banner")
            .await
            .as_deref()
            .map(str::trim),
        Some("Paired")
    );
    assert!(browser.try_find_css("button#disconnect").await.is_none());
    browser.wait_for_testid("daemon-facts", WAIT).await;
    assert!(
        !browser.current_url().await.contains("pair="),
        "the code leaves the address bar"
    );

    // The same link in a second browser is spent: not paired, with the next step.
    let other = Browser::start().await;
    other.goto(&studio.pair_url).await;
    other
        .wait_for_attr("state-banner", "data-state", &["not-paired"], WAIT)
        .await;
    other
        .wait_for_text("state-advice", "studio pair", WAIT)
        .await;
    assert!(other.try_find("daemon-facts").await.is_none());
    other.close().await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_is_created_through_the_form() {
    let studio = start();
    let api = Api::new(&studio);
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/schedules", "schedules-empty").await;
    browser.click("schedule-new").await;
    browser.wait_for_testid("schedule-form", WAIT).await;
    browser.fill("field-name", "nightly-report").await;
    browser.fill("field-trigger-kind", "cron").await;
    browser.fill("field-cron", "61 * * * *").await;
    browser.fill("field-executable", "true").await;
    browser.click("schedule-submit").await;
    // Refused: the daemon's message sits inside the cron field's box, and nothing exists.
    let error = browser.wait_for_testid("error-cron", WAIT).await;
    let message = error.text().await.expect("error text");
    assert!(!message.trim().is_empty());
    let beside = browser
        .execute(
            r#"const e = document.querySelector('[data-testid="error-cron"]');
               return !!e && !!e.closest('.field').querySelector('[data-testid="field-cron"]');"#,
            vec![],
        )
        .await;
    assert_eq!(
        beside,
        json!(true),
        "the error is shown next to the cron field"
    );
    assert!(api.schedules().await.is_empty());

    browser.fill("field-cron", "30 2 * * *").await;
    // The preview follows the valid expression: five fires.
    browser
        .wait_until(WAIT, "five previewed fires", || async {
            browser
                .find_all_css(r#"[data-testid="preview-list"] li"#)
                .await
                .len()
                == 5
        })
        .await;
    browser.click("schedule-submit").await;
    browser
        .wait_for_text("schedule-name", "nightly-report", WAIT)
        .await;
    let all = api.schedules().await;
    assert_eq!(all.len(), 1, "{all:?}");
    let Trigger::Cron(cron) = &all[0].spec.trigger else {
        panic!("not a cron trigger: {all:?}");
    };
    assert_eq!(cron.expression, "30 2 * * *");
    let Action::Command { executable, .. } = &all[0].spec.action else {
        panic!("not a command: {all:?}");
    };
    assert_eq!(executable, "true");

    // The schedule's page, and the audit page, say this browser made it (the refused
    // attempt left no row).
    let history = browser.wait_for_testid("history-row", WAIT).await;
    let said = history.text().await.expect("history text");
    assert!(
        said.starts_with("schedule created by this browser (admin)"),
        "{said}"
    );
    browser.click("schedule-audit-link").await;
    browser.wait_for_testid("audit-table", WAIT).await;
    let rows = browser.find_all_css(r#"[data-testid="audit-row"]"#).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        browser.text_of("audit-kind").await.as_deref(),
        Some("schedule created")
    );
    let who = browser.text_of("audit-who").await.unwrap_or_default();
    assert!(
        who.starts_with("this browser (admin)") && who.contains(&studio.app_origin()),
        "{who}"
    );

    // Deleting is destructive: the page sends this tab's decision token with it.
    let id = all[0].id.clone();
    open(
        &browser,
        &studio,
        &format!("/schedules/{id}"),
        "schedule-delete",
    )
    .await;
    browser.click("schedule-delete").await;
    let asked = browser.accept_dialog(WAIT).await;
    assert!(asked.to_lowercase().contains("delete"), "{asked}");
    browser
        .wait_until(WAIT, "the schedule to be deleted", || async {
            api.schedules().await.is_empty()
        })
        .await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_triggered_run_appears_and_its_log_streams_live() {
    let studio = start();
    let api = Api::new(&studio);
    let gate = studio.home_path().join("go");
    let script = format!(
        "echo first line; while [ ! -e '{}' ]; do sleep 0.1; done; echo second line",
        gate.display()
    );
    let schedule = api.create(&sh("live-log", &script)).await;
    let browser = paired_browser(&studio).await;

    // Trigger from the schedule's page: the browser lands on the new run.
    open(
        &browser,
        &studio,
        &format!("/schedules/{schedule}"),
        "schedule-trigger",
    )
    .await;
    browser.click("schedule-trigger").await;
    browser.wait_for_testid("log-view", WAIT).await;
    let url = browser.current_url().await;
    let run = url
        .rsplit_once("/runs/")
        .map(|(_, id)| {
            id.split(['?', '#'])
                .next()
                .unwrap_or(id)
                .trim_end_matches('/')
                .to_owned()
        })
        .unwrap_or_else(|| panic!("not on a run page: {url}"));
    browser.wait_for_text("log-text", "first line", WAIT).await;
    browser.wait_for_text("run-status", "running", WAIT).await;
    let text = browser.text_of("log-text").await.unwrap_or_default();
    assert!(!text.contains("second line"), "{text}");

    // More output arrives while the page stays open, then the run's end.
    std::fs::write(&gate, b"").expect("open the gate");
    browser.wait_for_text("log-text", "second line", WAIT).await;
    browser.wait_for_text("run-status", "completed", WAIT).await;
    assert_eq!(api.run(&run).await.run.core.status, RunStatus::Completed);

    // The runs list shows it.
    open(&browser, &studio, "/runs", "runs-table").await;
    let row = browser
        .wait_for_css(
            &format!(r#"[data-testid="run-row"][data-id="{run}"]"#),
            WAIT,
        )
        .await;
    assert!(row.text().await.expect("row text").contains("completed"));
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_is_cancelled_from_its_page() {
    let studio = start();
    let api = Api::new(&studio);
    let schedule = api.create(&sh("long", "echo started; sleep 120")).await;
    let run = api.trigger(&schedule).await;
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, &format!("/runs/{run}"), "log-view").await;
    browser.wait_for_text("log-text", "started", WAIT).await;

    browser.click("run-cancel").await;
    let asked = browser.accept_dialog(WAIT).await;
    assert!(asked.to_lowercase().contains("cancel"), "{asked}");
    browser.wait_for_text("run-status", "cancelled", WAIT).await;
    assert_eq!(api.run(&run).await.run.core.status, RunStatus::Cancelled);
    // A finished run offers no cancel button.
    browser.refresh().await;
    browser.wait_for_text("run-status", "cancelled", WAIT).await;
    assert!(browser.try_find("run-cancel").await.is_none());
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_item_leaves_the_queue_and_returns_on_a_new_failure() {
    let studio = start();
    let api = Api::new(&studio);
    let schedule = api.create(&sh("flaky", "echo broken >&2; exit 3")).await;
    let first = api.trigger(&schedule).await;
    wait_terminal(&api, &first).await;
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/attention", "attention-item").await;
    let sched_item = format!(r#"[data-testid="attention-item"][data-id="sched:{schedule}"]"#);
    browser.wait_for_css(&sched_item, WAIT).await;

    // Acknowledge everything the failure raised (the run and its failing schedule).
    loop {
        let left = browser.find_all("attention-item").await.len();
        if left == 0 {
            break;
        }
        browser.click("attention-ack").await;
        browser
            .wait_until(WAIT, "the acknowledged item to leave", || async {
                browser.find_all("attention-item").await.len() < left
            })
            .await;
    }
    browser.wait_for_testid("attention-empty", WAIT).await;
    // Gone for good, not just from this copy of the page.
    browser.refresh().await;
    browser
        .wait_for_attr("attention-list", "data-state", &["loaded"], WAIT)
        .await;
    browser.wait_for_testid("attention-empty", WAIT).await;

    // A newer failure brings the schedule back, showing the earlier acknowledgement.
    let second = api.trigger(&schedule).await;
    wait_terminal(&api, &second).await;
    browser.refresh().await;
    let item = browser.wait_for_css(&sched_item, WAIT).await;
    let text = item.text().await.expect("item text");
    assert!(text.contains("acknowledged"), "{text}");
    browser
        .wait_for_css(
            &format!(r#"[data-testid="attention-item"][data-id="run:{second}"]"#),
            WAIT,
        )
        .await;
    browser.close().await;
}

pub(super) async fn wait_terminal(api: &Api, run: &str) -> RunDetail {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let r = api.run(run).await;
        if r.run.core.status.is_terminal() {
            return r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "run {run} still active: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the task has ended.
pub(super) async fn wait_task_ended(api: &Api, id: &str) -> studio_api::TaskDetail {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let t = api.task(id).await;
        if t.task.status.is_terminal() {
            return t;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "task {id} still active: {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_recovers_from_an_app_kill_without_pairing_again() {
    let studio = start();
    let api = Api::new(&studio);
    api.create(&sh("survivor", "true")).await;
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/schedules", "schedules-table").await;

    let app = studio.child_pid("app");
    signal(app, Signal::KILL);
    studio.wait_running("app", Some(app), WAIT);
    // The open page's banner keeps polling; it finds the new app and the same cookie.
    browser
        .wait_for_attr("state-banner", "data-state", &["paired"], WAIT)
        .await;
    browser.refresh().await;
    browser.wait_for_testid("schedules-table", WAIT).await;
    assert_eq!(
        browser
            .attr("state-banner", "data-server-state")
            .await
            .as_deref(),
        Some("paired")
    );
    browser
        .wait_for_text("schedules-table", "survivor", WAIT)
        .await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_daemon_shows_unavailable_then_recovers() {
    let studio = start();
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/schedules", "schedules-empty").await;

    let daemon = studio.child_pid("daemon");
    signal(daemon, Signal::STOP);
    // The open page notices on its own…
    browser
        .wait_for_attr("state-banner", "data-state", &["daemon-unavailable"], WAIT)
        .await;
    // …and a fresh load says so too, with what to do, and shows no data.
    browser.goto(&studio.app_url("/schedules")).await;
    let server = browser
        .attr("state-banner", "data-server-state")
        .await
        .unwrap_or_default();
    signal(daemon, Signal::CONT);
    assert_eq!(server, "daemon-unavailable");
    assert!(browser.try_find("schedules-empty").await.is_none());

    browser
        .wait_for_attr("state-banner", "data-state", &["paired"], WAIT)
        .await;
    browser.refresh().await;
    browser.wait_for_testid("schedules-empty", WAIT).await;

    // A daemon restart begins a new epoch: the page says the pairing ended and how to
    // pair again, and a fresh link brings it back.
    let out = studio.cli(&["restart", "daemon"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    studio.wait_running("daemon", Some(daemon), WAIT);
    browser
        .wait_for_attr("state-banner", "data-state", &["epoch-ended"], WAIT)
        .await;
    browser.refresh().await;
    browser
        .wait_for_text("state-advice", "studio pair", WAIT)
        .await;
    assert!(browser.try_find("schedules-empty").await.is_none());
    let link = String::from_utf8_lossy(&studio.cli(&["pair"]).stdout).into_owned();
    let link = link
        .split_whitespace()
        .find(|w| w.contains("#pair="))
        .unwrap_or_else(|| panic!("no link in {link:?}"))
        .to_owned();
    browser.goto(&link).await;
    browser
        .wait_for_attr("state-banner", "data-server-state", &["paired"], WAIT)
        .await;
    browser.close().await;
}

/// Captures every page into `STUDIO_SCREENSHOTS` (e.g. `docs/screenshots`), else into a
/// temporary folder: `STUDIO_SCREENSHOTS=docs/screenshots cargo test -p studio-tests
/// --test e2e cockpit::screenshots`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screenshots_of_every_page() {
    let (dir, _tmp) = screenshot_dir();
    let studio = Studio::start_with(&[
        ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
        ("STUDIO_SCHEDULER_TZ", "UTC"),
        ("STUDIO_LOCAL_LABELS", "linux"),
    ]);
    let api = Api::new(&studio);
    let nightly = api
        .create(&sh(
            "nightly-report",
            "echo collecting; echo 3 files written; echo done",
        ))
        .await;
    let backup = api
        .create(&command_spec("backup-home", every("6h"), "true", &[]))
        .await;
    let broken = api
        .create(&sh("sync-mirror", "echo 'mirror unreachable' >&2; exit 2"))
        .await;
    let _ = backup;
    let ok = api.trigger(&nightly).await;
    wait_terminal(&api, &ok).await;
    let failed = api.trigger(&broken).await;
    wait_terminal(&api, &failed).await;
    let mut release = command_spec(
        "deploy-site",
        every("1d"),
        "sh",
        &["-c", "rsync -a build/ /srv/www"],
    );
    release.cwd = Some("/tmp".into());
    release.env = studio_tests::api::env(&[("SITE", "www")]);
    release.policies.approval = Some(studio_api::schedule::ApprovalPolicy {
        required: true,
        expires_after: "1h".into(),
        distinct_from_requester: true,
    });
    let release = api.create(&release).await;
    api.trigger(&release).await;
    let indexed = api
        .submit_task(&json!({
            "action": {"kind": "command", "executable": "sh",
                       "args": ["-c", "echo indexing; echo 12 documents indexed; echo done"]},
            "priority": 7, "idempotency_key": "ci-4711",
            "concurrency": {"key": "search-index", "limit": 1}, "deadline": 600,
            "retry": {"max_attempts": 3}
        }))
        .await
        .id;
    // studiod's own worker has the label `linux` (its environment above); nobody has `gpu`.
    let flaky = api
        .submit_task(&json!({
            "action": {"kind": "command", "executable": "sh", "args": ["-c", "exit 3"]},
            "labels": ["linux"], "priority": 2
        }))
        .await
        .id;
    api.submit_task(&json!({
        "action": {"kind": "command", "executable": "true"}, "labels": ["gpu"]
    }))
    .await;
    for id in [&indexed, &flaky] {
        wait_task_ended(&api, id).await;
    }

    let browser = paired_browser(&studio).await;
    let shots: [(&str, &str, &str); 12] = [
        ("overview", "/", "daemon-facts"),
        ("schedules", "/schedules", "schedules-table"),
        (
            "schedule",
            &format!("/schedules/{nightly}"),
            "schedule-spec",
        ),
        ("runs", "/runs", "runs-table"),
        ("run", &format!("/runs/{ok}"), "log-view"),
        ("tasks", "/tasks", "tasks-table"),
        ("task", &format!("/tasks/{indexed}"), "attempts-table"),
        ("attention", "/attention", "attention-list"),
        ("approvals", "/approvals", "approval"),
        ("devices", "/devices", "devices-table"),
        ("commands", "/commands", "commands-table"),
        ("audit", "/audit", "audit-table"),
    ];
    // Each page at a desktop's width and a phone's, in light and dark.
    let looks = [
        ("", (1280, 900), "light"),
        ("-dark", (1280, 900), "dark"),
        ("-phone", (420, 900), "light"),
        ("-phone-dark", (420, 900), "dark"),
    ];
    for (suffix, (width, height), theme) in looks {
        browser.set_viewport(width, height).await;
        browser
            .execute(
                "localStorage.setItem('studio.theme', arguments[0]); return true;",
                vec![json!(theme)],
            )
            .await;
        for (name, path, testid) in &shots {
            open(&browser, &studio, path, testid).await;
            if *name == "run" || *name == "task" {
                browser.wait_for_text("log-text", "done", WAIT).await;
            }
            if *name == "attention" {
                browser
                    .wait_for_attr("attention-list", "data-state", &["loaded"], WAIT)
                    .await;
            }
            browser
                .screenshot(&dir.join(format!("{name}{suffix}.png")))
                .await;
        }
        // The form, refusing an impossible cron expression next to the field.
        open(&browser, &studio, "/schedules/new", "schedule-form").await;
        browser.fill("field-name", "weekly-digest").await;
        browser.fill("field-cron", "0 25 * * 1").await;
        browser.fill("field-executable", "sh").await;
        browser.fill("field-args", "-c\necho digest").await;
        browser.click("schedule-submit").await;
        browser.wait_for_testid("error-cron", WAIT).await;
        browser
            .screenshot(&dir.join(format!("schedule-new{suffix}.png")))
            .await;
    }

    for (suffix, _, _) in looks {
        for name in [
            "overview",
            "schedules",
            "schedule",
            "schedule-new",
            "runs",
            "run",
            "tasks",
            "task",
            "attention",
            "approvals",
            "devices",
            "commands",
        ] {
            let png =
                std::fs::read(dir.join(format!("{name}{suffix}.png"))).expect("screenshot written");
            assert!(png.starts_with(b"\x89PNG"), "{name}{suffix}.png is a PNG");
        }
    }
    browser.close().await;
}
