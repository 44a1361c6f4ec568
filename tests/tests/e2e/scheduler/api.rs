//! Firing on time, captured output, logs, and the schedules/runs API.

use serde_json::{Value, json};
use studio_api::{
    Code, Deleted, FieldError, Preview, PreviewRequest, ProjectList, SchedulePage, Summary,
    schedule::CronTrigger,
};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_every_second_fires_on_time_and_captures_output() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let schedule = api
        .create(&sh("hello", every("1s"), "echo hello; echo oops >&2"))
        .await;
    let id = schedule.id;
    let created = ms(&schedule.created_at);

    let runs = api
        .wait_runs(&id, "a completed run", |runs| {
            runs.first().is_some_and(terminal)
        })
        .await;
    api.disable(&id).await;
    let first = &runs[0].core;
    let fired_after = ms(&first.created_at) - created;
    assert!(
        fired_after <= 3_000,
        "the first run came {fired_after} ms after creation: {first:?}"
    );
    let late = ms(&first.created_at) - ms_of(&first.scheduled_at);
    assert!(late < 2_000, "fired {late} ms after its instant: {first:?}");
    assert_eq!(first.kind, RunKind::Scheduled, "{first:?}");
    assert_eq!(first.schedule_id.as_deref(), Some(id.as_str()));

    let run_id = first.id.as_str();
    let run = api.run(run_id).await;
    let core = &run.run.core;
    assert_eq!(core.status, RunStatus::Completed, "{run:?}");
    assert_eq!(core.exit_code, Some(0), "{run:?}");
    assert_eq!(run.run.stdout_tail.as_deref(), Some("hello\n"), "{run:?}");
    assert_eq!(run.run.stderr_tail.as_deref(), Some("oops\n"), "{run:?}");
    assert_eq!(core.stdout_bytes, Some(6), "{run:?}");
    assert_eq!(core.stderr_bytes, Some(5), "{run:?}");
    assert!(
        !run.transitions.is_empty(),
        "a run carries its transitions: {run:?}"
    );

    let (status, size, bytes) = api.log(run_id, "stream=stdout").await;
    assert_eq!(
        (status, size, bytes.as_slice()),
        (200, Some(6), &b"hello\n"[..])
    );
    let (status, _, bytes) = api.log(run_id, "stream=stdout&offset=2").await;
    assert_eq!((status, bytes.as_slice()), (200, &b"llo\n"[..]));
    let (status, _, bytes) = api.log(run_id, "stream=stdout&offset=1&limit=3").await;
    assert_eq!((status, bytes.as_slice()), (200, &b"ell"[..]));
    let (status, size, bytes) = api.log(run_id, "stream=stderr").await;
    assert_eq!(
        (status, size, bytes.as_slice()),
        (200, Some(5), &b"oops\n"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_api_creates_validates_patches_and_deletes() {
    let studio = start(&[]);
    let api = Api::new(&studio);

    let spec = ScheduleSpec {
        target: None,
        description: "first".into(),
        cwd: Some("/".into()),
        policies: Policies {
            max_runs: Some(5),
            ..Policies::default()
        },
        ..command("api/one", every("1h"), "true", &[])
    };
    let before = now_ms();
    let created = api.create(&spec).await;
    let id = created.id.clone();
    assert_eq!(created.name, "api/one");
    assert!(created.enabled);
    let next = ms_of(&created.next_fire_at);
    assert!(
        (before + 3_590_000..=now_ms() + 3_610_000).contains(&next),
        "every 1h fires an hour after creation: {created:?}"
    );
    assert_eq!(created.spec.cwd.as_deref(), Some("/"), "{created:?}");

    // Validation: 400 validation_failed, each problem with its field path.
    let invalid = |reply: Reply| -> Vec<FieldError> {
        let body = reply.error();
        assert_eq!(
            (reply.status, body.code),
            (400, Code::ValidationFailed),
            "{reply}"
        );
        assert!(!body.errors.is_empty(), "no errors[]: {reply}");
        body.errors
    };
    let errors = invalid(
        api.post(
            "/api/schedules",
            &command("api/never", cron("0 0 31 2 *"), "true", &[]),
        )
        .await,
    );
    assert!(
        errors.iter().any(|e| e.path == "trigger.cron.expression"),
        "{errors:?}"
    );
    // An unknown policy, which no type can carry.
    let mut unknown: Value =
        serde_json::to_value(command("api/unknown", every("1h"), "true", &[])).expect("spec");
    unknown["policies"] = json!({"bogus": 1});
    let errors = invalid(api.post("/api/schedules", &unknown).await);
    assert!(
        errors
            .iter()
            .any(|e| e.path.starts_with("policies") && e.reason.contains("bogus")),
        "the unknown field is named: {errors:?}"
    );
    let errors = invalid(
        api.post(
            "/api/schedules",
            &command("api/rm", every("1h"), "rm", &["-rf", "/"]),
        )
        .await,
    );
    assert!(
        errors.iter().any(|e| e.path == "action.executable"),
        "{errors:?}"
    );

    // Names are unique.
    let reply = api.post("/api/schedules", &spec).await;
    assert_eq!(reply.code(), (409, Code::NameTaken), "{reply}");

    let got: Schedule = api.get(&format!("/api/schedules/{id}")).await.expect(200);
    assert_eq!(got.id, id);
    let list: SchedulePage = api.get("/api/schedules?q=api/one").await.expect(200);
    assert!(list.schedules.iter().any(|s| s.id == id), "{list:?}");

    // PATCH: absent fields untouched, null clears an optional one. (A merge patch is
    // partial JSON with nulls, which no API type spells.)
    let patch = async |body: Value| {
        api.send(
            Method::PATCH,
            &format!("/api/schedules/{id}"),
            Some(body.to_string()),
        )
        .await
    };
    let patched: Schedule = patch(json!({"cwd": null})).await.expect(200);
    assert!(patched.spec.cwd.is_none(), "{patched:?}");
    assert_eq!(patched.spec.description, "first", "{patched:?}");
    assert_eq!(patched.spec.policies.max_runs, Some(5), "{patched:?}");
    assert_eq!(patched.spec.trigger, every("1h"), "{patched:?}");
    let patched: Schedule = patch(json!({"description": "second"})).await.expect(200);
    assert_eq!(patched.spec.description, "second", "{patched:?}");
    assert!(patched.spec.cwd.is_none(), "{patched:?}");
    assert_eq!(patched.spec.policies.max_runs, Some(5), "{patched:?}");
    // A patch that changes nothing writes nothing: same revision, same updated_at.
    let same: Schedule = patch(json!({"description": "second"})).await.expect(200);
    assert_eq!(same.revision, patched.revision, "{same:?}");
    assert_eq!(same.updated_at, patched.updated_at, "{same:?}");
    let reply = patch(json!({"trigger": {"every": "soon"}})).await;
    assert_eq!(reply.code(), (400, Code::ValidationFailed), "{reply}");

    // Preview on the daemon agrees with the DST rules.
    let preview: Preview = api
        .post(
            "/api/schedules/preview",
            &PreviewRequest {
                trigger: Trigger::Cron(CronTrigger {
                    expression: "30 2 * * *".into(),
                    timezone: Some("America/New_York".into()),
                }),
                count: Some(3),
                from: Some("2026-03-07T12:00:00Z".into()),
            },
        )
        .await
        .expect(200);
    assert_eq!(
        preview.timezone.as_deref(),
        Some("America/New_York"),
        "{preview:?}"
    );
    let fires: Vec<i64> = preview.fires.iter().map(|f| ms(f)).collect();
    let want: Vec<i64> = [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]
    .iter()
    .map(|s| ms(s))
    .collect();
    assert_eq!(fires, want, "{preview:?}");

    // Missing ids.
    let reply = api
        .get("/api/schedules/0190f0f0-0000-7000-8000-000000000000")
        .await;
    assert_eq!(reply.code(), (404, Code::ScheduleNotFound), "{reply}");
    let reply = api
        .get("/api/runs/0190f0f0-0000-7000-8000-000000000000")
        .await;
    assert_eq!(reply.code(), (404, Code::RunNotFound), "{reply}");
    let reply = api
        .act("/api/schedules/0190f0f0-0000-7000-8000-000000000000/trigger")
        .await;
    assert_eq!(reply.code(), (404, Code::ScheduleNotFound), "{reply}");

    // DELETE.
    let deleted: Deleted = api
        .delete(&format!("/api/schedules/{id}"))
        .await
        .expect(200);
    assert_eq!(
        deleted,
        Deleted {
            deleted: true,
            id: id.clone()
        }
    );
    let reply = api.get(&format!("/api/schedules/{id}")).await;
    assert_eq!(reply.code(), (404, Code::ScheduleNotFound), "{reply}");
    // The name is free again.
    api.create(&spec).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_run_listing_pages_newest_first_and_filters() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let ok = api
        .create(&command("list/ok", every("1d"), "true", &[]))
        .await
        .id;
    let bad = api.create(&sh("list/bad", every("1d"), "exit 1")).await.id;
    let mut made = Vec::new();
    for _ in 0..5 {
        let run = api.trigger(&ok).await;
        made.push(run.core.id);
        api.finished(made.last().expect("a run")).await;
    }
    let failed = api.trigger(&bad).await.core.id;
    let failed_run = api.finished(&failed).await;
    assert_eq!(
        failed_run.run.core.status,
        RunStatus::Failed,
        "{failed_run:?}"
    );
    assert_eq!(failed_run.run.core.exit_code, Some(1), "{failed_run:?}");
    assert_eq!(api.schedule(&bad).await.health, "failing");
    assert_eq!(api.schedule(&ok).await.health, "healthy");

    // Pages of two: every run once, newest first.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut path = format!("/api/runs?schedule={ok}&limit=2");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={}", encode(c)));
        }
        let page: RunPage = api.get(&path).await.expect(200);
        assert!(page.runs.len() <= 2, "{page:?}");
        seen.extend(page.runs);
        pages += 1;
        assert!(pages <= 10, "the cursor never ends");
        match page.next_cursor {
            Some(c) if !c.is_empty() => cursor = Some(c),
            _ => break,
        }
    }
    let ids: Vec<&str> = seen.iter().map(|r| r.core.id.as_str()).collect();
    let mut want: Vec<&str> = made.iter().map(String::as_str).collect();
    want.reverse();
    assert_eq!(ids, want, "newest first, each once");
    assert!(pages >= 3, "five runs in pages of two");

    // A cursor pages only the list it came from: under other filters it is refused,
    // as is one that was altered; the page size may change.
    let first: RunPage = api
        .get(&format!("/api/runs?schedule={ok}&limit=2"))
        .await
        .json();
    let c = encode(first.next_cursor.as_deref().expect("a cursor"));
    let reply = api
        .get(&format!("/api/runs?schedule={ok}&limit=3&cursor={c}"))
        .await;
    assert_eq!(reply.status, 200, "{reply}");
    for path in [
        format!("/api/runs?schedule={bad}&limit=2&cursor={c}"),
        format!("/api/runs?limit=2&cursor={c}"),
        format!("/api/runs?schedule={ok}&status=failed&cursor={c}"),
        format!("/api/runs?schedule={ok}&cursor=00{c}"),
        format!("/api/schedules?cursor={c}"),
    ] {
        let reply = api.get(&path).await;
        assert_eq!(reply.code(), (400, Code::InvalidCursor), "{path}: {reply}");
    }

    let completed: RunPage = api.get("/api/runs?status=completed&limit=100").await.json();
    assert_eq!(completed.runs.len(), 5, "{completed:?}");
    let failed_list: RunPage = api.get("/api/runs?status=failed").await.json();
    let failed_ids: Vec<&str> = failed_list
        .runs
        .iter()
        .map(|r| r.core.id.as_str())
        .collect();
    assert_eq!(failed_ids, [failed.as_str()]);

    // Several statuses at once, a name's part in any case, a project (before the `/`).
    let count = |path: &str| {
        let api = &api;
        let path = path.to_owned();
        async move { api.get(&path).await.json::<RunPage>().runs.len() }
    };
    assert_eq!(
        count("/api/runs?status=failed,completed&limit=100").await,
        6
    );
    assert_eq!(count("/api/runs?status=running,queued").await, 0);
    assert_eq!(count("/api/runs?q=BAD&limit=100").await, 1);
    assert_eq!(count("/api/runs?q=st/o&limit=100").await, 5);
    assert_eq!(count("/api/runs?project=list&limit=100").await, 6);
    assert_eq!(count("/api/runs?project=lis&limit=100").await, 0);
    assert_eq!(count("/api/runs?project=list&status=failed").await, 1);
    // What a browser types is text, never a pattern or statement: wildcards, quotes and
    // a `/` inside a project match nothing here.
    for hostile in [
        "q=%25",
        "q=_",
        "q=%27%20OR%201%3D1--",
        "project=_ist",
        "project=%25",
        "project=list%2Fok",
        "project=list%27%20OR%20%271%27%3D%271",
    ] {
        assert_eq!(
            count(&format!("/api/runs?{hostile}&limit=100")).await,
            0,
            "{hostile}"
        );
    }
    let reply = api.get("/api/runs?status=failed,finished").await;
    assert_eq!(reply.code(), (400, Code::BadRequest), "{reply}");
    assert!(reply.text.contains("finished"), "{reply}");
    // A cursor belongs to its statuses too.
    let two: RunPage = api.get("/api/runs?status=completed&limit=2").await.json();
    let c = encode(two.next_cursor.as_deref().expect("a cursor"));
    let reply = api
        .get(&format!(
            "/api/runs?status=completed,failed&limit=2&cursor={c}"
        ))
        .await;
    assert_eq!(reply.code(), (400, Code::InvalidCursor), "{reply}");
    let by_schedule: RunPage = api.get(&format!("/api/schedules/{bad}/runs")).await.json();
    assert_eq!(by_schedule.runs.len(), 1);
}

/// The cockpit's reads against the real daemon: runs listed by schedule name (with the
/// name, without tails), the health filter, and the summary's exact counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_summary_health_filter_and_runs_by_name() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let yearly = cron("0 3 1 1 *");
    let good = api.create(&sh("report", yearly.clone(), "echo ok")).await;
    let bad = api.create(&sh("mirror", yearly.clone(), "exit 3")).await;
    api.create(&sh("idle", yearly, "true")).await;
    for s in [&good, &bad] {
        let run = api.trigger(&s.id).await;
        api.finished(&run.core.id).await;
    }

    let reply = api.get("/api/runs?schedule_name=mirror").await;
    let page: RunPage = reply.expect(200);
    assert_eq!(page.runs.len(), 1, "{reply}");
    assert_eq!(
        page.runs[0].core.schedule_name.as_deref(),
        Some("mirror"),
        "{reply}"
    );
    assert_eq!(page.runs[0].core.status, RunStatus::Failed, "{reply}");
    // The wire shape on purpose: a list row has no tail field at all.
    let raw: Value = reply.json();
    assert!(
        raw["runs"][0].get("stdout_tail").is_none(),
        "a list carries no tails: {reply}"
    );
    let reply = api.get("/api/runs?schedule_name=nope").await;
    assert_eq!(reply.code(), (404, Code::ScheduleNotFound));

    let page: SchedulePage = api
        .get("/api/schedules?health=failing,never-fired")
        .await
        .expect(200);
    let names: Vec<&str> = page.schedules.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["idle", "mirror"], "{page:?}");
    let reply = api.get("/api/schedules?health=sad").await;
    assert_eq!(reply.code(), (400, Code::BadRequest));

    let summary: Summary = api.get("/api/summary").await.expect(200);
    assert!(summary.daemon.uptime_s >= 0, "{summary:?}");
    assert!(
        ms(&summary.daemon.started_at) <= ms(&summary.as_of),
        "{summary:?}"
    );
    let health = |k: &str| summary.schedules.by_health.get(k).copied();
    assert_eq!(summary.schedules.total, 3, "{summary:?}");
    assert_eq!(
        (
            health("healthy"),
            health("failing"),
            health("never-fired"),
            health("overdue")
        ),
        (Some(1), Some(1), Some(1), Some(0)),
        "{summary:?}"
    );
    let runs = &summary.runs;
    assert_eq!(runs.total, 2, "{summary:?}");
    assert_eq!(runs.active, 0, "{summary:?}");
    assert_eq!(
        runs.by_status,
        [("completed".to_owned(), 1), ("failed".to_owned(), 1)].into()
    );
    let hourly = &runs.hourly;
    assert_eq!(hourly.len(), 24);
    // Both runs were created seconds ago: this hour (or, across an hour's turn, the last).
    let recent = (
        hourly[22].total + hourly[23].total,
        hourly[22].failed + hourly[23].failed,
    );
    assert_eq!(recent, (2, 1), "{summary:?}");
    assert_eq!(good.health, "never-fired");
    let report = api.schedule(&good.id).await;
    assert_eq!(report.health, "healthy", "{report:?}");
    assert_eq!(
        report.last_outcome.as_deref(),
        Some("completed"),
        "{report:?}"
    );

    // Up next: enabled schedules by their next fire (the same instant here: by name).
    let up_next = |s: &Summary| -> Vec<String> {
        s.schedules.up_next.iter().map(|n| n.name.clone()).collect()
    };
    assert_eq!(
        up_next(&summary),
        ["idle", "mirror", "report"],
        "{summary:?}"
    );
    let fire = &summary.schedules.up_next[1];
    assert_eq!(
        (fire.schedule_id.as_str(), fire.at.as_str()),
        (
            bad.id.as_str(),
            bad.next_fire_at.as_deref().unwrap_or_default()
        )
    );
    api.disable(&bad.id).await;
    let summary: Summary = api.get("/api/summary").await.expect(200);
    assert_eq!(up_next(&summary), ["idle", "report"], "{summary:?}");
}

/// The runs page through the app: filtered by a schedule's name it lists that
/// schedule's runs; an unknown name is said plainly instead of an empty list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_runs_page_filters_by_schedule_name() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let schedule = api.create(&sh("nightly", cron("0 3 1 1 *"), "true")).await;
    let run = api.trigger(&schedule.id).await;
    api.finished(&run.core.id).await;
    let cookie = crate::paired_cookie(&studio).await;
    let page = async |query: &str| {
        let resp = studio_tests::http()
            .get(studio.app_url(&format!("/runs?{query}")))
            .header("cookie", &cookie)
            .send()
            .await
            .expect("runs page");
        assert_eq!(resp.status(), 200);
        resp.text().await.expect("page body")
    };
    let html = page("schedule_name=nightly").await;
    assert_eq!(
        html.matches(r#"data-testid="run-row""#).count(),
        1,
        "{html}"
    );
    assert!(html.contains(&run.core.id), "{html}");
    let html = page("schedule_name=nope").await;
    assert!(html.contains(r#"data-testid="problem""#), "{html}");
    assert!(html.contains("No schedule is named"), "{html}");
    assert_eq!(html.matches(r#"data-testid="run-row""#).count(), 0);
    // A filter the daemon refuses (an instant edited in the address) is said plainly.
    let html = page("since=yesterday").await;
    assert!(
        html.contains("These filters cannot be used: since must be an RFC 3339 instant"),
        "{html}"
    );
    assert_eq!(html.matches(r#"data-testid="run-row""#).count(), 0);
    // An unknown status in the address is dropped, not sent on.
    let html = page("status=nonsense").await;
    assert_eq!(html.matches(r#"data-testid="run-row""#).count(), 1);
}

/// `GET /api/projects`: each project a name names (before its first `/`), counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_lists_projects_by_name_with_their_counts() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    for name in ["web/ping", "etl/load", "etl/nightly/sales", "plain"] {
        api.create(&sh(name, cron("0 3 1 1 *"), "true")).await;
    }
    let list: ProjectList = api.get("/api/projects").await.expect(200);
    let got: Vec<(&str, i64)> = list
        .projects
        .iter()
        .map(|p| (p.name.as_str(), p.schedules))
        .collect();
    assert_eq!(
        got,
        [("etl", 2), ("web", 1)],
        "a name without `/` is no project"
    );
}
