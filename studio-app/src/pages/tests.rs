//! Templates rendered to strings with sample data: the key content, the state banner
//! contract the browser tests rely on, and the data-testids.

use askama::Template;
use jiff::Timestamp;
use studio_contract::role::Role;

use super::{Ctx, Nav, overview, runs, schedules};
use crate::daemon::{DaemonError, PageState, RunDetail, Schedule, Session, Summary};

fn now() -> Timestamp {
    "2026-01-01T12:00:00Z".parse().expect("ts")
}

fn paired(nav: Nav) -> Ctx {
    let mut ctx = Ctx::new(PageState::Paired, nav);
    ctx.now = now();
    ctx.epoch = Some("ep_123".into());
    ctx.principal = Some("ses_1".into());
    ctx.role = Role::Admin;
    ctx
}

fn schedule() -> Schedule {
    serde_json::from_value(serde_json::json!({
        "id": "sch_1", "name": "nightly <backup>", "enabled": true, "timezone": "Europe/Berlin",
        "spec": {"trigger": {"cron": {"expression": "0 2 * * *"}}, "action": {"kind": "command", "executable": "backup"}},
        "next_fire_at": "2026-01-02T01:00:00Z", "last_fired_at": "2026-01-01T01:00:00Z",
        "health": "failing", "last_outcome": "failed", "last_outcome_at": "2026-01-01T11:55:00Z", "runs_counted": 4, "spend_usd": 0.0, "revision": 3,
        "trigger_kind": "cron", "created_at": "2025-12-01T00:00:00Z", "updated_at": "2025-12-01T00:00:00Z",
        "recent_runs": [
            {"id": "r3", "status": "running", "created_at": "2026-01-01T11:59:00Z", "error_line": null},
            {"id": "r2", "status": "failed", "created_at": "2026-01-01T11:50:00Z", "error_line": "disk full"},
            {"id": "r1", "status": "completed", "created_at": "2026-01-01T10:00:00Z", "error_line": null}
        ]
    }))
    .expect("schedule")
}

/// A run as its page shows it, and as a list row (named `nightly`).
fn row(status: &str, ctx: &Ctx) -> runs::RunRow {
    runs::RunRow::detail(&run(status), ctx)
}

fn run(status: &str) -> RunDetail {
    serde_json::from_value(serde_json::json!({
        "id": "0190a8d2-7c1e-7000-8000-00000000run1", "schedule_id": "sch_1",
        "schedule_name": "nightly", "kind": "scheduled", "status": status,
        "error_line": "ERROR: relation \"sales\" does not exist",
        "stdout_tail": "fetching sales\n",
        "stderr_tail": "connecting\nERROR: relation \"sales\" does not exist\n",
        "attempt": 1, "counted": true, "chain_depth": 0,
        "created_at": "2026-01-01T11:00:00Z", "exit_code": 3, "duration_ms": 1200,
        "stdout_bytes": 10, "stderr_bytes": 0, "cost_usd": 0.25,
        "transitions": [{"from": null, "to": "queued", "reason": "fired", "at": "2026-01-01T11:00:00Z"},
                        {"from": "queued", "to": status, "reason": "dispatched", "at": "2026-01-01T11:00:01Z"}]
    }))
    .expect("run")
}

#[test]
fn schedules_list_renders_rows_filters_and_the_next_page() {
    let ctx = paired(Nav::Schedules);
    let page = schedules::ListPage {
        rows: vec![schedules::ScheduleRow::new(schedule(), &ctx)],
        ctx,
        query: schedules::ListQuery {
            q: "night".into(),
            enabled: "true".into(),
            health: "failing".into(),
            cursor: String::new(),
        },
        next: Some("c/2".into()),
    };
    let html = page.render().expect("renders");
    assert!(html.contains(r#"data-state="paired""#));
    assert!(html.contains(r#"data-testid="schedule-row" data-id="sch_1""#));
    assert!(
        html.contains("nightly &#60;backup&#62;") || html.contains("nightly &lt;backup&gt;"),
        "escaped"
    );
    assert!(html.contains("every day at 02:00 Europe/Berlin"));
    assert!(
        html.contains(r#"<time datetime="2026-01-02T01:00:00Z" title="2026-01-02 01:00:00 UTC""#)
    );
    assert!(html.contains(r#"data-testid="health-badge" data-health="failing">failing"#));
    // The strip: oldest first, each a link with its status, when, and why it failed.
    let marks: Vec<&str> = html
        .match_indices(r#"<a class="mark m-"#)
        .map(|(i, m)| html[i + m.len()..].split('"').next().unwrap_or(""))
        .collect();
    assert_eq!(marks, ["completed", "failed", "running"]);
    assert!(
        html.contains(r#"href="/runs/r2" title="failed 10 min ago: disk full""#),
        "{html}"
    );
    assert!(html.contains(r#"data-testid="schedule-running""#));
    assert!(
        html.contains(r#"data-testid="schedule-latest">failed 5 min ago<"#),
        "{html}"
    );
    assert!(html.contains(r#"value="true" selected"#));
    assert!(html.contains(r#"<option value="failing" selected>"#));
    assert!(
        html.contains("/schedules?q=night&amp;enabled=true&amp;health=failing&amp;cursor=c%2F2")
            || html.contains("health=failing&#38;cursor=c%2F2"),
        "{html}"
    );
    assert!(html.contains(r#"aria-current="page" data-testid="nav-schedules""#));
}

#[test]
fn schedule_detail_has_actions_spec_and_runs() {
    let ctx = paired(Nav::Schedules);
    let page = schedules::DetailPage {
        schedule: Some(schedules::ScheduleRow::new(schedule(), &ctx)),
        spec_json: schedules::spec_json(&schedule()),
        runs: vec![row("failed", &ctx)],
        history: vec![super::audit::AuditRow::new(&audit_entry(), &ctx)],
        ctx,
    };
    let html = page.render().expect("renders");
    for id in [
        "schedule-disable",
        "schedule-trigger",
        "schedule-delete",
        "schedule-spec",
        "run-row",
        "history-row",
        "schedule-audit-link",
    ] {
        assert!(html.contains(&format!(r#"data-testid="{id}""#)), "{id}");
    }
    assert!(html.contains("data-confirm="));
    assert!(html.contains("&quot;expression&quot;") || html.contains("&#34;expression&#34;"));
}

/// An audit row as studiod sends it, with markup where a name may hold any text.
fn audit_entry() -> studio_api::AuditEntry {
    serde_json::from_value(serde_json::json!({
        "id": 7, "at": "2026-01-01T11:00:00.000Z", "kind": "schedule_updated", "epoch": "ep_1",
        "principal": "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0001", "role": "operator",
        "origin": "http://127.0.0.1:1", "object": "schedule:s1", "schedule_id": "s1",
        "detail": {"name": "<b>nightly</b>", "revision": 3, "from_revision": 2}
    }))
    .expect("entry")
}

/// The audit page names who made each change (this browser, another by its short id,
/// the terminal), links what changed, and escapes every name.
#[test]
fn the_audit_page_says_who_changed_what() {
    let ctx = paired(Nav::Audit);
    let mut mine = audit_entry();
    mine.principal.clone_from(&ctx.principal);
    mine.kind = "run_triggered".into();
    mine.object = Some("run:r-1".into());
    let mut terminal = audit_entry();
    terminal.principal = Some("daemon".into());
    terminal.origin = None;
    let rows = [audit_entry(), mine, terminal]
        .iter()
        .map(|e| super::audit::AuditRow::new(e, &ctx))
        .collect();
    let html = super::audit::AuditPage {
        ctx,
        query: super::audit::AuditQuery {
            kind: "schedule_updated".into(),
            ..Default::default()
        },
        rows,
        next: Some("c/1".into()),
    }
    .render()
    .expect("renders");
    assert_eq!(html.matches(r#"data-testid="audit-row""#).count(), 3);
    assert!(html.contains("browser ffff0001"), "{html}");
    assert!(html.contains(">this browser"), "{html}");
    assert!(html.contains("the terminal (daemon token)"), "{html}");
    assert!(html.contains(r#"href="/schedules/s1""#) && html.contains(r#"href="/runs/r-1""#));
    // Objects are named as their row names them, escaped.
    assert!(
        html.contains(">schedule &#60;b&#62;nightly&#60;/b&#62;</a>")
            || html.contains(">schedule &lt;b&gt;nightly&lt;/b&gt;</a>"),
        "{html}"
    );
    assert!(!html.contains("<b>nightly"), "{html}");
    assert!(
        html.contains("from_revision=2 name=&#60;b&#62;nightly") || html.contains("name=&lt;b&gt;"),
        "{html}"
    );
    assert!(html.contains(r#"data-testid="filter-clear""#));
    assert!(html.contains(r#"<option value="schedule_updated" selected>"#));
    assert!(html.contains(r#"rel="next""#));
    assert!(html.contains(r#"aria-current="page" data-testid="nav-audit""#));
}

/// A page offers what the browser's role may do: a viewer no write, an operator no
/// delete (studiod refuses them anyway).
#[test]
fn pages_offer_what_the_role_may_do() {
    let render = |role: Role| {
        let mut ctx = paired(Nav::Schedules);
        ctx.role = role;
        schedules::DetailPage {
            schedule: Some(schedules::ScheduleRow::new(schedule(), &ctx)),
            spec_json: String::new(),
            runs: Vec::new(),
            history: Vec::new(),
            ctx,
        }
        .render()
        .expect("renders")
    };
    let viewer = render(Role::Viewer);
    assert!(!viewer.contains("data-action="), "{viewer}");
    assert!(viewer.contains(r#"data-testid="role-note""#));
    let operator = render(Role::Operator);
    assert!(operator.contains(r#"data-testid="schedule-trigger""#));
    assert!(!operator.contains(r#"data-testid="schedule-delete""#));
    assert!(render(Role::Admin).contains(r#"data-testid="schedule-delete""#));
}

#[test]
fn run_detail_has_transitions_outcome_and_log_view() {
    let ctx = paired(Nav::Runs);
    let mut triggered = audit_entry();
    triggered.kind = "run_triggered".into();
    triggered.principal.clone_from(&ctx.principal);
    let page = runs::DetailPage {
        run: Some(row("running", &ctx)),
        approvals: Vec::new(),
        evidence: Vec::new(),
        notifications: Vec::new(),
        history: vec![super::audit::AuditRow::new(&triggered, &ctx)],
        ctx,
    };
    let html = page.render().expect("renders");
    assert!(
        html.contains(r#"<li data-testid="run-history-row">run triggered by this browser <span class="muted">(operator)</span>"#),
        "{html}"
    );
    assert!(html.contains(
        r#"data-testid="log-view" data-run="0190a8d2-7c1e-7000-8000-00000000run1" data-active="true" data-open="stdout""#
    ));
    assert!(html.contains(r#"data-testid="run-cancel""#));
    assert!(
        html.contains("<title>● nightly · Run 0000run1 · Studio</title>"),
        "{html}"
    );
    assert!(!html.contains("run-why"), "a running run has not failed");
    assert!(html.contains("1.2 s"));
    assert!(html.contains("$0.2500"));
    assert_eq!(html.matches(r#"data-testid="transition""#).count(), 2);
    let ended = runs::DetailPage {
        run: Some(row("completed", &paired(Nav::Runs))),
        approvals: Vec::new(),
        evidence: Vec::new(),
        notifications: Vec::new(),
        history: Vec::new(),
        ctx: paired(Nav::Runs),
    };
    let ended = ended.render().expect("renders");
    assert!(!ended.contains("run-cancel"));
    assert!(
        !ended.contains("run-history"),
        "a run the clock fired: nobody asked"
    );
}

#[test]
fn a_failed_run_leads_with_its_name_and_why_it_failed() {
    let ctx = paired(Nav::Runs);
    let page = runs::DetailPage {
        run: Some(row("failed", &ctx)),
        approvals: Vec::new(),
        evidence: Vec::new(),
        notifications: Vec::new(),
        history: Vec::new(),
        ctx,
    };
    let html = page.render().expect("renders");
    assert!(
        html.contains("<title>✗ nightly · Run 0000run1 · Studio</title>"),
        "{html}"
    );
    assert!(html.contains(
        r#"<h1 data-testid="run-heading"><a href="/schedules/sch_1" data-testid="run-schedule">nightly</a>"#
    ));
    let why = html.find(r#"data-testid="run-why""#).expect("a why box");
    assert!(
        why < html
            .find(r#"data-testid="run-transitions""#)
            .expect("history")
    );
    assert!(html.contains(r#"data-testid="run-why-outcome">exited with code 3<"#));
    assert!(
        html.contains("connecting\nERROR: relation &quot;sales&quot; does not exist</pre>")
            || html.contains("connecting\nERROR: relation &#34;sales&#34; does not exist</pre>"),
        "{html}"
    );
    assert!(
        html.contains(r#"href="/api/runs/0190a8d2-7c1e-7000-8000-00000000run1/log?stream=stderr""#)
    );
    assert!(
        html.contains(r#"data-open="stderr""#),
        "the log opens on the failing stream"
    );
    assert!(html.contains(r#"data-stream="stderr" aria-pressed="true""#));
}

/// What a run's `notify` rules sent, newest first: a retry waiting, a dead letter with
/// the receiver's markup, a delivery.
fn deliveries() -> studio_api::DeliveryList {
    serde_json::from_value(serde_json::json!({"deliveries": [
        {"id": "dlv_3", "endpoint": "pager", "event": "timed_out",
         "run_id": "0190a8d2-7c1e-7000-8000-00000000run1", "schedule_id": "sch_1",
         "task_id": null, "status": "pending", "next_attempt_at": "2026-01-01T12:05:00Z",
         "created_at": "2026-01-01T11:59:00Z", "delivered_at": null, "attempts": [
            {"n": 1, "at": "2026-01-01T11:59:01Z", "took_ms": 10000, "status": null,
             "detail": "timed out after 10 s"}]},
        {"id": "dlv_2", "endpoint": "ops", "event": "failed",
         "run_id": "0190a8d2-7c1e-7000-8000-00000000run1", "schedule_id": "sch_1",
         "task_id": null, "status": "dead", "next_attempt_at": null,
         "created_at": "2026-01-01T09:00:00Z", "delivered_at": null, "attempts": [
            {"n": 1, "at": "2026-01-01T09:00:01Z", "took_ms": 12, "status": 500,
             "detail": "answered 500: no"},
            {"n": 2, "at": "2026-01-01T11:00:00Z", "took_ms": 30, "status": 502,
             "detail": "answered 502: <script>alert(1)</script>\nbad gateway"}]},
        {"id": "dlv_1", "endpoint": "chat", "event": "succeeded_after_failure",
         "run_id": "0190a8d2-7c1e-7000-8000-00000000run1", "schedule_id": "sch_1",
         "task_id": null, "status": "delivered", "next_attempt_at": null,
         "created_at": "2026-01-01T11:00:00Z", "delivered_at": "2026-01-01T11:00:01Z",
         "attempts": [{"n": 1, "at": "2026-01-01T11:00:01Z", "took_ms": 40, "status": 200,
                       "detail": null}]}
    ]}))
    .expect("deliveries")
}

#[test]
fn a_runs_notifications_show_each_delivery_and_the_last_answer() {
    let ctx = paired(Nav::Runs);
    let page = runs::DetailPage {
        run: Some(row("failed", &ctx)),
        approvals: Vec::new(),
        evidence: Vec::new(),
        history: Vec::new(),
        notifications: super::notifications::rows(Ok(deliveries()), &ctx),
        ctx,
    };
    let html = page.render().expect("renders");
    assert_eq!(html.matches(r#"data-testid="notification-row""#).count(), 3);
    let statuses: Vec<&str> = html
        .match_indices(r#"data-testid="notification-row" data-status=""#)
        .map(|(i, m)| html[i + m.len()..].split('"').next().unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["pending", "dead", "delivered"], "newest first");
    assert!(html.contains(">timed out<") && html.contains(">succeeded after failure<"));
    assert!(
        html.contains(r#"data-testid="notification-answer">timed out after 10 s<"#),
        "{html}"
    );
    // The receiver's text is escaped and on one line.
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(
        html.contains("<code>502</code> &#60;script&#62;alert(1)&#60;/script&#62; bad gateway")
            || html.contains("<code>502</code> &lt;script&gt;alert(1)&lt;/script&gt; bad gateway"),
        "{html}"
    );
    assert!(
        html.contains(r#"next attempt <time datetime="2026-01-01T12:05:00Z""#),
        "{html}"
    );
    assert!(
        html.contains(r#"delivered <time datetime="2026-01-01T11:00:01Z""#),
        "{html}"
    );
    assert!(
        html.contains(r#"last tried <time datetime="2026-01-01T11:00:00Z""#),
        "a dead one says when it was given up on: {html}"
    );
    assert!(html.contains(r#"data-testid="notification-answer"><code>200</code></td>"#));
    assert!(html.contains("studio notify deliveries --run 0190a8d2-7c1e-7000-8000-00000000run1"));
    // Below the history, above the log.
    let section = html
        .find(r#"data-testid="run-notifications""#)
        .expect("a section");
    assert!(
        section
            > html
                .find(r#"data-testid="run-transitions""#)
                .expect("history")
    );
    assert!(section < html.find(r#"data-testid="log-view""#).expect("log"));
}

#[test]
fn a_run_without_notifications_or_whose_list_failed_has_no_section() {
    let ctx = paired(Nav::Runs);
    let refused = DaemonError::Refused {
        code: "forbidden".into(),
        message: "no".into(),
    };
    for answer in [
        Ok(studio_api::DeliveryList {
            deliveries: Vec::new(),
        }),
        Err(DaemonError::NotFound),
        Err(refused),
    ] {
        let page = runs::DetailPage {
            run: Some(row("completed", &ctx)),
            approvals: Vec::new(),
            evidence: Vec::new(),
            history: Vec::new(),
            notifications: super::notifications::rows(answer, &ctx),
            ctx: ctx.clone(),
        };
        let html = page.render().expect("renders");
        assert!(!html.contains("Notifications"), "{html}");
        assert!(
            html.contains(r#"data-state="paired""#),
            "the page state stands"
        );
        assert!(html.contains(r#"data-testid="run-transitions""#));
    }
}

#[test]
fn runs_list_keeps_filters_in_the_next_link() {
    let ctx = paired(Nav::Runs);
    let page = runs::ListPage {
        rows: vec![row("failed", &ctx)],
        ctx,
        query: runs::ListQuery::from_pairs(vec![
            ("status".into(), "failed".into()),
            ("status".into(), "timed_out,nonsense".into()),
            ("q".into(), "night".into()),
        ]),
        next: Some("abc".into()),
    };
    let html = page.render().expect("renders");
    assert!(html.contains(r#"value="failed" checked"#), "{html}");
    assert!(html.contains(r#"value="timed_out" checked"#), "{html}");
    assert!(!html.contains(r#"value="completed" checked"#), "{html}");
    assert!(
        html.contains("/runs?q=night&amp;status=failed&amp;status=timed_out&amp;cursor=abc")
            || html.contains("/runs?q=night&#38;status=failed&#38;status=timed_out&#38;cursor=abc"),
        "{html}"
    );
    assert!(html.contains(r#"data-testid="filter-clear""#), "{html}");
    assert!(html.contains(r#"data-testid="run-status">failed"#));
    assert!(
        html.contains(r#"<td class="card-name" data-label="Schedule" data-testid="run-schedule"><a href="/schedules/sch_1">nightly</a>"#)
    );
    assert!(
        html.find(r#"data-testid="run-schedule""#) < html.find(r#"data-testid="run-link""#),
        "the name leads, the id is last"
    );
    assert!(html.contains("<code>0000run1</code>"), "ids are shortened");
    assert!(
        html.contains(r#"data-testid="run-error-line">ERROR: relation"#),
        "{html}"
    );
    assert!(
        html.contains(r#"name="q" type="search" value="night""#),
        "{html}"
    );
    assert!(
        html.contains(r#"<option value="nightly">"#) || !html.contains("nightly/"),
        "projects come from names with a /"
    );
}

#[test]
fn an_empty_list_says_whether_the_filters_matched_nothing() {
    let ctx = paired(Nav::Runs);
    let page = |query| runs::ListPage {
        rows: Vec::new(),
        ctx: ctx.clone(),
        query,
        next: None,
    };
    let html = page(runs::ListQuery::default()).render().expect("renders");
    assert!(html.contains("No runs yet."), "{html}");
    assert!(!html.contains(r#"data-testid="filter-clear""#), "{html}");
    let html = page(runs::ListQuery::from_pairs(vec![(
        "project".into(),
        "etl".into(),
    )]))
    .render()
    .expect("renders");
    assert!(html.contains("No runs match these filters."), "{html}");
    assert!(html.contains(r#"data-testid="filter-clear""#), "{html}");
    assert!(html.contains(r#"<option value="etl">"#), "{html}");
}

#[test]
fn a_schedule_link_filter_shows_the_name_or_keeps_the_id() {
    let ctx = paired(Nav::Runs);
    let linked = |rows: Vec<runs::RunRow>| runs::ListPage {
        rows,
        ctx: ctx.clone(),
        query: runs::ListQuery {
            schedule: "sch_1".into(),
            ..Default::default()
        },
        next: None,
    };
    let named = linked(vec![row("completed", &ctx)]);
    assert_eq!(named.scope_name(), "nightly");
    let html = named.render().expect("renders");
    assert!(
        html.contains(r#"Runs of <strong>nightly</strong>"#),
        "{html}"
    );
    assert!(html.contains(r#"<input type="hidden" name="schedule" value="sch_1">"#));
    assert!(
        html.contains(r#"href="/runs" data-testid="filter-unscope""#),
        "{html}"
    );
    let unnamed = linked(vec![]);
    assert_eq!(unnamed.scope_name(), "one schedule");
    let html = unnamed.render().expect("renders");
    assert!(html.contains(r#"<input type="hidden" name="schedule" value="sch_1">"#));
}

#[test]
fn a_preset_window_becomes_since_unless_one_is_typed() {
    let mut q = runs::ListQuery {
        window: "24h".into(),
        ..Default::default()
    };
    assert_eq!(runs::since(&q, now()), "2025-12-31T12:00:00Z");
    q.since = "2026-01-01T00:00:00Z".into();
    assert_eq!(runs::since(&q, now()), "2026-01-01T00:00:00Z");
    q = runs::ListQuery::default();
    assert_eq!(runs::since(&q, now()), "");
}

#[test]
fn picked_days_are_utc_midnights_the_last_one_included() {
    let q = runs::ListQuery::from_pairs(vec![
        ("from".into(), "2025-12-30".into()),
        ("to".into(), "2025-12-31".into()),
        ("window".into(), "24h".into()),
    ]);
    assert_eq!(runs::since(&q, now()), "2025-12-30T00:00:00Z");
    assert_eq!(runs::until(&q), "2026-01-01T00:00:00Z");
    let q = runs::ListQuery::from_pairs(vec![("from".into(), "30/12/2025".into())]);
    assert_eq!(runs::since(&q, now()), "", "a malformed day is not sent on");
}

#[test]
fn other_states_show_what_to_do_and_no_data() {
    for (state, words) in [
        (PageState::NotPaired, "studio pair"),
        (PageState::EpochEnded, "studio pair"),
        (PageState::Unavailable, "unavailable"),
    ] {
        let page = schedules::ListPage {
            ctx: Ctx::new(state, Nav::Schedules),
            query: schedules::ListQuery::default(),
            rows: vec![],
            next: None,
        };
        let html = page.render().expect("renders");
        assert!(html.contains(&format!(r#"data-state="{}""#, state.as_str())));
        assert!(html.contains(words), "{state:?}");
        assert!(
            !html.contains("schedule-filters"),
            "no content unless paired"
        );
    }
    let mut ctx = paired(Nav::Runs);
    ctx.fail(&DaemonError::NotFound);
    assert_eq!(ctx.problem.as_deref(), Some("not found"));
    ctx.fail(&DaemonError::Unavailable);
    assert_eq!(ctx.state, PageState::Unavailable);
}

fn summary() -> Summary {
    let hourly: Vec<serde_json::Value> = (0..24)
        .map(|i| {
            serde_json::json!({
                "hour": format!("2026-01-01T{:02}:00:00Z", i % 24),
                "total": if i == 22 { 2 } else { 0 },
                "failed": if i == 22 { 1 } else { 0 },
            })
        })
        .collect();
    let core = |r: RunDetail| serde_json::to_value(&r.run.core).expect("core");
    let mut running = run("running");
    running.run.core.dispatched_at = Some("2026-01-01T11:58:00Z".into());
    serde_json::from_value(serde_json::json!({
        "as_of": "2026-01-01T12:00:00Z",
        "daemon": {"version": "0.1.0", "started_at": "2026-01-01T09:00:00Z", "uptime_s": 10_800},
        "schedules": {"total": 3, "by_health": {"failing": 1, "healthy": 2, "overdue": 0},
                      "up_next": [{"schedule_id": "sch 1", "name": "nightly", "at": "2026-01-02T01:00:00Z"}]},
        "runs": {"active": 1, "total": 2, "since": "2025-12-31T13:00:00Z", "by_status": {"failed": 1, "completed": 1, "skipped": 0},
                 "hourly": hourly, "running": [core(running)], "failed": [core(run("failed"))],
                 "more_failed": true},
        "pending_approvals": 2,
    }))
    .expect("summary")
}

#[test]
fn overview_attention_and_devices_render() {
    let ctx = paired(Nav::Overview);
    let page = overview::OverviewPage::new(ctx).with_summary(&summary());
    assert_eq!(
        page.health,
        [("failing".to_owned(), 1), ("healthy".to_owned(), 2)],
        "worst first, zeros left out"
    );
    assert_eq!(page.runs_by_status.len(), 2);
    assert_eq!(page.uptime.as_ref().map(|(up, _)| up.as_str()), Some("3 h"));
    let html = page.render().expect("renders");
    assert!(html.contains(r#"data-testid="daemon-version">0.1.0"#));
    assert!(html.contains(r#"data-testid="runs-chart""#));
    assert!(
        html.find(r#"data-testid="running-now""#) < html.find(r#"data-testid="daemon-facts""#),
        "what runs comes first, the daemon's facts last"
    );
    assert!(
        html.contains(r#"data-url="/api/runs/0190a8d2-7c1e-7000-8000-00000000run1/cancel""#),
        "{html}"
    );
    assert!(
        html.contains(r#"data-since="2026-01-01T11:58:00Z""#),
        "{html}"
    );
    assert!(
        html.contains(
            r#"data-testid="failed-error-line">ERROR: relation &#34;sales&#34; does not exist"#
        ) || html.contains(
            r#"data-testid="failed-error-line">ERROR: relation &quot;sales&quot; does not exist"#
        ),
        "{html}"
    );
    assert!(html.contains("More failures"), "{html}");
    assert!(
        html.contains(r#"<a href="/schedules/sch%201">nightly</a>"#),
        "{html}"
    );
    assert!(html.contains("ep_123"));
    assert!(html.contains(r#"href="/attention""#));
    assert!(
        html.contains(
            r#"<strong data-testid="approvals-count">2</strong> runs wait for approval."#
        ),
        "{html}"
    );
    assert!(html.contains(r#"href="/approvals" data-testid="approvals-link""#));
    let att = overview::AttentionPage {
        ctx: paired(Nav::Attention),
    }
    .render()
    .expect("renders");
    assert!(att.contains(r#"data-testid="attention-list""#));
    let session: Session = serde_json::from_value(serde_json::json!({
        "id": "ses_1", "origin": "http://127.0.0.1:1", "role": "admin", "device": "Safari 18 on iPhone", "created_at": "2026-01-01T10:00:00Z",
        "last_seen_at": "2026-01-01T10:00:00Z", "expires_at": "2099-01-31T10:00:00Z", "current": true
    }))
    .expect("session");
    let lapsed: Session = serde_json::from_value(serde_json::json!({
        "id": "ses_0", "origin": "http://127.0.0.1:1", "role": "viewer", "expires_at": "2000-01-01T00:00:00Z",
        "created_at": "1999-12-01T00:00:00Z", "last_seen_at": "1999-12-01T00:00:00Z", "current": false
    }))
    .expect("session");
    let dev = overview::DevicesPage {
        devices: vec![
            overview::DeviceRow::new(&session, now()),
            overview::DeviceRow::new(&lapsed, now()),
        ],
        ctx: paired(Nav::Devices),
    }
    .render()
    .expect("renders");
    assert!(dev.contains(r#"data-testid="device-disconnect""#));
    assert!(dev.contains(r#"data-testid="device-row" data-id="ses_1""#));
    assert!(dev.contains(r#"<span data-testid="device-label">Safari 18 on iPhone</span>"#));
    assert!(dev.contains(r#"<span data-testid="device-label">unknown browser</span>"#));
    // The expiry in the viewer's zone, as every time on the pages (app.js reads `data-local`).
    assert!(
        dev.contains(r#"<td data-label="Expires" data-testid="device-expires"><time datetime="2099-01-31T10:00:00Z""#),
        "{dev}"
    );
    assert_eq!(dev.matches(r#"data-testid="device-revoke""#).count(), 0);
    assert!(
        dev.contains(r#"<td data-label="Action">expired</td>"#),
        "{dev}"
    );
}

#[test]
fn the_chart_draws_the_daemons_hourly_counts() {
    let bars = overview::bars(&summary().runs.hourly);
    assert_eq!(bars.len(), 24);
    // Two runs, one failed, in the second-to-last hour: full height, half failed.
    assert_eq!(bars[22].height, 60);
    assert_eq!(bars[22].failed_height, 30);
    assert_eq!(bars[22].label, "from 22:00 UTC: 2 runs, 1 failed");
    assert_eq!(
        bars[22].href, "/runs?since=2026-01-01T22%3A00%3A00Z&until=2026-01-01T23%3A00%3A00Z",
        "a bar opens its hour's runs"
    );
    assert_eq!(bars[23].height, 0);
    assert_eq!(bars[23].x, 230);
}
