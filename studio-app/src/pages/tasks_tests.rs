//! The Tasks pages rendered to strings with sample data: the workers that serve the
//! queue (studiod's own first, a remote one's labels, a revoked one folded away, and a
//! list that could not be read); what a task runs and its labels, escaped; the
//! unmatched mark and its tooltip; a task's spec in words, its attempts
//! linked to their runs and its latest attempt's log; Cancel and Retry only where they
//! apply and only for a role that may; the overview's count; a run of a task linked to
//! its task; each attempt named by the worker that ran it.

use askama::Template;
use jiff::Timestamp;
use studio_api::{TaskDetail, TaskPage, WorkerList, schedule::RetryPolicy};
use studio_contract::role::Role;

use super::{
    DetailPage, ListPage, ListQuery, TaskCounts, TaskRow, WorkersView, retry_words, workers_answer,
};
use crate::{
    daemon::{DaemonError, PageState, Summary},
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

/// studiod's built-in worker, as `/api/workers` lists it first.
fn builtin() -> serde_json::Value {
    serde_json::json!({
        "id": "builtin", "name": "studiod", "builtin": true, "labels": ["linux"],
        "granted": ["linux"], "capacity": 4, "running": 1, "connected": true,
        "version": "0.1.0", "enrolled_at": null, "last_seen_at": null,
        "certificate_expires_at": null, "certificate_sha256": null, "revoked_at": null
    })
}

/// An enrolled worker; its name and a label hold markup.
fn remote(id: &str, name: &str, connected: bool) -> serde_json::Value {
    serde_json::json!({
        "id": id, "name": name, "builtin": false, "labels": ["<b>gpu</b>", "cuda"],
        "granted": ["<b>gpu</b>", "cuda", "arm64"], "capacity": 2, "running": 0,
        "connected": connected, "version": "0.1.0",
        "enrolled_at": "2026-01-01T10:00:00.000Z", "last_seen_at": "2026-01-01T11:55:00.000Z",
        "certificate_expires_at": "2026-04-01T10:00:00.000Z",
        "certificate_sha256": "cd".repeat(32), "revoked_at": null
    })
}

fn worker_list(workers: Vec<serde_json::Value>) -> WorkerList {
    serde_json::from_value(serde_json::json!({ "workers": workers })).expect("workers")
}

fn list_page(tasks: Vec<serde_json::Value>, query: ListQuery) -> String {
    list_page_with(tasks, query, |ctx| {
        WorkersView::of(&worker_list(vec![builtin()]), ctx)
    })
}

fn list_page_with(
    tasks: Vec<serde_json::Value>,
    query: ListQuery,
    workers: impl FnOnce(&Ctx) -> WorkersView,
) -> String {
    let ctx = ctx(Role::Operator, Nav::Tasks);
    let page: TaskPage =
        serde_json::from_value(serde_json::json!({"tasks": tasks, "next_cursor": "c/2"}))
            .expect("page");
    ListPage {
        rows: page.tasks.iter().map(|t| TaskRow::new(t, &ctx)).collect(),
        next: page.next_cursor,
        query,
        workers: workers(&ctx),
        ctx,
    }
    .render()
    .expect("renders")
}

/// The rows of the workers table `testid`: each one's name, state and load, in order.
fn worker_rows(html: &str, testid: &str) -> Vec<(String, String, String)> {
    let Some(start) = html.find(&format!(r#"data-testid="{testid}""#)) else {
        return Vec::new();
    };
    let table = &html[start
        ..html[start..]
            .find("</table>")
            .map_or(html.len(), |e| start + e)];
    let after = |row: &str, marker: &str| {
        row.split_once(marker)
            .and_then(|(_, rest)| rest.split_once('>'))
            .map(|(_, rest)| rest.split('<').next().unwrap_or("").to_owned())
            .unwrap_or_default()
    };
    table
        .split(r#"data-testid="worker-row""#)
        .skip(1)
        .map(|row| {
            (
                after(row, r#"data-testid="worker-name""#),
                after(row, r#"data-testid="worker-state""#),
                after(row, r#"data-testid="worker-load""#),
            )
        })
        .collect()
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
    assert!(
        html.contains(r#"data-testid="attempt-worker" title="builtin">studiod<"#),
        "{html}"
    );
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
        notifications: Vec::new(),
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

#[test]
fn the_workers_that_serve_the_queue_lead_the_page_studiod_first() {
    let mut revoked = remote("0190ffff-0000-7000-8000-00000worker3", "old-box", false);
    revoked["revoked_at"] = "2026-01-01T11:00:00.000Z".into();
    let mut busy = remote("0190ffff-0000-7000-8000-00000worker1", "<i>gpu-1</i>", true);
    busy["running"] = 2.into();
    let quiet = remote("0190ffff-0000-7000-8000-00000worker2", "laptop", false);
    let list = worker_list(vec![builtin(), revoked, busy, quiet]);
    let html = list_page_with(vec![task("queued")], ListQuery::default(), |ctx| {
        WorkersView::of(&list, ctx)
    });
    assert!(
        !html.contains("<i>gpu-1") && !html.contains("<b>gpu"),
        "{html}"
    );
    // The live ones in studiod's order, the built-in one first and marked so.
    assert_eq!(
        worker_rows(&html, "workers-table"),
        [
            ("studiod".into(), "connected".into(), "1 / 4".into()),
            (
                "&#60;i&#62;gpu-1&#60;/i&#62;".into(),
                "connected".into(),
                "2 / 2".into()
            ),
            ("laptop".into(), "disconnected".into(), "0 / 2".into()),
        ]
    );
    assert_eq!(
        html.matches(r#"data-testid="worker-builtin">built-in<"#)
            .count(),
        1,
        "{html}"
    );
    assert!(html.contains(
        r#"data-testid="worker-name" title="builtin · version 0.1.0">studiod</strong> <span class="badge builtin""#
    ), "{html}");
    assert!(
        html.contains(r#"<span class="status w-connected" data-testid="worker-state">"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<span class="status w-disconnected" data-testid="worker-state">"#),
        "{html}"
    );
    // Its labels, each leading to the tasks that need it; not those merely granted.
    assert!(
        html.contains(r#"<a href="/tasks?label=%3Cb%3Egpu%3C%2Fb%3E" class="badge label">&#60;b&#62;gpu&#60;/b&#62;</a><a href="/tasks?label=cuda" class="badge label">cuda</a>"#),
        "{html}"
    );
    assert!(html.contains(r#"<a href="/tasks?label=linux" class="badge label">linux</a>"#));
    assert!(!html.contains("arm64"), "{html}");
    // A disconnected one says when it was last heard from.
    assert!(
        html.contains(
            r#"data-testid="worker-since">last seen <time datetime="2026-01-01T11:55:00Z""#
        ),
        "{html}"
    );
    // The revoked one, folded after the rest, with its mark.
    assert_eq!(
        worker_rows(&html, "workers-revoked-table"),
        [("old-box".into(), "revoked".into(), "0 / 2".into())]
    );
    assert!(
        html.contains("<summary>1 revoked worker</summary>"),
        "{html}"
    );
    assert!(
        html.contains(r#"<span class="status w-revoked" data-testid="worker-state">revoked</span> <span class="muted" data-testid="worker-since">revoked <time"#),
        "{html}"
    );
    assert!(
        html.find(r#"data-testid="workers""#) < html.find(r#"data-testid="tasks-table""#),
        "the workers come before the queue"
    );
    // The section follows the daemon like the queue does.
    assert!(html.contains(r#"id="workers-live" data-live"#));
    assert!(!html.contains(r#"data-testid="workers-problem""#));
}

#[test]
fn with_only_studiod_nothing_is_folded_away() {
    let html = list_page(vec![], ListQuery::default());
    assert_eq!(
        worker_rows(&html, "workers-table"),
        [("studiod".into(), "connected".into(), "1 / 4".into())]
    );
    assert!(!html.contains("workers-revoked"), "{html}");
}

#[test]
fn workers_that_cannot_be_read_leave_the_rest_of_the_page() {
    let mut ctx = ctx(Role::Operator, Nav::Tasks);
    for failure in [
        DaemonError::Unavailable,
        DaemonError::NotFound,
        DaemonError::Other {
            status: 500,
            message: "database <locked>".into(),
        },
    ] {
        let why = workers_answer(Err(failure), &mut ctx).expect_err("failed");
        let why = why.expect("a reason to show");
        assert!(why.starts_with("The workers could not be read: "), "{why}");
        assert_eq!(ctx.state, PageState::Paired, "the page stays");
        assert!(ctx.problem.is_none(), "the page's own problem is not set");
        let html = list_page_with(vec![task("queued")], ListQuery::default(), |_| {
            WorkersView::failed(why.clone())
        });
        assert!(html.contains(r#"data-testid="workers-problem">The workers could not be read: "#));
        assert!(!html.contains("database <locked>"), "escaped: {html}");
        assert!(!html.contains(r#"data-testid="workers-table""#), "{html}");
        assert_eq!(
            html.matches(r#"data-testid="task-row""#).count(),
            1,
            "{html}"
        );
    }
    // A refusal fails the page closed, as every call's does.
    let refused = DaemonError::Refused {
        code: "epoch_ended".into(),
        message: "the epoch ended".into(),
    };
    assert_eq!(
        workers_answer(Err(refused), &mut ctx).expect_err("refused"),
        None
    );
    assert_eq!(ctx.state, PageState::EpochEnded);
    let list = worker_list(vec![builtin()]);
    let mut ctx = self::ctx(Role::Viewer, Nav::Tasks);
    assert_eq!(workers_answer(Ok(list.clone()), &mut ctx), Ok(list));
}

#[test]
fn each_attempt_names_the_worker_that_ran_it() {
    let mut running = task("running");
    running["attempts"] = 4.into();
    let mut second = attempt(2, "failed");
    second["worker_id"] = "0190ffff-0000-7000-8000-00000worker1".into();
    let mut third = attempt(3, "failed");
    third["worker_id"] = "0190ffff-0000-7000-8000-0000000gone9".into();
    let mut fourth = attempt(4, "running");
    fourth["worker_id"] = serde_json::Value::Null;
    let d = detail(running, vec![attempt(1, "failed"), second, third, fourth]);
    let named = |workers: Result<WorkerList, String>| {
        let page = DetailPage::new(ctx(Role::Operator, Nav::Tasks)).with_detail(&d);
        let page = match workers {
            Ok(list) => page.with_workers(&list.workers),
            Err(why) => DetailPage {
                workers_problem: Some(why),
                ..page
            },
        };
        let html = page.render().expect("renders");
        let names: Vec<String> = html
            .split(r#"data-testid="attempt-worker""#)
            .skip(1)
            .map(|cell| {
                cell.split_once('>')
                    .map(|(_, rest)| rest.split('<').next().unwrap_or("").to_owned())
                    .unwrap_or_default()
            })
            .collect();
        (names, html)
    };
    let list = worker_list(vec![
        builtin(),
        remote("0190ffff-0000-7000-8000-00000worker1", "<i>gpu-1</i>", true),
    ]);
    let (names, html) = named(Ok(list));
    assert_eq!(
        names,
        [
            "studiod",
            "&#60;i&#62;gpu-1&#60;/i&#62;",
            // No longer listed: its id.
            "0190ffff-0000-7000-8000-0000000gone9",
            "—"
        ]
    );
    assert!(html.contains(
        r#"data-testid="attempt-worker" title="0190ffff-0000-7000-8000-00000worker1">&#60;i&#62;gpu-1"#
    ), "{html}");
    assert!(!html.contains(r#"data-testid="workers-problem""#), "{html}");

    // Unread, the built-in one is still studiod and the rest show their ids, saying why.
    let (names, html) = named(Err(
        "The workers could not be read: the daemon is unavailable.".into(),
    ));
    assert_eq!(
        names,
        [
            "studiod",
            "0190ffff-0000-7000-8000-00000worker1",
            "0190ffff-0000-7000-8000-0000000gone9",
            "—"
        ]
    );
    assert!(
        html.contains(r#"data-testid="workers-problem">The workers could not be read: the daemon is unavailable. Attempts show their worker's id.</p>"#),
        "{html}"
    );
    assert_eq!(html.matches(r#"data-testid="attempt-row""#).count(), 4);
    // Only studiod's attempts: nothing is missing, nothing to say.
    let only_builtin = detail(task("failed"), vec![attempt(1, "failed")]);
    let html = DetailPage {
        workers_problem: Some("The workers could not be read: not found.".into()),
        ..DetailPage::new(ctx(Role::Operator, Nav::Tasks)).with_detail(&only_builtin)
    }
    .render()
    .expect("renders");
    assert!(!html.contains("workers-problem"), "{html}");
    assert!(html.contains(r#"title="builtin">studiod<"#), "{html}");
}
