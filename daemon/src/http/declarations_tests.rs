//! `/api/declarations/*` through the real router: shapes, refusals that write nothing,
//! and the export → apply round trip.

use http::{Method, StatusCode, header};
use serde_json::{Value, json};

use super::{Api, authed, empty};
use crate::testing::DAEMON_TOKEN;

fn post(path: &str, body: &Value) -> http::Request<axum::body::Body> {
    post_as(DAEMON_TOKEN, path, body)
}

fn post_as(token: &str, path: &str, body: &Value) -> http::Request<axum::body::Body> {
    authed(Method::POST, path, token)
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .expect("request")
}

fn nightly(expression: &str) -> Value {
    json!({"documents": [{"source": "jobs/nightly.yaml", "document": {
        "apiVersion": "studio/v1", "kind": "ScheduleSet",
        "metadata": {"name": "nightly-jobs", "project": "demo"},
        "schedules": {"reindex": {
            "trigger": {"cron": {"expression": expression, "timezone": "Europe/Berlin"}},
            "action": {"kind": "command", "executable": "true"},
            "policies": {"missed_fire": "run_once", "overlap": "skip", "deadline": 3600}}}}}]})
}

impl Api {
    async fn schedules(&self) -> Vec<Value> {
        let (_, _, body) = self
            .send(empty(authed(Method::GET, "/api/schedules", DAEMON_TOKEN)))
            .await;
        body["schedules"].as_array().cloned().unwrap_or_default()
    }

    async fn export(&self, query: &str) -> Value {
        let path = format!("/api/declarations/export{query}");
        let (status, _, body) = self
            .send(empty(authed(Method::GET, &path, DAEMON_TOKEN)))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }
}

/// The router's scheduler refuses every command (empty allow-list), so these tests use
/// members whose executable the test API allows: see `api_allowing`.
async fn api_allowing() -> Api {
    super::api_with(|c| c.allowlist_seed = vec!["true".into()]).await
}

#[tokio::test]
async fn plan_then_apply_then_noop() {
    let api = api_allowing().await;
    let (status, _, plan) = api
        .send(post("/api/declarations/plan", &nightly("0 2 * * *")))
        .await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(
        plan["changes"],
        json!([{"name": "demo/reindex", "action": "create", "owner": "demo/nightly-jobs", "source": "jobs/nightly.yaml"}])
    );
    assert_eq!(plan["summary"]["create"], 1);
    assert!(api.schedules().await.is_empty(), "plan writes nothing");

    let (status, _, applied) = api
        .send(post("/api/declarations/apply", &nightly("0 2 * * *")))
        .await;
    assert_eq!(
        (status, &applied["changes"]),
        (StatusCode::OK, &plan["changes"])
    );
    let rows = api.schedules().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["managed_by"], "declaration");
    assert_eq!(rows[0]["owner_key"], "demo/nightly-jobs");
    assert_eq!(rows[0]["source"], "jobs/nightly.yaml");
    assert!(rows[0]["next_fire_at"].is_string());

    let (_, _, again) = api
        .send(post("/api/declarations/apply", &nightly("0 2 * * *")))
        .await;
    assert_eq!(again["changes"][0]["action"], "unchanged");
    assert_eq!(api.schedules().await, rows, "not even updated_at");

    let mut update = nightly("0 3 * * *");
    update["expected"] = json!({"demo/reindex": 1});
    let (status, _, updated) = api.send(post("/api/declarations/apply", &update)).await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(
        updated["changes"][0]["fields"],
        json!([{"path": "trigger.cron.expression", "from": "0 2 * * *", "to": "0 3 * * *"}])
    );
    assert_eq!(api.schedules().await[0]["revision"], 2);
}

#[tokio::test]
async fn refusals_write_nothing() {
    let api = api_allowing().await;
    let mut bad = nightly("0 2 * * *");
    bad["documents"][0]["document"]["schedules"]["broken"] =
        json!({"trigger": {"every": "soon"}, "action": {"kind": "command", "executable": "true"}});
    let (status, _, body) = api.send(post("/api/declarations/apply", &bad)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["code"], "plan_has_errors");
    assert_eq!(body["plan"]["summary"]["error"], 1);
    let error = &body["plan"]["changes"][0];
    assert_eq!(
        (&error["name"], &error["action"], &error["path"]),
        (
            &json!("demo/broken"),
            &json!("error"),
            &json!("schedules.broken.trigger.every")
        )
    );
    assert!(
        api.schedules().await.is_empty(),
        "the valid member was not created either"
    );

    // A stale expected revision: nothing written, the row named.
    api.send(post("/api/declarations/apply", &nightly("0 2 * * *")))
        .await;
    let id = api.schedules().await[0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let patch = authed(Method::PATCH, &format!("/api/schedules/{id}"), DAEMON_TOKEN)
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(
            json!({"description": "by hand"}).to_string(),
        ))
        .expect("request");
    assert_eq!(api.send(patch).await.0, StatusCode::OK);
    let mut stale = nightly("0 4 * * *");
    stale["expected"] = json!({"demo/reindex": 1});
    let (status, _, body) = api.send(post("/api/declarations/apply", &stale)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("conflict"))
    );
    assert_eq!(body["name"], "demo/reindex", "{body}");
    assert_eq!(api.schedules().await[0]["revision"], 2);

    // A closed body: an unknown field is named.
    let mut extra = nightly("0 2 * * *");
    extra["force"] = json!(true);
    let (status, _, body) = api.send(post("/api/declarations/plan", &extra)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("validation_failed"))
    );
    assert_eq!(body["errors"][0]["path"], "force", "{body}");
}

#[tokio::test]
async fn export_round_trips_and_adopts_hand_made_explicitly() {
    let api = api_allowing().await;
    api.send(post("/api/declarations/apply", &nightly("0 2 * * *")))
        .await;
    for name in ["demo/manual", "solo", "a/b/c"] {
        let spec = json!({"name": name, "trigger": {"every": "1h"}, "action": {"kind": "command", "executable": "true"}});
        let (status, _, body) = api.send(post("/api/schedules", &spec)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let export = api.export("").await;
    assert_eq!(export["blocked"][0]["name"], "a/b/c");
    let docs = export["documents"].as_array().expect("documents");
    assert_eq!(docs.len(), 2);
    assert_eq!(
        (&docs[0]["project"], &docs[1]["project"]),
        (&json!("default"), &json!("demo"))
    );
    let demo = &docs[1];
    assert_eq!(
        demo["document"]["metadata"],
        json!({"name": "nightly-jobs", "project": "demo"})
    );
    assert_eq!(demo["adopt"], true);
    assert!(demo["document"]["schedules"]["manual"]["name"].is_null());
    assert_eq!(
        docs[0]["document"]["schedules"]["solo"]["trigger"],
        json!({"every": "1h"})
    );

    let documents: Vec<Value> = docs
        .iter()
        .map(|d| json!({"source": "export.yaml", "document": d["document"]}))
        .collect();
    let (status, _, body) = api
        .send(post(
            "/api/declarations/apply",
            &json!({"documents": documents}),
        ))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("plan_has_errors"))
    );
    assert_eq!(
        body["plan"]["summary"]["error"], 2,
        "hand-made rows need adopt"
    );

    let adopt = json!({"documents": documents, "adopt": true});
    let (status, _, body) = api.send(post("/api/declarations/apply", &adopt)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["summary"]["adopt"], 2);
    assert_eq!(body["summary"]["unchanged"], 1);
    let names: Vec<Value> = api
        .schedules()
        .await
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(
        names,
        [
            json!("a/b/c"),
            json!("default/solo"),
            json!("demo/manual"),
            json!("demo/reindex")
        ]
    );

    // From now on an export re-applies as a no-op.
    let export = api.export("?project=demo").await;
    assert_eq!(export["documents"][0]["adopt"], false);
    let before = api.schedules().await;
    let documents =
        json!({"documents": [{"source": "x", "document": export["documents"][0]["document"]}]});
    let (status, _, body) = api.send(post("/api/declarations/apply", &documents)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["summary"]["unchanged"], 2);
    assert_eq!(api.schedules().await, before);
}

/// Applying is an operator's; an apply that removes schedules (prune) is an admin's, and
/// refused for an operator with nothing written.
#[tokio::test]
async fn pruning_needs_an_admin() {
    let api = api_allowing().await;
    let (status, _, _) = api
        .send(post("/api/declarations/apply", &nightly("0 2 * * *")))
        .await;
    assert_eq!(status, StatusCode::OK);
    let operator = api.pair_as(studio_contract::role::Role::Operator).await["token"]
        .as_str()
        .expect("token")
        .to_owned();
    let mut emptied = nightly("0 2 * * *");
    emptied["documents"][0]["document"]["schedules"] = json!({});
    let as_operator = |body: &Value| post_as(&operator, "/api/declarations/apply", body);
    let mut pruning = emptied.clone();
    pruning["prune"] = json!(true);
    let (status, _, body) = api.send(as_operator(&pruning)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["code"], "forbidden");
    let names: Vec<Value> = api
        .schedules()
        .await
        .iter()
        .map(|s| s["enabled"].clone())
        .collect();
    assert_eq!(names, [json!(true)], "nothing was written");
    // Without prune the schedule is disabled, which an operator may do.
    let (status, _, body) = api.send(as_operator(&emptied)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let names: Vec<Value> = api
        .schedules()
        .await
        .iter()
        .map(|s| s["enabled"].clone())
        .collect();
    assert_eq!(names, [json!(false)]);
}

/// Pruning is destructive: an admin's browser needs its decision token too (refused,
/// nothing is removed); with it, the schedule goes. The daemon token needs none.
#[tokio::test]
async fn a_browser_prunes_only_with_its_decision_token() {
    let api = api_allowing().await;
    let (status, _, _) = api
        .send(post("/api/declarations/apply", &nightly("0 2 * * *")))
        .await;
    assert_eq!(status, StatusCode::OK);
    let admin = api.pair_as(studio_contract::role::Role::Admin).await;
    let token = admin["token"].as_str().expect("token");
    let decision = admin["decision_token"].as_str().expect("decision");
    let mut pruning = nightly("0 2 * * *");
    pruning["documents"][0]["document"]["schedules"] = json!({});
    pruning["prune"] = json!(true);
    let (status, _, body) = api
        .send(post_as(token, "/api/declarations/apply", &pruning))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("decision_required")),
        "{body}"
    );
    assert_eq!(api.schedules().await.len(), 1, "nothing was removed");
    let mut with_decision = post_as(token, "/api/declarations/apply", &pruning);
    with_decision.headers_mut().insert(
        "x-studio-decision-token",
        http::HeaderValue::from_str(decision).expect("header"),
    );
    with_decision
        .headers_mut()
        .insert(header::ORIGIN, http::HeaderValue::from_static(super::APP));
    let (status, _, body) = api.send(with_decision).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(api.schedules().await.is_empty());
}
