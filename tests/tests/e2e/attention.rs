//! The attention queue through the real binaries: a schedule whose command fails, its
//! runs and the schedule itself as items, an operator's acknowledgement through the app
//! (cookie, Origin, JSON), the item's return after a newer failure, the tombstone fence
//! and the history ledger.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use studio_tests::{Studio, http};

use super::{json_of, paired_cookie};

/// studiod's API with the daemon token (the schedule is set up as the CLI would).
async fn daemon_post(studio: &Studio, path: &str, body: &Value) -> (u16, Value) {
    json_of(
        http()
            .post(studio.daemon_url(path))
            .bearer_auth(studio.token())
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("daemon request"),
    )
    .await
}

/// Triggers the schedule and waits for the run to fail; returns the run id.
async fn failing_run(studio: &Studio, schedule: &str) -> String {
    let (status, run) = daemon_post(
        studio,
        &format!("/api/schedules/{schedule}/trigger"),
        &json!({}),
    )
    .await;
    assert_eq!(status, 202, "{run}");
    let id = run["id"].as_str().expect("run id").to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, run) = json_of(
            http()
                .get(studio.daemon_url(&format!("/api/runs/{id}")))
                .bearer_auth(studio.token())
                .send()
                .await
                .expect("run"),
        )
        .await;
        if run["status"] == "failed" {
            return id;
        }
        assert!(Instant::now() < deadline, "run never failed: {run}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A request to the app as the paired browser: the cookie, and for writes our Origin.
async fn app(
    studio: &Studio,
    cookie: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http()
        .request(method.clone(), studio.app_url(path))
        .header("cookie", cookie);
    if method != reqwest::Method::GET {
        req = req
            .header("origin", studio.app_origin())
            .header("content-type", "application/json");
    }
    if let Some(body) = body {
        req = req.body(body.to_string());
    }
    json_of(req.send().await.expect("app request")).await
}

fn ids(queue: &Value) -> Vec<String> {
    queue["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attention_queue_acknowledge_reappear_tombstone_and_history() {
    let studio = Studio::start_with(&[("STUDIO_COMMAND_ALLOWLIST", "false,true")]);
    let cookie = paired_cookie(&studio).await;
    let spec = json!({
        "name": "always-fails",
        "trigger": {"every": "1d"},
        "action": {"kind": "command", "executable": "false"},
    });
    let (status, schedule) = daemon_post(&studio, "/api/schedules", &spec).await;
    assert_eq!(status, 201, "{schedule}");
    let sid = schedule["id"].as_str().expect("schedule id").to_owned();
    let first = failing_run(&studio, &sid).await;
    let (run_item, sched_item) = (format!("run:{first}"), format!("sched:{sid}"));

    let get = reqwest::Method::GET;
    let (status, queue) = app(&studio, &cookie, get.clone(), "/api/app/attention", None).await;
    assert_eq!(status, 200, "{queue}");
    let listed = ids(&queue);
    assert!(listed.contains(&run_item), "{queue}");
    assert!(listed.contains(&sched_item), "{queue}");

    // Without an Origin the cookie may not change anything.
    let refused = http()
        .put(studio.app_url(&format!("/api/app/attention/{sched_item}")))
        .header("cookie", &cookie)
        .header("content-type", "application/json")
        .body(json!({"state": "acknowledged", "reason": "x"}).to_string())
        .send()
        .await
        .expect("put");
    assert_eq!(refused.status(), 403);

    for item in [&run_item, &sched_item] {
        let (status, row) = app(
            &studio,
            &cookie,
            reqwest::Method::PUT,
            &format!("/api/app/attention/{item}"),
            Some(json!({"state": "acknowledged", "reason": "known: the command is false"})),
        )
        .await;
        assert_eq!(status, 200, "{row}");
        assert_eq!(
            (row["state"].as_str(), row["revision"].as_i64()),
            (Some("acknowledged"), Some(1))
        );
    }
    let (_, queue) = app(&studio, &cookie, get.clone(), "/api/app/attention", None).await;
    let listed = ids(&queue);
    assert!(
        !listed.contains(&run_item) && !listed.contains(&sched_item),
        "{queue}"
    );
    assert!(queue["hidden"].as_u64() >= Some(2), "{queue}");

    // The run keeps its own status: deciding about it changed nothing at the daemon.
    let (_, run) = json_of(
        http()
            .get(studio.daemon_url(&format!("/api/runs/{first}")))
            .bearer_auth(studio.token())
            .send()
            .await
            .expect("run"),
    )
    .await;
    assert_eq!(run["status"], "failed");

    // A newer failure brings the schedule back, with the new run.
    let second = failing_run(&studio, &sid).await;
    let (_, queue) = app(&studio, &cookie, get.clone(), "/api/app/attention", None).await;
    let listed = ids(&queue);
    assert!(listed.contains(&sched_item), "{queue}");
    assert!(listed.contains(&format!("run:{second}")), "{queue}");
    assert!(!listed.contains(&run_item), "{queue}");

    // Undo, then a delayed retry from before the undo: refused, not resurrected.
    let (status, deleted) = app(
        &studio,
        &cookie,
        reqwest::Method::DELETE,
        &format!("/api/app/attention/{sched_item}"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{deleted}");
    let tombstone = deleted["revision"].as_i64().expect("revision");
    assert_eq!(tombstone, 2);
    let (status, body) = app(
        &studio,
        &cookie,
        reqwest::Method::PUT,
        &format!("/api/app/attention/{sched_item}"),
        Some(json!({"state": "acknowledged", "reason": "late retry", "revision": tombstone - 1})),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("conflict")),
        "{body}"
    );

    let (status, history) = app(
        &studio,
        &cookie,
        get,
        &format!("/api/app/attention/{sched_item}/history"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{history}");
    let entries = history["history"].as_array().expect("entries");
    let ops: Vec<(&str, i64)> = entries
        .iter()
        .map(|e| {
            (
                e["op"].as_str().unwrap_or("?"),
                e["revision"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(ops, vec![("put", 1), ("delete", 2)], "{history}");
    let by = entries[0]["by"].as_str().unwrap_or("");
    assert!(
        !by.is_empty() && entries.iter().all(|e| e["by"] == by),
        "{history}"
    );
    assert_eq!(entries[0]["reason"], "known: the command is false");
}
