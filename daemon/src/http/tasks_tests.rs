//! `/api/tasks` through the real router (the built-in worker is not started here): a
//! submission is checked like a job, answered once per idempotency key, refused on a
//! conflict; lists filter and page; a queued task is cancelled once; a task no worker
//! serves is shown unmatched.

use axum::body::Body;
use http::{Method, StatusCode, header};
use serde_json::{Value, json};

use super::{Api, api, authed, empty};
use crate::testing::DAEMON_TOKEN;

async fn submit(api: &Api, body: &Value) -> (StatusCode, Value) {
    let request = authed(Method::POST, "/api/tasks", DAEMON_TOKEN)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let (status, _, answer) = api.send(request).await;
    (status, answer)
}

async fn get(api: &Api, path: &str) -> Value {
    let (status, _, body) = api
        .send(empty(authed(Method::GET, path, DAEMON_TOKEN)))
        .await;
    assert_eq!(status, StatusCode::OK, "{path}: {body}");
    body
}

#[tokio::test]
async fn a_task_is_submitted_once_per_key_and_checked_like_a_job() {
    let api = api().await;
    api.allow(&["true"]).await;
    let spec = json!({
        "action": {"kind": "command", "executable": "true"},
        "labels": ["linux", "gpu", "linux"],
        "priority": 7,
        "idempotency_key": "ci-4711",
    });
    let (status, task) = submit(&api, &spec).await;
    assert_eq!(status, StatusCode::CREATED, "{task}");
    assert_eq!(task["status"], "queued");
    assert_eq!(
        task["spec"]["labels"],
        json!(["gpu", "linux"]),
        "sorted, no repeats"
    );
    assert_eq!(
        task["unmatched"], true,
        "the built-in worker has no labels here"
    );
    let (status, again) = submit(&api, &spec).await;
    assert_eq!((status, &again["id"]), (StatusCode::OK, &task["id"]));
    let mut other = spec.clone();
    other["priority"] = json!(1);
    let (status, conflict) = submit(&api, &other).await;
    assert_eq!(
        (status, conflict["code"].as_str()),
        (StatusCode::CONFLICT, Some("idempotency_conflict"))
    );
    let (status, bad) = submit(
        &api,
        &json!({"action": {"kind": "command", "executable": "rm"}, "labels": ["no spaces"]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    let paths: Vec<&str> = bad["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert_eq!(paths, ["action.executable", "labels[0]"]);
    let page = get(&api, "/api/tasks").await;
    assert_eq!(
        page["tasks"].as_array().map(Vec::len),
        Some(1),
        "nothing else was written"
    );
    let trail = get(&api, "/api/audit?kind=task_submitted").await;
    assert_eq!(trail["entries"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn tasks_are_listed_shown_and_cancelled_once() {
    let api = api().await;
    api.allow(&["true"]).await;
    let mut ids = Vec::new();
    for label in ["a", "b", "a"] {
        let (status, task) = submit(
            &api,
            &json!({"action": {"kind": "command", "executable": "true"}, "labels": [label]}),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{task}");
        ids.push(task["id"].as_str().expect("id").to_owned());
    }
    let first = get(&api, "/api/tasks?label=a&limit=1").await;
    assert_eq!(first["tasks"][0]["id"], json!(ids[2]), "newest first");
    let cursor = first["next_cursor"].as_str().expect("more");
    let rest = get(&api, &format!("/api/tasks?label=a&limit=1&cursor={cursor}")).await;
    assert_eq!(rest["tasks"][0]["id"], json!(ids[0]));
    assert_eq!(rest["next_cursor"], Value::Null);
    let wrong = empty(authed(
        Method::GET,
        &format!("/api/tasks?label=b&cursor={cursor}"),
        DAEMON_TOKEN,
    ));
    assert_eq!(
        api.code_of(wrong).await,
        (StatusCode::BAD_REQUEST, "invalid_cursor".into())
    );
    let detail = get(&api, &format!("/api/tasks/{}", ids[1])).await;
    assert_eq!(detail["task"]["status"], "queued");
    assert_eq!(detail["attempts"], json!([]));

    let cancel = |id: &str| {
        authed(
            Method::POST,
            &format!("/api/tasks/{id}/cancel"),
            DAEMON_TOKEN,
        )
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{}"))
        .expect("request")
    };
    let (status, _, task) = api.send(cancel(&ids[1])).await;
    assert_eq!(
        (status, &task["status"]),
        (StatusCode::OK, &json!("cancelled"))
    );
    assert_eq!(
        api.code_of(cancel(&ids[1])).await,
        (StatusCode::CONFLICT, "task_not_active".into())
    );
    assert_eq!(
        api.code_of(cancel("nope")).await,
        (StatusCode::NOT_FOUND, "task_not_found".into())
    );
    let summary = get(&api, "/api/summary").await;
    assert_eq!(
        summary["tasks"],
        json!({"running": 0, "waiting": 2}),
        "the summary counts them"
    );
    let cancelled = get(&api, "/api/tasks?status=cancelled").await;
    assert_eq!(cancelled["tasks"].as_array().map(Vec::len), Some(1));
    let bad = empty(authed(
        Method::GET,
        "/api/tasks?status=sleeping",
        DAEMON_TOKEN,
    ));
    assert_eq!(
        api.code_of(bad).await,
        (StatusCode::BAD_REQUEST, "bad_request".into())
    );
}
