//! Firing on time, captured output, logs, and the schedules/runs API.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_every_second_fires_on_time_and_captures_output() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let schedule = api
        .create(&sh("hello", every("1s"), "echo hello; echo oops >&2"))
        .await;
    let id = schedule["id"].as_str().expect("id").to_owned();
    let created = ms(&schedule["created_at"]);

    let runs = api
        .wait_runs(&id, "a completed run", |runs| {
            runs.first().is_some_and(terminal)
        })
        .await;
    api.disable(&id).await;
    let first = &runs[0];
    let fired_after = ms(&first["created_at"]) - created;
    assert!(
        fired_after <= 3_000,
        "the first run came {fired_after} ms after creation: {first}"
    );
    let late = ms(&first["created_at"]) - ms(&first["scheduled_at"]);
    assert!(late < 2_000, "fired {late} ms after its instant: {first}");
    assert_eq!(first["kind"], "scheduled", "{first}");
    assert_eq!(first["schedule_id"], id.as_str());

    let run_id = first["id"].as_str().expect("run id");
    let run = api.run(run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["exit_code"], 0, "{run}");
    assert_eq!(run["stdout_tail"], "hello\n", "{run}");
    assert_eq!(run["stderr_tail"], "oops\n", "{run}");
    assert_eq!(run["stdout_bytes"], 6, "{run}");
    assert_eq!(run["stderr_bytes"], 5, "{run}");
    assert!(
        run["transitions"].as_array().is_some_and(|t| !t.is_empty()),
        "a run carries its transitions: {run}"
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

    let mut spec = command("api/one", every("1h"), "true", &[]);
    spec["description"] = json!("first");
    spec["cwd"] = json!("/");
    spec["policies"] = json!({"max_runs": 5});
    let before = now_ms();
    let created = api.create(&spec).await;
    let id = created["id"].as_str().expect("id").to_owned();
    assert_eq!(created["name"], "api/one");
    assert_eq!(created["enabled"], true);
    let next = ms(&created["next_fire_at"]);
    assert!(
        (before + 3_590_000..=now_ms() + 3_610_000).contains(&next),
        "every 1h fires an hour after creation: {created}"
    );
    assert_eq!(created["spec"]["cwd"], "/", "{created}");

    // Validation: 400 validation_failed, each problem with its field path.
    let api_ref = &api;
    let invalid = |spec: Value| async move {
        let api = api_ref;
        let (status, body) = api.post("/api/schedules", &spec).await;
        assert_eq!(status, 400, "{spec}: {body}");
        assert_eq!(body["code"], "validation_failed", "{body}");
        assert!(body["message"].is_string(), "{body}");
        body["errors"]
            .as_array()
            .unwrap_or_else(|| panic!("no errors[]: {body}"))
            .clone()
    };
    let errors = invalid(command(
        "api/never",
        json!({"cron": {"expression": "0 0 31 2 *"}}),
        "true",
        &[],
    ))
    .await;
    assert!(
        errors
            .iter()
            .any(|e| e["path"] == "trigger.cron.expression"),
        "{errors:?}"
    );
    let mut unknown = command("api/unknown", every("1h"), "true", &[]);
    unknown["policies"] = json!({"bogus": 1});
    let errors = invalid(unknown).await;
    assert!(
        errors.iter().any(|e| e["path"]
            .as_str()
            .is_some_and(|p| p.starts_with("policies"))
            && e["reason"].as_str().is_some_and(|r| r.contains("bogus"))),
        "the unknown field is named: {errors:?}"
    );
    let errors = invalid(command("api/rm", every("1h"), "rm", &["-rf", "/"])).await;
    assert!(
        errors.iter().any(|e| e["path"] == "action.executable"),
        "{errors:?}"
    );

    // Names are unique.
    let (status, body) = api.post("/api/schedules", &spec).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("name_taken")),
        "{body}"
    );

    let (status, got) = api.get(&format!("/api/schedules/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(got["id"], id.as_str());
    let (status, list) = api.get("/api/schedules?q=api/one").await;
    assert_eq!(status, 200, "{list}");
    assert!(
        list["schedules"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["id"] == id.as_str())),
        "{list}"
    );

    // PATCH: absent fields untouched, null clears an optional one.
    let (status, patched) = api
        .send(
            Method::PATCH,
            &format!("/api/schedules/{id}"),
            Some(&json!({"cwd": null})),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert!(
        patched["spec"].get("cwd").is_none_or(Value::is_null),
        "{patched}"
    );
    assert_eq!(patched["spec"]["description"], "first", "{patched}");
    assert_eq!(patched["spec"]["policies"]["max_runs"], 5, "{patched}");
    assert_eq!(
        patched["spec"]["trigger"],
        json!({"every": "1h"}),
        "{patched}"
    );
    let (status, patched) = api
        .send(
            Method::PATCH,
            &format!("/api/schedules/{id}"),
            Some(&json!({"description": "second"})),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["spec"]["description"], "second", "{patched}");
    assert!(
        patched["spec"].get("cwd").is_none_or(Value::is_null),
        "{patched}"
    );
    assert_eq!(patched["spec"]["policies"]["max_runs"], 5, "{patched}");
    // A patch that changes nothing writes nothing: same revision, same updated_at.
    let (status, same) = api
        .send(
            Method::PATCH,
            &format!("/api/schedules/{id}"),
            Some(&json!({"description": "second"})),
        )
        .await;
    assert_eq!(status, 200, "{same}");
    assert_eq!(same["revision"], patched["revision"], "{same}");
    assert_eq!(same["updated_at"], patched["updated_at"], "{same}");
    let (status, body) = api
        .send(
            Method::PATCH,
            &format!("/api/schedules/{id}"),
            Some(&json!({"trigger": {"every": "soon"}})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "validation_failed", "{body}");

    // Preview on the daemon agrees with the DST rules.
    let (status, preview) = api
        .post(
            "/api/schedules/preview",
            &json!({
                "trigger": {"cron": {"expression": "30 2 * * *", "timezone": "America/New_York"}},
                "count": 3,
                "from": "2026-03-07T12:00:00Z",
            }),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["timezone"], "America/New_York", "{preview}");
    let fires: Vec<i64> = preview["fires"]
        .as_array()
        .unwrap_or_else(|| panic!("no fires: {preview}"))
        .iter()
        .map(ms)
        .collect();
    let want: Vec<i64> = [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]
    .iter()
    .map(|s| ms(&json!(s)))
    .collect();
    assert_eq!(fires, want, "{preview}");

    // Missing ids.
    let (status, body) = api
        .get("/api/schedules/0190f0f0-0000-7000-8000-000000000000")
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("schedule_not_found")),
        "{body}"
    );
    let (status, body) = api
        .get("/api/runs/0190f0f0-0000-7000-8000-000000000000")
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("run_not_found")),
        "{body}"
    );
    let (status, body) = api
        .post(
            "/api/schedules/0190f0f0-0000-7000-8000-000000000000/trigger",
            &json!({}),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("schedule_not_found")),
        "{body}"
    );

    // DELETE.
    let (status, body) = api
        .send(Method::DELETE, &format!("/api/schedules/{id}"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"deleted": true, "id": id}));
    let (status, body) = api.get(&format!("/api/schedules/{id}")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("schedule_not_found")),
        "{body}"
    );
    // The name is free again.
    api.create(&spec).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_run_listing_pages_newest_first_and_filters() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let ok = api
        .create(&command("list/ok", every("1d"), "true", &[]))
        .await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let bad = api.create(&sh("list/bad", every("1d"), "exit 1")).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let mut made = Vec::new();
    for _ in 0..5 {
        let run = api.trigger(&ok).await;
        made.push(run["id"].as_str().expect("id").to_owned());
        api.finished(made.last().expect("a run")).await;
    }
    let failed = api.trigger(&bad).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let failed_run = api.finished(&failed).await;
    assert_eq!(failed_run["status"], "failed", "{failed_run}");
    assert_eq!(failed_run["exit_code"], 1, "{failed_run}");
    assert_eq!(api.schedule(&bad).await["health"], "failing");
    assert_eq!(api.schedule(&ok).await["health"], "healthy");

    // Pages of two: every run once, newest first.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut path = format!("/api/runs?schedule={ok}&limit=2");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={}", encode(c)));
        }
        let (status, page) = api.get(&path).await;
        assert_eq!(status, 200, "{page}");
        let runs = page["runs"].as_array().expect("runs").clone();
        assert!(runs.len() <= 2, "{page}");
        seen.extend(runs);
        pages += 1;
        assert!(pages <= 10, "the cursor never ends");
        match page["next_cursor"].as_str() {
            Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
            _ => break,
        }
    }
    let ids: Vec<&str> = seen.iter().map(|r| r["id"].as_str().expect("id")).collect();
    let mut want: Vec<&str> = made.iter().map(String::as_str).collect();
    want.reverse();
    assert_eq!(ids, want, "newest first, each once");
    assert!(pages >= 3, "five runs in pages of two");

    // A cursor pages only the list it came from: under other filters it is refused,
    // as is one that was altered; the page size may change.
    let (_, first) = api.get(&format!("/api/runs?schedule={ok}&limit=2")).await;
    let c = encode(first["next_cursor"].as_str().expect("a cursor"));
    let (status, page) = api
        .get(&format!("/api/runs?schedule={ok}&limit=3&cursor={c}"))
        .await;
    assert_eq!(status, 200, "{page}");
    for path in [
        format!("/api/runs?schedule={bad}&limit=2&cursor={c}"),
        format!("/api/runs?limit=2&cursor={c}"),
        format!("/api/runs?schedule={ok}&status=failed&cursor={c}"),
        format!("/api/runs?schedule={ok}&cursor=00{c}"),
        format!("/api/schedules?cursor={c}"),
    ] {
        let (status, body) = api.get(&path).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("invalid_cursor")),
            "{path}: {body}"
        );
    }

    let (_, completed) = api.get("/api/runs?status=completed&limit=100").await;
    let completed = completed["runs"].as_array().expect("runs").clone();
    assert_eq!(completed.len(), 5, "{completed:?}");
    let (_, failed_list) = api.get("/api/runs?status=failed").await;
    let failed_ids: Vec<&Value> = failed_list["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| &r["id"])
        .collect();
    assert_eq!(failed_ids, [&json!(failed)]);
    let (_, by_schedule) = api.get(&format!("/api/schedules/{bad}/runs")).await;
    assert_eq!(by_schedule["runs"].as_array().map(Vec::len), Some(1));
}

/// The cockpit's reads against the real daemon: runs listed by schedule name (with the
/// name, without tails), the health filter, and the summary's exact counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_summary_health_filter_and_runs_by_name() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let yearly = json!({"cron": {"expression": "0 3 1 1 *"}});
    let good = api.create(&sh("report", yearly.clone(), "echo ok")).await;
    let bad = api.create(&sh("mirror", yearly.clone(), "exit 3")).await;
    api.create(&sh("idle", yearly, "true")).await;
    for s in [&good, &bad] {
        let run = api.trigger(s["id"].as_str().expect("id")).await;
        api.finished(run["id"].as_str().expect("run id")).await;
    }

    let (status, page) = api.get("/api/runs?schedule_name=mirror").await;
    assert_eq!(status, 200, "{page}");
    let runs = page["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{page}");
    assert_eq!(runs[0]["schedule_name"], "mirror", "{page}");
    assert_eq!(runs[0]["status"], "failed", "{page}");
    assert!(
        runs[0].get("stdout_tail").is_none(),
        "a list carries no tails: {page}"
    );
    let (status, body) = api.get("/api/runs?schedule_name=nope").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("schedule_not_found"))
    );

    let (status, page) = api.get("/api/schedules?health=failing,never-fired").await;
    assert_eq!(status, 200, "{page}");
    let names: Vec<&str> = page["schedules"]
        .as_array()
        .expect("schedules")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["idle", "mirror"], "{page}");
    let (status, body) = api.get("/api/schedules?health=sad").await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_request")));

    let (status, summary) = api.get("/api/summary").await;
    assert_eq!(status, 200, "{summary}");
    assert!(summary["daemon"]["uptime_s"].is_u64(), "{summary}");
    assert!(
        ms(&summary["daemon"]["started_at"]) <= ms(&summary["as_of"]),
        "{summary}"
    );
    let health = &summary["schedules"]["by_health"];
    assert_eq!(summary["schedules"]["total"], 3, "{summary}");
    assert_eq!(
        (
            &health["healthy"],
            &health["failing"],
            &health["never-fired"],
            &health["overdue"]
        ),
        (&json!(1), &json!(1), &json!(1), &json!(0)),
        "{summary}"
    );
    let runs = &summary["runs"];
    assert_eq!(runs["total"], 2, "{summary}");
    assert_eq!(runs["active"], 0, "{summary}");
    assert_eq!(runs["by_status"], json!({"completed": 1, "failed": 1}));
    let hourly = runs["hourly"].as_array().expect("hourly");
    assert_eq!(hourly.len(), 24);
    // Both runs were created seconds ago: this hour (or, across an hour's turn, the last).
    let recent =
        |k: &str| hourly[22][k].as_u64().unwrap_or(0) + hourly[23][k].as_u64().unwrap_or(0);
    assert_eq!((recent("total"), recent("failed")), (2, 1), "{summary}");
    assert_eq!(good["health"], "never-fired");
    let report = api.schedule(good["id"].as_str().expect("id")).await;
    assert_eq!(report["health"], "healthy", "{report}");
    assert_eq!(report["last_outcome"], "completed", "{report}");
}

/// The runs page through the app: filtered by a schedule's name it lists that
/// schedule's runs; an unknown name is said plainly instead of an empty list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_runs_page_filters_by_schedule_name() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let schedule = api
        .create(&sh(
            "nightly",
            json!({"cron": {"expression": "0 3 1 1 *"}}),
            "true",
        ))
        .await;
    let run = api.trigger(schedule["id"].as_str().expect("id")).await;
    api.finished(run["id"].as_str().expect("run id")).await;
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
    assert!(html.contains(run["id"].as_str().expect("run id")), "{html}");
    let html = page("schedule_name=nope").await;
    assert!(html.contains(r#"data-testid="problem""#), "{html}");
    assert!(html.contains("No schedule is named"), "{html}");
    assert_eq!(html.matches(r#"data-testid="run-row""#).count(), 0);
}
