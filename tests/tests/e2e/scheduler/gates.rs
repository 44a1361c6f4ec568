//! The gates, in order: overlap, budget, rate limit, `max_runs`, the global cap; and
//! what a manual trigger may bypass.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_max_runs_holds_under_50_concurrent_triggers() {
    let studio = start(&[]);
    let api = std::sync::Arc::new(Api::new(&studio));
    let spec = with_policies(
        command("capped", every("1d"), "true", &[]),
        json!({"max_runs": 3, "overlap": "allow"}),
    );
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();

    let mut set = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let api = api.clone();
        let id = id.clone();
        set.spawn(async move {
            api.post(&format!("/api/schedules/{id}/trigger"), &json!({}))
                .await
        });
    }
    let answers = set.join_all().await;
    let accepted = answers.iter().filter(|(s, _)| *s == 202).count();
    let refused = answers
        .iter()
        .filter(|(s, b)| *s == 409 && b["code"] == "max_runs_reached")
        .count();
    assert_eq!(
        (accepted, refused),
        (3, 47),
        "every answer: {:?}",
        answers
            .iter()
            .map(|(s, b)| (s, &b["code"]))
            .collect::<Vec<_>>()
    );

    let runs = api
        .wait_runs(&id, "three finished runs", |runs| {
            runs.len() >= 3 && runs.iter().all(terminal)
        })
        .await;
    assert_eq!(runs.len(), 3, "{runs:?}");
    let schedule = api.schedule(&id).await;
    assert_eq!(schedule["runs_counted"], 3, "{schedule}");
    let (status, body) = api
        .post(&format!("/api/schedules/{id}/trigger"), &json!({}))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("max_runs_reached"))
    );
    // "once reached, the schedule is disarmed": no next fire is announced.
    assert!(
        schedule["next_fire_at"].is_null(),
        "a schedule at max_runs is disarmed: {schedule}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_overlap_skip_records_skipped_runs_while_one_runs() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let spec = with_policies(
        command("overlap/skip", every("1s"), "sleep", &["3"]),
        json!({"overlap": "skip"}),
    );
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    api.wait_runs(&id, "a finished run and overlap skips", |runs| {
        runs.iter().any(|r| r["status"] == "completed")
            && runs.iter().any(|r| is(r, "skipped", "overlap"))
    })
    .await;
    api.disable(&id).await;
    let runs = api
        .wait_runs(&id, "every run to end", |runs| runs.iter().all(terminal))
        .await;
    let ran: Vec<&Value> = runs.iter().filter(|r| r["status"] != "skipped").collect();
    for (i, a) in ran.iter().enumerate() {
        for b in &ran[i + 1..] {
            assert!(
                !overlapping(a, b),
                "two runs overlapped under skip: {a} {b}"
            );
        }
    }
    for skipped in runs.iter().filter(|r| r["status"] == "skipped") {
        assert_eq!(skipped["reason"], "overlap", "{skipped}");
        assert!(
            skipped["dispatched_at"].is_null(),
            "a skipped run never ran: {skipped}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_overlap_allow_runs_concurrently() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let spec = with_policies(
        command("overlap/allow", every("1s"), "sleep", &["3"]),
        json!({"overlap": "allow"}),
    );
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let runs = api
        .wait_runs(&id, "two completed runs", |runs| {
            runs.iter().filter(|r| r["status"] == "completed").count() >= 2
        })
        .await;
    api.disable(&id).await;
    let done: Vec<&Value> = runs.iter().filter(|r| r["status"] == "completed").collect();
    assert!(
        overlapping(done[0], done[1]),
        "allow lets the next fire run beside the first: {} {}",
        done[0],
        done[1]
    );
    assert!(
        !runs.iter().any(|r| r["status"] == "skipped"),
        "nothing skipped under allow: {runs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_overlap_replace_cancels_the_running_one() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let spec = with_policies(
        command("overlap/replace", every("2s"), "sleep", &["300"]),
        json!({"overlap": "replace"}),
    );
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let runs = api
        .wait_runs(&id, "a replaced run and its successor running", |runs| {
            runs.iter().any(|r| is(r, "cancelled", "replaced")) && runs.last().is_some_and(running)
        })
        .await;
    api.disable(&id).await;
    let replaced = runs
        .iter()
        .find(|r| is(r, "cancelled", "replaced"))
        .expect("a replaced run");
    let successor = runs.last().expect("a successor");
    assert!(
        ms(&successor["dispatched_at"]) >= ms(&replaced["finished_at"]),
        "replace cancels first, then fires: {replaced} {successor}"
    );
    let (status, _) = api
        .post(
            &format!("/api/runs/{}/cancel", successor["id"].as_str().expect("id")),
            &json!({}),
        )
        .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_global_cap_queues_and_loses_nothing() {
    let studio = start(&[("STUDIO_MAX_CONCURRENT_RUNS", "1")]);
    let api = Api::new(&studio);
    let a = api
        .create(&command("cap/a", every("1d"), "sleep", &["2"]))
        .await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let b = api
        .create(&command("cap/b", every("1d"), "sleep", &["2"]))
        .await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (ra, rb) = tokio::join!(api.trigger(&a), api.trigger(&b));
    let ids = [
        ra["id"].as_str().expect("id").to_owned(),
        rb["id"].as_str().expect("id").to_owned(),
    ];
    let mut saw_queued = false;
    let mut max_active = 0;
    until("both runs to end", WAIT, async || {
        // One list request is one read of the table: both statuses at the same instant
        // (two requests could see the first run still running and the second started).
        let listed: Vec<Value> = api
            .try_list("/api/runs")
            .await?
            .into_iter()
            .filter(|r| ids.iter().any(|id| r["id"] == id.as_str()))
            .collect();
        saw_queued |= listed.iter().any(|r| r["status"] == "queued");
        max_active = max_active.max(listed.iter().filter(|r| r["status"] == "running").count());
        (listed.len() == 2 && listed.iter().all(terminal)).then_some(())
    })
    .await;
    let mut runs = Vec::new();
    for id in &ids {
        runs.push(api.run(id).await);
    }
    assert!(saw_queued, "one of the two waited as queued");
    assert_eq!(max_active, 1, "never two running with a cap of 1");
    for r in &runs {
        assert_eq!(r["status"], "completed", "{r}");
    }
    assert!(
        runs.iter().any(|r| r["transitions"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t.to_string().contains("\"queued\"")))),
        "the queued run's transitions show it: {runs:?}"
    );
    assert!(
        !overlapping(&runs[0], &runs[1]),
        "the cap kept them apart: {runs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_rate_limit_skips_fires_beyond_the_window() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let spec = with_policies(
        command("limited", every("1s"), "true", &[]),
        json!({"rate_limit": {"max_fires": 2, "window_seconds": 60}}),
    );
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let runs = api
        .wait_runs(&id, "two rate-limited fires", |runs| {
            runs.iter()
                .filter(|r| is(r, "skipped", "rate_limited"))
                .count()
                >= 2
        })
        .await;
    api.disable(&id).await;
    let ran: Vec<&Value> = runs.iter().filter(|r| r["status"] != "skipped").collect();
    assert_eq!(
        ran.len(),
        2,
        "two fires in the window, then skips: {runs:?}"
    );
    let first_skip = runs
        .iter()
        .find(|r| r["status"] == "skipped")
        .expect("a skip");
    assert!(
        ran.iter()
            .all(|r| ms(&r["scheduled_at"]) < ms(&first_skip["scheduled_at"])),
        "the skips come after the allowed fires: {runs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_manual_trigger_bypasses_overlap_and_never_consumes_an_at() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let at = in_secs(4);
    let spec = with_policies(
        command("at/once", json!({ "at": at }), "sleep", &["1"]),
        json!({"overlap": "skip"}),
    );
    let schedule = api.create(&spec).await;
    let id = schedule["id"].as_str().expect("id").to_owned();
    assert_eq!(ms(&schedule["next_fire_at"]), ms(&json!(at)), "{schedule}");
    assert_eq!(schedule["health"], "never-fired", "{schedule}");
    // Two manual runs at once: overlap guards the clock, not a person asking.
    let (a, b) = tokio::join!(api.trigger(&id), api.trigger(&id));
    for run in [&a, &b] {
        let run = api.finished(run["id"].as_str().expect("id")).await;
        assert_eq!(run["status"], "completed", "{run}");
    }
    let after = api.schedule(&id).await;
    assert_eq!(
        ms(&after["next_fire_at"]),
        ms(&json!(at)),
        "the at is still armed after manual runs: {after}"
    );
    let runs = api
        .wait_runs(&id, "the at to fire", |runs| {
            runs.iter().any(|r| r["kind"] == "scheduled" && terminal(r))
        })
        .await;
    let fired: Vec<&Value> = runs.iter().filter(|r| r["kind"] == "scheduled").collect();
    assert_eq!(fired.len(), 1, "{runs:?}");
    assert_eq!(ms(&fired[0]["scheduled_at"]), ms(&json!(at)));
    assert_eq!(fired[0]["status"], "completed", "{}", fired[0]);
    let done = api.schedule(&id).await;
    assert!(done["next_fire_at"].is_null(), "an at fires once: {done}");
    assert_eq!(done["health"], "healthy", "{done}");
}
