//! The attention API through the whole app (front door included) on 127.0.0.1:0, against
//! the fake verifier and a small fake studiod serving runs and schedules.

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::extract::Request;
use bytes::Bytes;
use http::Method;
use http_body_util::{BodyExt, Full};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use studio_contract::{home::Home, secret::AppKey};
use tokio::sync::oneshot;

use axum::response::IntoResponse;
use http::StatusCode;
use serde_json::{Value, json};

use super::*;
use crate::{Application, Config, verifier::fake::FakeVerifier};

/// What the fake studiod knows: runs (failed ones, and any awaiting approval), one
/// failing schedule and the pending approval requests.
#[derive(Default)]
struct Daemon {
    runs: Vec<Value>,
    approvals: Vec<Value>,
    /// Every Authorization header it saw.
    bearers: Vec<String>,
}

fn failed_run(id: &str, finished: &str) -> Value {
    json!({"id": id, "schedule_id": "s1", "kind": "scheduled", "status": "failed",
           "reason": "exit_nonzero", "exit_code": 1, "created_at": finished, "finished_at": finished,
           "attempt": 1, "counted": true, "chain_depth": 0, "transitions": []})
}

fn schedule_s1() -> Value {
    json!({"id": "s1", "name": "nightly", "enabled": true, "health": "failing", "last_outcome": "failed",
           "last_fired_at": "2026-11-29T09:59:59.000Z", "trigger_kind": "every",
           "spec": {"trigger": {"every": "1h"}, "action": {"kind": "command", "executable": "true"}},
           "runs_counted": 1, "spend_usd": 0.0, "revision": 1,
           "created_at": "2026-11-29T09:00:00.000Z", "updated_at": "2026-11-29T09:00:00.000Z"})
}

async fn fake_daemon(state: Arc<Mutex<Daemon>>) -> SocketAddr {
    let app = axum::Router::new().fallback(move |req: Request| {
        let state = state.clone();
        async move {
            let mut d = state.lock().expect("daemon state");
            if let Some(a) = req.headers().get(header::AUTHORIZATION) {
                d.bearers.push(a.to_str().unwrap_or("").to_owned());
            }
            let query = req.uri().query().unwrap_or("");
            match req.uri().path() {
                "/api/runs" if query.contains("status=failed") => {
                    let mut runs: Vec<Value> = d
                        .runs
                        .iter()
                        .filter(|r| r["status"] == "failed")
                        .cloned()
                        .collect();
                    runs.reverse();
                    Json(json!({"runs": runs, "next_cursor": null})).into_response()
                }
                "/api/runs" => Json(json!({"runs": [], "next_cursor": null})).into_response(),
                "/api/schedules" => {
                    Json(json!({"schedules": [schedule_s1()], "next_cursor": null})).into_response()
                }
                "/api/schedules/s1" => Json(schedule_s1()).into_response(),
                "/api/approvals" if query.contains("status=pending") => {
                    Json(json!({"approvals": d.approvals, "next_cursor": null})).into_response()
                }
                path => match d.runs.iter().find(|r| {
                    Some(path)
                        == r["id"]
                            .as_str()
                            .map(|id| format!("/api/runs/{id}"))
                            .as_deref()
                }) {
                    Some(run) => Json(run.clone()).into_response(),
                    None => ApiError::new(Code::RunNotFound, "no such run").into_response(),
                },
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind fake daemon");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn temp_home() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "studio-app-attn-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp home");
    dir
}

struct Browser {
    addr: SocketAddr,
    client: Client<HttpConnector, Full<Bytes>>,
    /// Its admission cookie (`name=value`).
    cookie: &'static str,
}

impl Browser {
    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A request with the admission cookie; unsafe methods carry our Origin and JSON.
    async fn send(&self, method: Method, path: &str, body: &str) -> (StatusCode, Value) {
        let origin = self.origin();
        let mut req = http::Request::builder()
            .method(method.clone())
            .uri(format!("http://{}{path}", self.addr))
            .header(header::COOKIE, self.cookie);
        if method != Method::GET {
            req = req
                .header(header::ORIGIN, origin)
                .header(header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(Bytes::from(body.to_owned())))
            .expect("req");
        let resp = self.client.request(req).await.expect("app answers");
        let status = resp.status();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn ids(&self, path: &str) -> (Vec<String>, Value) {
        let (status, body) = self.send(Method::GET, path, "").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let ids = body["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| i["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        (ids, body)
    }
}

#[tokio::test]
async fn the_attention_api_through_the_front_door() {
    let daemon = Arc::new(Mutex::new(Daemon {
        runs: vec![failed_run("r1", "2026-11-29T10:00:00.000Z")],
        ..Daemon::default()
    }));
    let upstream = fake_daemon(daemon.clone()).await;
    let home = temp_home();
    let key = AppKey::generate();
    let mut config = Config::loopback(Home::new(&home), key.clone());
    config.addr = SocketAddr::from(([127, 0, 0, 1], 0));
    config.daemon_addr = upstream;
    config.verifier_timeout = Duration::from_millis(500);
    config.upstream_timeout = Duration::from_millis(2000);
    let app = Application::build(config).await.expect("build");
    assert!(home.join("app.db").exists(), "app.db is created at start");
    let browser = Browser {
        addr: app.local_addr(),
        client: Client::builder(TokioExecutor::new()).build_http(),
        cookie: "studio_admission=sta_t",
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(app.serve(async {
        let _ = stopped.await;
    }));
    let fake = FakeVerifier::start(&home, &key, "e1");
    fake.state
        .script()
        .tokens
        .insert("sta_t".into(), "p1".into());

    let (ids, body) = browser.ids("/api/app/attention").await;
    assert_eq!(ids, vec!["run:r1", "sched:s1"], "{body}");
    assert_eq!(body["hidden"], 0);
    assert_eq!(body["items"][0]["title"], "nightly: run failed");
    assert_eq!(body["items"][0]["since"], "2026-11-29T10:00:00.000Z");
    assert_eq!(body["items"][0]["disposition"], Value::Null);
    assert!(
        daemon
            .lock()
            .expect("d")
            .bearers
            .iter()
            .all(|b| b == "Bearer sta_t"),
        "the daemon is asked as the caller"
    );

    // Field-level refusals.
    let (status, body) = browser
        .send(
            Method::PUT,
            "/api/app/attention/run:r1",
            r#"{"state":"gone"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["code"], "validation_failed");
    let paths: Vec<&str> = body["errors"]
        .as_array()
        .map(|e| e.iter().filter_map(|x| x["path"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(paths, vec!["state", "reason"]);
    let (_, body) = browser
        .send(
            Method::PUT,
            "/api/app/attention/run:r1",
            r#"{"state":"snoozed","reason":"x"}"#,
        )
        .await;
    assert_eq!(body["errors"][0]["path"], "until", "{body}");
    let (_, body) = browser
        .send(
            Method::PUT,
            "/api/app/attention/run:r1",
            r#"{"state":"snoozed","reason":"x","until":"yesterday"}"#,
        )
        .await;
    assert_eq!(body["errors"][0]["path"], "until", "{body}");
    let (status, body) = browser
        .send(Method::PUT, "/api/app/attention/run:r1", "not json")
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("bad_request"))
    );
    let (status, _) = browser
        .send(
            Method::PUT,
            "/api/app/attention/job:1",
            r#"{"state":"resolved","reason":"x"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Acknowledge both: the queue empties, the run and schedule themselves are untouched.
    for id in ["run:r1", "sched:s1"] {
        let (status, row) = browser
            .send(
                Method::PUT,
                &format!("/api/app/attention/{id}"),
                r#"{"state":"acknowledged","reason":"known flake"}"#,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{row}");
        assert_eq!(
            (&row["id"], &row["state"], &row["revision"], &row["by"]),
            (&json!(id), &json!("acknowledged"), &json!(1), &json!("p1"))
        );
        assert_eq!(
            row["covers"], "2026-11-29T10:00:00.000Z",
            "the evidence it saw"
        );
    }
    let (ids, body) = browser.ids("/api/app/attention").await;
    assert!(ids.is_empty(), "{body}");
    assert_eq!(body["hidden"], 2);
    let (ids, body) = browser.ids("/api/app/attention?all=true").await;
    assert_eq!(ids.len(), 2);
    assert_eq!(body["items"][0]["disposition"]["effective"], true);

    // A newer failure of the schedule brings it back, with the new run.
    daemon
        .lock()
        .expect("d")
        .runs
        .push(failed_run("r2", "2026-11-29T11:00:00.000Z"));
    let (ids, body) = browser.ids("/api/app/attention").await;
    assert_eq!(ids, vec!["run:r2", "sched:s1"], "{body}");
    assert_eq!(body["items"][1]["disposition"]["effective"], false);

    // Undo, then a stale PUT: refused; with the tombstone's revision: applied.
    let (status, body) = browser
        .send(Method::DELETE, "/api/app/attention/sched:s1", "")
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["revision"], 2);
    let stale = r#"{"state":"acknowledged","reason":"late retry","revision":1}"#;
    let (status, body) = browser
        .send(Method::PUT, "/api/app/attention/sched:s1", stale)
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("conflict"))
    );
    let (_, body) = browser.ids("/api/app/attention").await;
    assert_eq!(
        body["items"][1]["revision"], 2,
        "the revision a re-PUT needs"
    );
    let fresh = r#"{"state":"expected","reason":"migration week","revision":2}"#;
    let (status, row) = browser
        .send(Method::PUT, "/api/app/attention/sched:s1", fresh)
        .await;
    assert_eq!((status, &row["revision"]), (StatusCode::OK, &json!(3)));
    let (status, _) = browser
        .send(Method::DELETE, "/api/app/attention/run:r2", "")
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing to clear");

    let (status, body) = browser
        .send(Method::GET, "/api/app/attention/sched:s1/history", "")
        .await;
    assert_eq!(status, StatusCode::OK);
    let ops: Vec<(String, i64)> = body["history"]
        .as_array()
        .map(|h| {
            h.iter()
                .map(|e| {
                    (
                        format!(
                            "{}:{}",
                            e["op"].as_str().unwrap_or("?"),
                            e["by"].as_str().unwrap_or("?")
                        ),
                        e["revision"].as_i64().unwrap_or(-1),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        ops,
        vec![
            ("put:p1".into(), 1),
            ("delete:p1".into(), 2),
            ("put:p1".into(), 3)
        ]
    );

    // A run awaiting approval is an item linking to its decision; acknowledged, it covers
    // the request.
    let request = json!({"id": "a1", "run_id": "r3", "schedule_id": "s1", "schedule_name": "nightly",
        "status": "pending", "action_sha256": "00",
        "action": {"action": {"kind": "command", "executable": "deploy", "args": ["--prod"]},
                   "cwd": null, "env": []},
        "requested_by": null, "requested_at": "2026-11-29T12:00:00.000Z",
        "expires_at": "2999-01-01T00:00:00.000Z", "distinct_from_requester": false,
        "decided_by": null, "decided_role": null, "decided_origin": null, "decided_at": null,
        "reason": null});
    {
        let mut d = daemon.lock().expect("d");
        let mut run = json!({"id": "r3", "schedule_id": "s1", "kind": "scheduled",
            "status": "awaiting_approval", "created_at": "2026-11-29T12:00:00.000Z",
            "attempt": 1, "counted": true, "chain_depth": 0, "transitions": []});
        run["approvals"] = json!([request.clone()]);
        d.runs.push(run);
        d.approvals.push(request);
    }
    let (ids, body) = browser.ids("/api/app/attention").await;
    assert_eq!(ids[0], "run:r3", "{body}");
    assert_eq!(body["items"][0]["title"], "nightly: run awaits approval");
    assert_eq!(body["items"][0]["link"], "/approvals#approval-a1");
    assert_eq!(
        body["items"][0]["detail"],
        "deploy --prod · decide before 2999-01-01 00:00:00 UTC"
    );
    let (status, row) = browser
        .send(
            Method::PUT,
            "/api/app/attention/run:r3",
            r#"{"state":"acknowledged","reason":"deciding after lunch"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{row}");
    assert_eq!(row["covers"], "2026-11-29T12:00:00.000Z", "the request");

    // A viewer reads the queue and decides nothing: `403 forbidden`, and no row changes.
    fake.state
        .script()
        .tokens
        .insert("sta_v".into(), "viewer-1".into());
    let viewer = Browser {
        cookie: "studio_admission=sta_v",
        ..browser
    };
    let (ids, _) = viewer.ids("/api/app/attention?all=true").await;
    assert!(!ids.is_empty());
    let path = "/api/app/attention/sched:s1";
    let (status, body) = viewer
        .send(
            Method::PUT,
            path,
            r#"{"state": "acknowledged", "reason": "seen"}"#,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden")),
        "{body}"
    );
    assert_eq!(
        body["message"],
        "this needs the operator role; this session is a viewer"
    );
    let (status, _) = viewer.send(Method::DELETE, path, "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, history) = viewer
        .send(Method::GET, "/api/app/attention/sched:s1/history", "")
        .await;
    assert_eq!(
        history["history"].as_array().map(Vec::len),
        Some(3),
        "the refusals wrote nothing: {history}"
    );

    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(8), task).await;
    fake.stop(&home).await;
    let _ = std::fs::remove_dir_all(&home);
}
