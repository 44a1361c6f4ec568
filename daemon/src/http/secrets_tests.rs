//! `/api/secrets` through the real router: a value goes in and never comes out (not in
//! an answer, the audit trail, an error, or `state.db` in clear); names are checked; a
//! secret in use is kept; a schedule or a task naming an unknown secret is refused.

use axum::body::Body;
use http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};
use studio_contract::role::Role;

use super::{APP, Api, api, api_with, authed, empty};
use crate::testing::DAEMON_TOKEN;

const VALUE: &str = "ghp_0123456789abcdefSECRETvalue";

fn put(token: &str, name: &str, body: &str) -> Request<Body> {
    authed(Method::PUT, &format!("/api/secrets/{name}"), token)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .expect("request")
}

async fn set(api: &Api, name: &str, value: &str) -> (StatusCode, Value) {
    let body = json!({ "value": value }).to_string();
    let (status, _, answer) = api.send(put(DAEMON_TOKEN, name, &body)).await;
    (status, answer)
}

async fn send(api: &Api, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let b = authed(method, path, DAEMON_TOKEN).header(header::CONTENT_TYPE, "application/json");
    let req = match body {
        Some(body) => b.body(Body::from(body.to_string())).expect("request"),
        None => empty(b),
    };
    let (status, _, answer) = api.send(req).await;
    (status, answer)
}

/// The API with `true` on the command allow-list.
async fn allowing_true() -> Api {
    api_with(|c| c.allowlist_seed = vec!["true".into()]).await
}

fn paths(body: &Value) -> Vec<&str> {
    body["errors"]
        .as_array()
        .map(|e| e.iter().filter_map(|e| e["path"].as_str()).collect())
        .unwrap_or_default()
}

/// Every byte of the home's database files, to look for a value in clear.
fn database_bytes(api: &Api) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(api._dir.path()).expect("home").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("state.db") {
            all.extend(std::fs::read(entry.path()).expect("read"));
        }
    }
    all
}

#[tokio::test]
async fn a_value_goes_in_and_never_comes_out() {
    let api = allowing_true().await;
    let (status, created) = set(&api, "github", VALUE).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["name"], "github");
    assert_eq!(created["updated_by"], "daemon");
    let (status, replaced) = set(&api, "github", &format!("{VALUE}-2")).await;
    assert_eq!(status, StatusCode::OK, "replaced: {replaced}");

    // Used by a schedule: listed with it, and kept.
    let spec = json!({
        "name": "uses-github", "trigger": {"every": "1h"},
        "action": {"kind": "command", "executable": "true"},
        "secrets": {"GITHUB_TOKEN": "github"},
    });
    let (status, schedule) = send(&api, Method::POST, "/api/schedules", Some(spec)).await;
    assert_eq!(status, StatusCode::CREATED, "{schedule}");
    assert_eq!(
        schedule["spec"]["secrets"],
        json!({"GITHUB_TOKEN": "github"})
    );
    let (_, list) = send(&api, Method::GET, "/api/secrets", None).await;
    assert_eq!(
        list["secrets"][0]["used_by"],
        json!(["uses-github"]),
        "{list}"
    );
    let (status, refused) = send(&api, Method::DELETE, "/api/secrets/github", None).await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (StatusCode::CONFLICT, Some("secret_in_use")),
        "{refused}"
    );
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or("")
            .contains("uses-github")
    );

    // Nothing anyone reads holds the value: answers, the trail, the export, the database.
    let mut seen = String::new();
    for path in [
        "/api/secrets",
        "/api/audit",
        "/api/schedules",
        "/api/declarations/export",
    ] {
        let (status, body) = send(&api, Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        seen.push_str(&body.to_string());
    }
    seen.push_str(&created.to_string());
    seen.push_str(&replaced.to_string());
    assert!(
        !seen.contains(VALUE) && !seen.contains("SECRETvalue"),
        "{seen}"
    );
    if crate::testing::on_postgres() {
        let rows = api.scheduler.reads().postgres_rows_text().await;
        assert!(rows.contains("github"), "the rows were read");
        let hex: String = b"SECRETvalue".iter().map(|b| format!("{b:02x}")).collect();
        assert!(
            !rows.contains("SECRETvalue") && !rows.contains(&hex),
            "a value in clear in the database"
        );
    } else {
        let db = database_bytes(&api);
        assert!(!db.is_empty());
        assert!(
            !db.windows(11).any(|w| w == b"SECRETvalue"),
            "a value in clear in state.db"
        );
    }
    let (_, trail) = send(&api, Method::GET, "/api/audit?kind=secret_set", None).await;
    assert_eq!(
        trail["entries"].as_array().map(Vec::len),
        Some(2),
        "{trail}"
    );

    // Unused, it goes; again, it is not found.
    let id = schedule["id"].as_str().expect("id");
    let (status, _) = send(&api, Method::DELETE, &format!("/api/schedules/{id}"), None).await;
    assert!(status.is_success(), "{status}");
    let (status, gone) = send(&api, Method::DELETE, "/api/secrets/github", None).await;
    assert_eq!(status, StatusCode::OK, "{gone}");
    assert_eq!(gone["name"], "github");
    let (status, again) = send(&api, Method::DELETE, "/api/secrets/github", None).await;
    assert_eq!(
        (status, again["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("secret_not_found"))
    );
    let (_, list) = send(&api, Method::GET, "/api/secrets", None).await;
    assert_eq!(list["secrets"], json!([]));
    let (_, trail) = send(&api, Method::GET, "/api/audit?kind=secret_deleted", None).await;
    assert_eq!(
        trail["entries"].as_array().map(Vec::len),
        Some(1),
        "{trail}"
    );
}

#[tokio::test]
async fn bad_names_and_values_are_refused_without_quoting_them() {
    let api = api().await;
    for (name, body, want) in [
        (
            "ok-name",
            json!({"value": "short"}).to_string(),
            vec!["value"],
        ),
        (
            "ok-name",
            json!({"value": "nul\u{0}inside"}).to_string(),
            vec!["value"],
        ),
        ("-bad", json!({"value": VALUE}).to_string(), vec!["name"]),
        ("a%20b", json!({"value": VALUE}).to_string(), vec!["name"]),
        (
            "ok-name",
            json!({"value": "x".repeat(64 * 1024 + 1)}).to_string(),
            vec!["value"],
        ),
        // Not the one shape: the message must not echo what was sent.
        (
            "ok-name",
            format!(r#"{{"value": "{VALUE}", "x": 1}}"#),
            vec!["value"],
        ),
        (
            "ok-name",
            format!(r#"{{"valu": "{VALUE}"}}"#),
            vec!["value"],
        ),
        ("ok-name", format!(r#"["{VALUE}"]"#), vec!["value"]),
    ] {
        let (status, _, answer) = api.send(put(DAEMON_TOKEN, name, &body)).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("validation_failed")),
            "{name} {}: {answer}",
            &body[..body.len().min(60)]
        );
        assert_eq!(paths(&answer), want, "{name}: {answer}");
        assert!(!answer.to_string().contains("SECRETvalue"), "{answer}");
    }
    let (_, list) = send(&api, Method::GET, "/api/secrets", None).await;
    assert_eq!(list["secrets"], json!([]), "nothing was stored");

    // A viewer lists; only an admin sets.
    let viewer = api.token_as(Role::Viewer).await;
    let body = json!({ "value": VALUE }).to_string();
    let (status, _, _) = api.send(put(&viewer, "github", &body)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = api
        .send(empty(
            authed(Method::GET, "/api/secrets", &viewer).header(header::ORIGIN, APP),
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_schedule_or_task_naming_an_unknown_secret_is_refused() {
    let api = allowing_true().await;
    let schedule = json!({
        "name": "s", "trigger": {"every": "1h"},
        "action": {"kind": "command", "executable": "true"},
        "secrets": {"TOKEN": "nope", "1BAD": "x", "PATH": "x", "ALSO": "bad name"},
        "env": {"TWICE": "v"},
    });
    let mut schedule_twice = schedule.clone();
    schedule_twice["secrets"] = json!({"TWICE": "nope"});
    let (status, body) = send(&api, Method::POST, "/api/schedules", Some(schedule)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        paths(&body),
        [
            "secrets.1BAD",
            "secrets.ALSO",
            "secrets.PATH",
            "secrets.TOKEN"
        ],
        "{body}"
    );
    let (status, body) = send(&api, Method::POST, "/api/schedules", Some(schedule_twice)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(paths(&body).contains(&"secrets.TWICE"), "{body}");
    let task = json!({
        "action": {"kind": "command", "executable": "true"},
        "secrets": {"TOKEN": "nope"},
    });
    let (status, body) = send(&api, Method::POST, "/api/tasks", Some(task.clone())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(paths(&body), ["secrets.TOKEN"]);
    // Once it exists, both are taken; a task that names it keeps it in use.
    let (status, _) = set(&api, "nope", VALUE).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = send(&api, Method::POST, "/api/tasks", Some(task)).await;
    assert!(status.is_success(), "{body}");
    let (status, refused) = send(&api, Method::DELETE, "/api/secrets/nope", None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(refused["message"].as_str().unwrap_or("").contains("task "));
}
