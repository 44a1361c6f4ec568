//! The attention queue through the real binaries: a schedule whose command fails, its
//! runs and the schedule itself as items, an operator's acknowledgement through the app
//! (cookie, Origin, JSON), the item's return after a newer failure, the tombstone fence
//! and the history ledger.

use std::time::{Duration, Instant};

use studio_api::{
    Code, Run, RunDetail, RunStatus, Schedule,
    app::{
        AttentionList, Decision, DispositionCleared, DispositionPut, DispositionRecord, History,
    },
    schedule::ScheduleSpec,
};
use studio_tests::{
    Reply, Studio,
    api::{command_spec, every},
    http,
};

use super::paired_cookie;

/// A `POST` to studiod with the daemon token (the schedule is set up as the CLI would);
/// `body` as JSON, or none for a route that takes none.
async fn daemon_post(studio: &Studio, path: &str, body: Option<&ScheduleSpec>) -> Reply {
    let mut req = http()
        .post(studio.daemon_url(path))
        .bearer_auth(studio.token())
        .header("content-type", "application/json");
    if let Some(body) = body {
        req = req.body(serde_json::to_string(body).expect("a spec"));
    }
    Reply::of(req.send().await.expect("daemon request")).await
}

/// `GET /api/runs/{id}` at studiod.
async fn daemon_run(studio: &Studio, id: &str) -> RunDetail {
    Reply::of(
        http()
            .get(studio.daemon_url(&format!("/api/runs/{id}")))
            .bearer_auth(studio.token())
            .send()
            .await
            .expect("run"),
    )
    .await
    .json()
}

/// Triggers the schedule and waits for the run to fail; returns the run id.
async fn failing_run(studio: &Studio, schedule: &str) -> String {
    let reply = daemon_post(studio, &format!("/api/schedules/{schedule}/trigger"), None).await;
    let id = reply.expect::<Run>(202).core.id;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let run = daemon_run(studio, &id).await;
        if run.run.core.status == RunStatus::Failed {
            return id;
        }
        assert!(Instant::now() < deadline, "run never failed: {run:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A request to the app as the paired browser: the cookie, and for writes our Origin.
async fn app(
    studio: &Studio,
    cookie: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<&DispositionPut>,
) -> Reply {
    let mut req = http()
        .request(method.clone(), studio.app_url(path))
        .header("cookie", cookie);
    if method != reqwest::Method::GET {
        req = req
            .header("origin", studio.app_origin())
            .header("content-type", "application/json");
    }
    if let Some(body) = body {
        req = req.body(serde_json::to_string(body).expect("a disposition"));
    }
    Reply::of(req.send().await.expect("app request")).await
}

fn ids(queue: &AttentionList) -> Vec<String> {
    queue.items.iter().map(|i| i.id.clone()).collect()
}

/// An acknowledgement, after `revision` when given.
fn acknowledge(reason: &str, revision: Option<i64>) -> DispositionPut {
    DispositionPut {
        state: Some("acknowledged".into()),
        reason: Some(reason.into()),
        until: None,
        revision,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attention_queue_acknowledge_reappear_tombstone_and_history() {
    let studio = Studio::start_with(&[("STUDIO_COMMAND_ALLOWLIST", "false,true")]);
    let cookie = paired_cookie(&studio).await;
    let spec = command_spec("always-fails", every("1d"), "false", &[]);
    let reply = daemon_post(&studio, "/api/schedules", Some(&spec)).await;
    let sid = reply.expect::<Schedule>(201).id;
    let first = failing_run(&studio, &sid).await;
    let (run_item, sched_item) = (format!("run:{first}"), format!("sched:{sid}"));

    let get = reqwest::Method::GET;
    let queue: AttentionList = app(&studio, &cookie, get.clone(), "/api/app/attention", None)
        .await
        .expect(200);
    let listed = ids(&queue);
    assert!(listed.contains(&run_item), "{queue:?}");
    assert!(listed.contains(&sched_item), "{queue:?}");

    // Without an Origin the cookie may not change anything.
    let refused = http()
        .put(studio.app_url(&format!("/api/app/attention/{sched_item}")))
        .header("cookie", &cookie)
        .header("content-type", "application/json")
        .json(&acknowledge("x", None))
        .send()
        .await
        .expect("put");
    assert_eq!(refused.status(), 403);

    for item in [&run_item, &sched_item] {
        let row: DispositionRecord = app(
            &studio,
            &cookie,
            reqwest::Method::PUT,
            &format!("/api/app/attention/{item}"),
            Some(&acknowledge("known: the command is false", None)),
        )
        .await
        .expect(200);
        assert_eq!((row.state, row.revision), (Some(Decision::Acknowledged), 1));
    }
    let queue: AttentionList = app(&studio, &cookie, get.clone(), "/api/app/attention", None)
        .await
        .json();
    let listed = ids(&queue);
    assert!(
        !listed.contains(&run_item) && !listed.contains(&sched_item),
        "{queue:?}"
    );
    assert!(queue.hidden >= 2, "{queue:?}");

    // The run keeps its own status: deciding about it changed nothing at the daemon.
    let run = daemon_run(&studio, &first).await;
    assert_eq!(run.run.core.status, RunStatus::Failed);

    // A newer failure brings the schedule back, with the new run.
    let second = failing_run(&studio, &sid).await;
    let queue: AttentionList = app(&studio, &cookie, get.clone(), "/api/app/attention", None)
        .await
        .json();
    let listed = ids(&queue);
    assert!(listed.contains(&sched_item), "{queue:?}");
    assert!(listed.contains(&format!("run:{second}")), "{queue:?}");
    assert!(!listed.contains(&run_item), "{queue:?}");

    // Undo, then a delayed retry from before the undo: refused, not resurrected.
    let deleted: DispositionCleared = app(
        &studio,
        &cookie,
        reqwest::Method::DELETE,
        &format!("/api/app/attention/{sched_item}"),
        None,
    )
    .await
    .expect(200);
    let tombstone = deleted.revision;
    assert_eq!(tombstone, 2);
    let reply = app(
        &studio,
        &cookie,
        reqwest::Method::PUT,
        &format!("/api/app/attention/{sched_item}"),
        Some(&acknowledge("late retry", Some(tombstone - 1))),
    )
    .await;
    assert_eq!(reply.code(), (409, Code::Conflict), "{reply}");

    let history: History = app(
        &studio,
        &cookie,
        get,
        &format!("/api/app/attention/{sched_item}/history"),
        None,
    )
    .await
    .expect(200);
    let entries = &history.history;
    let ops: Vec<(&str, i64)> = entries
        .iter()
        .map(|e| (e.op.as_str(), e.revision))
        .collect();
    assert_eq!(ops, vec![("put", 1), ("delete", 2)], "{history:?}");
    let by = entries[0].by.as_str();
    assert!(
        !by.is_empty() && entries.iter().all(|e| e.by == by),
        "{history:?}"
    );
    assert_eq!(entries[0].reason, "known: the command is false");
}
