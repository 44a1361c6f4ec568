//! The Tasks pages rendered to strings with sample data: what a task runs and its labels,
//! escaped; the unmatched mark and its tooltip; a task's spec in words, its attempts
//! linked to their runs and its latest attempt's log; Cancel and Retry only where they
//! apply and only for a role that may; the overview's count; a run of a task linked to
//! its task.

use askama::Template;
use jiff::Timestamp;
use studio_api::{TaskDetail, TaskPage, schedule::RetryPolicy};
use studio_contract::role::Role;

use super::{DetailPage, ListPage, ListQuery, TaskCounts, TaskRow, retry_words};
use crate::{
    daemon::{PageState, Summary},
    pages::{Ctx, Nav, overview, runs},
};

const ME: &str = "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0001";
const TASK: &str = "0190dddd-0000-7000-8000-0000task0001";

fn ctx(role: Role, nav: Nav) -> Ctx {
    let mut ctx = Ctx::new(PageState::Paired, nav);
    ctx.now = "2026-01-01T12:00:00Z".parse::<Timestamp>().expect("ts");
    ctx.principal = Some(ME.into());
    ctx.role = role;
    ctx
}

/// A task as studiod sends it; its command, an argument and a label hold markup.
fn task(status: &str) -> serde_json::Value {
    serde_json::json!({
        "id": TASK, "status": status, "reason": null,
        "spec": {
            "action": {"kind": "command", "executable": "sh",
                       "args": ["-c", "<script>alert(1)</script>"]},
            "labels": ["<b>gpu</b>", "linux"], "priority": 7,
            "idempotency_key": "ci-<4711>",
            "concurrency": {"key": "deploy", "limit": 1}, "deadline": 600,
            "cwd": "/srv/app", "env": {"TOKEN": "s3cret-value"},
            "retry": {"max_attempts": 3, "backoff": {"initial": "5s", "max": "1m", "factor": 2},
                      "on": ["failed", "timed_out"], "exit_codes": [75]}
        },
        "spec_sha256": "ab".repeat(32), "unmatched": false, "attempts": 0,
        "next_attempt_at": null, "last_run_id": null, "submitted_by": "daemon",
        "created_at": "2026-01-01T11:50:00.000Z", "updated_at": "2026-01-01T11:50:00.000Z",
        "finished_at": null
    })
}

/// An attempt of [`TASK`] on the built-in worker.
fn attempt(n: i64, status: &str) -> serde_json::Value {
    serde_json::json!({
        "id": format!("0190eeee-0000-7000-8000-0000000run{n:02}"), "schedule_id": null,
        "schedule_name": null, "kind": "task", "status": status, "attempt": n,
        "counted": true, "chain_depth": 0, "task_id": TASK, "worker_id": "builtin",
        "created_at": "2026-01-01T11:50:01.000Z", "dispatched_at": "2026-01-01T11:50:02.000Z",
        "exit_code": if status == "failed" { Some(3) } else { None },
        "duration_ms": if status == "running" { None } else { Some(1500) },
        "stdout_bytes": 12, "stderr_bytes": 40
    })
}

fn detail(task: serde_json::Value, attempts: Vec<serde_json::Value>) -> TaskDetail {
    serde_json::from_value(serde_json::json!({"task": task, "attempts": attempts}))
        .expect("task detail")
}

fn list_page(tasks: Vec<serde_json::Value>, query: ListQuery) -> String {
    let ctx = ctx(Role::Operator, Nav::Tasks);
    let page: TaskPage =
        serde_json::from_value(serde_json::json!({"tasks": tasks, "next_cursor": "c/2"}))
            .expect("page");
    ListPage {
        rows: page.tasks.iter().map(|t| TaskRow::new(t, &ctx)).collect(),
        next: page.next_cursor,
        query,
        ctx,
    }
    .render()
    .expect("renders")
}

fn task_page(role: Role, d: &TaskDetail) -> String {
    DetailPage::new(ctx(role, Nav::Tasks))
        .with_detail(d)
        .render()
        .expect("renders")
}

#[test]
fn the_queue_shows_each_task_escaped_with_its_labels_and_status() {
    let mut waiting = task("queued");
    waiting["unmatched"] = true.into();
    let mut retrying = task("retry_wait");
    retrying["id"] = "0190dddd-0000-7000-8000-0000task0002".into();
    retrying["attempts"] = 1.into();
    retrying["next_attempt_at"] = "2026-01-01T12:00:30.000Z".into();
    let html = list_page(vec![waiting, retrying], ListQuery::default());
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(!html.contains("<b>gpu"), "{html}");
    assert!(
        html.contains(
            r#"<code class="command">sh -c &#39;&#60;script&#62;alert(1)&#60;/script&#62;&#39;</code>"#
        ),
        "{html}"
    );
    assert!(
        html.contains(r#"href="/tasks?label=%3Cb%3Egpu%3C%2Fb%3E" class="badge label">&#60;b&#62;gpu&#60;/b&#62;</a>"#),
        "{html}"
    );
    assert_eq!(html.matches(r#"data-testid="task-row""#).count(), 2);
    assert_eq!(
        html.matches(r#"data-testid="task-unmatched">unmatched<"#)
            .count(),
        1
    );
    assert!(
        html.contains(r#"class="badge s-unmatched" title="No worker has these labels"#),
        "{html}"
    );
    assert!(html.contains(
        r#"<span class="status s-retry_wait" data-testid="task-status">retry_wait</span>"#
    ));
    assert!(
        html.contains(
            r#"data-testid="task-next-attempt">next attempt <time datetime="2026-01-01T12:00:30Z""#
        ),
        "{html}"
    );
    assert!(html.contains(r#"data-testid="task-priority">7<"#));
    assert!(html.contains("by daemon token"), "{html}");
    assert!(html.contains(r#"href="/tasks/0190dddd-0000-7000-8000-0000task0001""#));
    assert!(html.contains(r#"data-testid="task-link" title="0190dddd-0000-7000-8000-0000task0001"><code>task0001</code>"#));
    assert!(html.contains(r#"href="/tasks?cursor=c%2F2""#), "{html}");
    assert!(html.contains(r#"aria-current="page" data-testid="nav-tasks""#));
}

#[test]
fn the_filters_stay_in_the_next_link_and_an_empty_list_says_why() {
    let query = ListQuery::from_pairs(vec![
        ("status".into(), "queued".into()),
        ("status".into(), "running,nonsense".into()),
        ("label".into(), " gpu ".into()),
    ]);
    assert_eq!(query.statuses, ["queued", "running"]);
    let html = list_page(vec![task("queued")], query.clone());
    assert!(html.contains(r#"value="queued" checked"#), "{html}");
    assert!(html.contains(r#"value="running" checked"#), "{html}");
    assert!(!html.contains(r#"value="failed" checked"#), "{html}");
    assert!(html.contains(r#"name="label" type="search" value="gpu""#));
    assert!(
        html.contains("/tasks?status=queued&#38;status=running&#38;label=gpu&#38;cursor=c%2F2")
            || html
                .contains("/tasks?status=queued&amp;status=running&amp;label=gpu&amp;cursor=c%2F2"),
        "{html}"
    );
    assert!(html.contains(r#"data-testid="filter-clear""#));
    let html = list_page(vec![], query);
    assert!(html.contains("No tasks match these filters."), "{html}");
    let html = list_page(vec![], ListQuery::default());
    assert!(html.contains("No tasks yet."), "{html}");
    assert!(!html.contains(r#"data-testid="filter-clear""#));
}

#[test]
fn a_running_task_shows_its_spec_in_words_its_attempts_and_a_live_log() {
    let mut running = task("running");
    running["attempts"] = 2.into();
    running["last_run_id"] = "0190eeee-0000-7000-8000-0000000run02".into();
    let d = detail(running, vec![attempt(1, "failed"), attempt(2, "running")]);
    let html = task_page(Role::Operator, &d);
    assert!(
        !html.contains("<script>alert") && !html.contains("<b>gpu"),
        "{html}"
    );
    assert!(
        html.contains(
            "<title>● sh -c &#39;&#60;script&#62;alert(1)&#60;/script&#62;&#39; · Task task0001 · Studio</title>"
        ),
        "{html}"
    );
    assert!(html.contains(r#"data-testid="task-command">sh -c &#39;&#60;script"#));
    assert!(html.contains(r#"data-testid="task-cwd"><code>/srv/app</code>"#));
    assert!(html.contains("<code>TOKEN</code> <span class=\"muted\">(values not shown)"));
    assert!(
        !html.contains("s3cret-value"),
        "an environment value is never shown"
    );
    assert!(html.contains(r#"data-testid="task-idempotency-key"><code>ci-&#60;4711&#62;</code>"#));
    assert!(
        html.contains(r#"data-testid="task-concurrency">key <code>deploy</code>, one at a time<"#)
    );
    assert!(html.contains(r#"data-testid="task-deadline">10 min<"#));
    assert!(html.contains(
        r#"data-testid="task-retry-policy">up to 3 attempts; after a failure (exit code 75) or a timeout, the next waits a random time up to 5s, ×2 after each attempt, at most 1m<"#
    ), "{html}");
    assert!(html.contains(r#"data-testid="task-submitted"><time"#));
    // The attempts, oldest first, each linked to its run.
    let rows: Vec<&str> = html
        .match_indices(r#"data-testid="attempt-row" data-run=""#)
        .map(|(i, m)| html[i + m.len()..].split('"').next().unwrap_or(""))
        .collect();
    assert_eq!(
        rows,
        [
            "0190eeee-0000-7000-8000-0000000run01",
            "0190eeee-0000-7000-8000-0000000run02"
        ]
    );
    assert!(html.contains(r#"href="/runs/0190eeee-0000-7000-8000-0000000run01" class="run-id" data-testid="attempt-link""#));
    assert!(html.contains(r#"data-testid="attempt-worker">builtin<"#));
    assert!(html.contains(r#"data-testid="attempt-exit">3<"#));
    // The latest attempt's log, live; the page follows its task.
    assert!(html.contains(
        r#"data-testid="log-view" data-run="0190eeee-0000-7000-8000-0000000run02" data-active="true""#
    ), "{html}");
    assert!(html.contains(r#"id="run-status" data-testid="log-run-status">running<"#));
    assert!(html.contains("Log of attempt 2"));
    assert!(html.contains(&format!(
        r#"id="task" data-task="{TASK}" data-status="running" data-last-run="0190eeee-0000-7000-8000-0000000run02""#
    )));
    // A running task is cancelled, not retried.
    assert!(html.contains(&format!(
        r#"data-url="/api/tasks/{TASK}/cancel" data-confirm="Cancel this task?" data-testid="task-cancel""#
    )), "{html}");
    assert!(!html.contains(r#"data-testid="task-retry""#));
}

#[test]
fn cancel_and_retry_are_offered_where_they_apply_and_only_to_operators() {
    let buttons = |status: &str, role: Role| {
        let html = task_page(role, &detail(task(status), vec![]));
        (
            html.contains(r#"data-testid="task-cancel""#),
            html.contains(r#"data-testid="task-retry""#),
            html.contains(r#"data-testid="role-note""#),
            html,
        )
    };
    for status in ["failed", "timed_out", "cancelled"] {
        let (cancel, retry, _, html) = buttons(status, Role::Operator);
        assert!(!cancel && retry, "{status}");
        assert!(html.contains(&format!(r#"data-url="/api/tasks/{TASK}/retry""#)));
        assert!(html.contains(">Retry</button>"), "{html}");
    }
    let (cancel, retry, _, html) = buttons("retry_wait", Role::Admin);
    assert!(cancel && retry);
    assert!(html.contains(">Retry now</button>"), "{html}");
    for status in ["queued", "leased"] {
        assert!(buttons(status, Role::Operator).0, "{status}");
    }
    let (cancel, retry, note, _) = buttons("completed", Role::Admin);
    assert!(!cancel && !retry && !note);
    for status in ["running", "failed"] {
        let (cancel, retry, note, html) = buttons(status, Role::Viewer);
        assert!(!cancel && !retry, "{status}");
        assert!(note, "{status}");
        assert!(!html.contains("data-action="), "{html}");
    }
}

#[test]
fn an_unmatched_task_says_nobody_serves_its_labels() {
    let mut waiting = task("queued");
    waiting["unmatched"] = true.into();
    let html = task_page(Role::Operator, &detail(waiting, vec![]));
    assert!(
        html.contains(r#"data-testid="task-unmatched">unmatched<"#),
        "{html}"
    );
    assert!(html.contains(r#"data-testid="task-unmatched-note">No worker has these labels"#));
    assert!(html.contains("No attempt yet: it waits for a worker that has its labels."));
    assert!(
        !html.contains(r#"data-testid="log-view""#),
        "no attempt, no log"
    );
    assert!(html.contains(r#"data-last-run="""#));
}

#[test]
fn a_failed_attempts_log_opens_on_stderr() {
    let mut failed = task("failed");
    failed["attempts"] = 1.into();
    failed["reason"] = "exit_code".into();
    failed["finished_at"] = "2026-01-01T11:51:00.000Z".into();
    let html = task_page(Role::Operator, &detail(failed, vec![attempt(1, "failed")]));
    assert!(
        html.contains(r#"data-active="false" data-open="stderr""#),
        "{html}"
    );
    assert!(html.contains(r#"data-testid="task-reason">(exit_code)<"#));
    assert!(html.contains("<title>✗ "));
    assert!(html.contains("· ended <time"), "{html}");
}

#[test]
fn retry_policies_read_as_sentences() {
    let policy =
        |json: serde_json::Value| -> RetryPolicy { serde_json::from_value(json).expect("policy") };
    assert_eq!(retry_words(None), "none: one attempt");
    assert_eq!(
        retry_words(Some(&policy(serde_json::json!({"max_attempts": 1})))),
        "none: one attempt"
    );
    assert_eq!(
        retry_words(Some(&policy(serde_json::json!({"max_attempts": 5})))),
        "up to 5 attempts; after a failure, a timeout or a lost worker, the next waits a \
         random time up to 5s, ×2 after each attempt, at most 5m"
    );
    assert_eq!(
        retry_words(Some(&policy(serde_json::json!({
            "max_attempts": 2, "backoff": {"initial": "30s", "max": "30s", "factor": 1},
            "on": ["failed"], "exit_codes": [75, 76, 77]
        })))),
        "up to 2 attempts; after a failure (exit codes 75, 76 or 77), the next waits a \
         random time up to 30s"
    );
}

#[test]
fn the_overview_counts_the_tasks_that_run_and_wait() {
    let census = |running: i64, waiting: i64| studio_api::TaskCensus { running, waiting };
    let counts = TaskCounts::of(&census(1, 3));
    assert_eq!(
        counts,
        TaskCounts {
            running: 1,
            waiting: 3,
        }
    );
    let summary: Summary = serde_json::from_value(serde_json::json!({
        "as_of": "2026-01-01T12:00:00Z",
        "daemon": {"version": "0.1.0", "started_at": "2026-01-01T09:00:00Z", "uptime_s": 10_800},
        "schedules": {"total": 0, "by_health": {}},
        "runs": {"active": 0, "total": 0, "since": "2025-12-31T13:00:00Z", "by_status": {},
                 "hourly": [], "running": [], "failed": [], "more_failed": false}
    }))
    .expect("summary");
    let render = |tasks: Option<TaskCounts>| {
        let mut home =
            overview::OverviewPage::new(ctx(Role::Viewer, Nav::Overview)).with_summary(&summary);
        home.tasks = tasks;
        home.render().expect("renders")
    };
    let html = render(Some(counts));
    assert!(
        html.contains(
            r#"<a href="/tasks?status=running" data-testid="tasks-running">1 running</a>"#
        ),
        "{html}"
    );
    assert!(
        html.contains(r#"data-testid="tasks-waiting">3 waiting</a>."#),
        "{html}"
    );
    let html = render(Some(TaskCounts::of(&census(0, 0))));
    assert!(html.contains("none running or waiting."), "{html}");
    assert!(
        !render(None).contains("tasks-summary"),
        "not counted, not said"
    );
}

#[test]
fn an_attempt_on_the_runs_pages_links_to_its_task() {
    let ctx = ctx(Role::Operator, Nav::Runs);
    let item: studio_api::RunListItem =
        serde_json::from_value(attempt(1, "completed")).expect("run");
    let html = runs::ListPage {
        rows: vec![runs::RunRow::list(&item, &ctx)],
        ctx: ctx.clone(),
        query: runs::ListQuery::default(),
        next: None,
    }
    .render()
    .expect("renders");
    assert!(
        html.contains(&format!(
            r#"<a href="/tasks/{TASK}" data-testid="run-task">task task0001</a>"#
        )),
        "{html}"
    );
    assert!(!html.contains("(deleted)"), "{html}");
    let mut run = attempt(1, "completed");
    run["transitions"] = serde_json::json!([]);
    let run: studio_api::RunDetail = serde_json::from_value(run).expect("run detail");
    let html = runs::DetailPage {
        run: Some(runs::RunRow::detail(&run, &ctx)),
        history: Vec::new(),
        approvals: Vec::new(),
        evidence: Vec::new(),
        ctx,
    }
    .render()
    .expect("renders");
    assert!(
        html.contains(&format!(
            r#"<a href="/tasks/{TASK}" data-testid="run-schedule">task task0001</a>"#
        )),
        "{html}"
    );
}

#[test]
fn the_audit_trail_links_a_task_it_names() {
    let ctx = ctx(Role::Admin, Nav::Audit);
    let entry: studio_api::AuditEntry = serde_json::from_value(serde_json::json!({
        "id": 9, "at": "2026-01-01T11:00:00.000Z", "kind": "task_cancelled", "epoch": "ep_1",
        "principal": ME, "role": "operator", "origin": "http://127.0.0.1:1",
        "object": format!("task:{TASK}"), "schedule_id": null, "detail": {"status": "running"}
    }))
    .expect("entry");
    let row = crate::pages::audit::AuditRow::new(&entry, &ctx);
    assert_eq!(
        row.object,
        Some((format!("/tasks/{TASK}"), "task task0001".to_owned()))
    );
}
