//! Approvals through the real router: a gated schedule's run waits, only a person
//! decides (the daemon token, admission alone, another session's token, a viewer and the
//! requester under `distinct_from_requester` are refused and nothing changes), a grant
//! is used once, a denial and an expiry end the run, an edit voids a pending request and
//! raises one for the new action, and the evidence bundle verifies under the home's key.

use axum::body::Body;
use http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};
use studio_contract::role::Role;

use super::{Api, api, authed, empty};
use crate::testing::{APP, DAEMON_TOKEN};

/// A browser session: its admission and decision tokens.
struct Browser {
    id: String,
    token: String,
    decision: String,
}

impl Api {
    async fn browser(&self, role: Role) -> Browser {
        let paired = self.pair_as(role).await;
        let text = |k: &str| paired[k].as_str().expect(k).to_owned();
        Browser {
            id: text("principal"),
            token: text("token"),
            decision: text("decision_token"),
        }
    }
}

/// A request from a browser's page: its bearer, its origin, and (when given) a decision
/// token.
fn from_page(method: Method, path: &str, who: &Browser, decision: Option<&str>) -> Request<Body> {
    let mut r = authed(method.clone(), path, &who.token).header(header::ORIGIN, APP);
    if let Some(d) = decision {
        r = r.header("x-studio-decision-token", d);
    }
    if method == Method::POST {
        r.header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(json!({ "reason": "looked at it" }).to_string()))
            .expect("request")
    } else {
        empty(r)
    }
}

async fn create(api: &Api, policy: Value) -> String {
    api.allow(&["true"]).await;
    let spec = json!({
        "name": "deploy/prod",
        "trigger": {"every": "1h"},
        "action": {"kind": "command", "executable": "true", "args": ["--prod"]},
        "env": {"API_TOKEN": "s3cret-value"},
        "policies": {"approval": policy},
    });
    let request = authed(Method::POST, "/api/schedules", DAEMON_TOKEN)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(spec.to_string()))
        .expect("request");
    let (status, _, body) = api.send(request).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["id"].as_str().expect("id").to_owned()
}

async fn trigger(api: &Api, schedule: &str, who: &Browser) -> Value {
    let path = format!("/api/schedules/{schedule}/trigger");
    let (status, _, run) = api.send(from_page(Method::POST, &path, who, None)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{run}");
    run
}

async fn get(api: &Api, path: &str) -> Value {
    let (status, _, body) = api
        .send(empty(authed(Method::GET, path, DAEMON_TOKEN)))
        .await;
    assert_eq!(status, StatusCode::OK, "{path}: {body}");
    body
}

#[tokio::test]
async fn only_a_person_decides_and_a_grant_is_used_once() {
    let api = api().await;
    let schedule = create(
        &api,
        json!({"expires_after": "15m", "distinct_from_requester": true}),
    )
    .await;
    let requester = api.browser(Role::Operator).await;
    let approver = api.browser(Role::Operator).await;
    let viewer = api.browser(Role::Viewer).await;

    let run = trigger(&api, &schedule, &requester).await;
    assert_eq!(run["status"], "awaiting_approval", "{run}");
    let approval_id = run["approval_id"].as_str().expect("a request").to_owned();
    let page = get(&api, "/api/approvals?status=pending").await;
    assert_eq!(page["approvals"].as_array().map(Vec::len), Some(1));
    let a = &page["approvals"][0];
    assert_eq!(
        (&a["id"], &a["run_id"], &a["requested_by"]),
        (&json!(approval_id), &run["id"], &json!(requester.id))
    );
    assert_eq!(
        a["action"],
        json!({"action": {"kind": "command", "executable": "true", "args": ["--prod"]},
               "cwd": null, "env": ["API_TOKEN"]})
    );
    assert!(
        !a.to_string().contains("s3cret-value"),
        "no environment value"
    );
    assert_eq!(get(&api, "/api/summary").await["pending_approvals"], 1);

    // Refusals: each leaves the request pending and the run waiting.
    let grant = format!("/api/approvals/{approval_id}/grant");
    let daemon = authed(Method::POST, &grant, DAEMON_TOKEN)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{}"))
        .expect("request");
    let refusals = [
        (daemon, StatusCode::FORBIDDEN, "human_decision_required"),
        (
            from_page(Method::POST, &grant, &approver, None),
            StatusCode::FORBIDDEN,
            "human_decision_required",
        ),
        (
            from_page(Method::POST, &grant, &approver, Some(&requester.decision)),
            StatusCode::FORBIDDEN,
            "human_decision_required",
        ),
        (
            from_page(Method::POST, &grant, &viewer, Some(&viewer.decision)),
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
        (
            from_page(Method::POST, &grant, &requester, Some(&requester.decision)),
            StatusCode::FORBIDDEN,
            "requester_cannot_approve",
        ),
    ];
    for (request, status, code) in refusals {
        assert_eq!(api.code_of(request).await, (status, code.to_owned()));
        let a = get(&api, &format!("/api/approvals/{approval_id}")).await;
        assert_eq!(
            a["approval"]["status"], "pending",
            "{code}: nothing changed"
        );
    }
    let run_id = run["id"].as_str().expect("run");
    let detail = get(&api, &format!("/api/runs/{run_id}")).await;
    assert_eq!(detail["status"], "awaiting_approval");

    // A person grants: the request is decided with who, why and from where.
    let (status, _, decided) = api
        .send(from_page(
            Method::POST,
            &grant,
            &approver,
            Some(&approver.decision),
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(decided["approval"]["status"], "granted");
    assert_eq!(decided["approval"]["decided_by"], json!(approver.id));
    assert_eq!(decided["approval"]["decided_role"], "operator");
    assert_eq!(decided["approval"]["decided_origin"], APP);
    assert_eq!(decided["approval"]["reason"], "looked at it");
    assert_eq!(decided["run"]["status"], "queued");
    assert_eq!(decided["run"]["counted"], true);

    // Used once: a second grant (or a denial) finds it decided.
    for path in [grant.clone(), format!("/api/approvals/{approval_id}/deny")] {
        let again = from_page(Method::POST, &path, &approver, Some(&approver.decision));
        assert_eq!(
            api.code_of(again).await,
            (StatusCode::CONFLICT, "approval_not_pending".into())
        );
    }
    // The launch consumes the grant (here it fails: no launcher in unit tests).
    let mut settled = Value::Null;
    for _ in 0..200 {
        settled = get(&api, &format!("/api/runs/{run_id}")).await;
        if settled["status"] == "failed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(settled["status"], "failed", "{settled}");
    assert_eq!(settled["approvals"][0]["status"], "consumed");
    let kinds: Vec<&str> = settled["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .filter_map(|r| r["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["requested", "granted", "consumed"]);

    // The audit trail names the approver.
    let trail = get(&api, "/api/audit?kind=approval_granted").await;
    assert_eq!(trail["entries"][0]["principal"], json!(approver.id));
    assert_eq!(
        trail["entries"][0]["object"],
        json!(format!("run:{run_id}"))
    );
    assert_eq!(get(&api, "/api/summary").await["pending_approvals"], 0);
}

#[tokio::test]
async fn a_denial_an_expiry_and_an_edit_each_end_a_request() {
    let api = api().await;
    let schedule = create(&api, json!({"expires_after": "15m"})).await;
    let alice = api.browser(Role::Operator).await;
    let bob = api.browser(Role::Operator).await;

    // Without distinct_from_requester the requester may decide: a denial.
    let run = trigger(&api, &schedule, &alice).await;
    let id = run["approval_id"].as_str().expect("request");
    let deny = format!("/api/approvals/{id}/deny");
    let (status, _, decided) = api
        .send(from_page(
            Method::POST,
            &deny,
            &alice,
            Some(&alice.decision),
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(
        (&decided["approval"]["status"], &decided["run"]["status"]),
        (&json!("denied"), &json!("denied"))
    );

    // An edit of what runs voids the pending request and raises one for the new action;
    // the old one can no longer be granted.
    let run = trigger(&api, &schedule, &alice).await;
    let old = run["approval_id"].as_str().expect("request").to_owned();
    let patch = authed(
        Method::PATCH,
        &format!("/api/schedules/{schedule}"),
        DAEMON_TOKEN,
    )
    .header(header::CONTENT_TYPE, "application/json")
    .body(Body::from(
        json!({"action": {"kind": "command", "executable": "true", "args": ["--staging"]}})
            .to_string(),
    ))
    .expect("request");
    let (status, _, body) = api.send(patch).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let detail = get(
        &api,
        &format!("/api/runs/{}", run["id"].as_str().expect("id")),
    )
    .await;
    assert_eq!(detail["status"], "awaiting_approval");
    let new = detail["approval_id"].as_str().expect("a new request");
    assert_ne!(new, old);
    assert_eq!(detail["approvals"][0]["status"], "voided");
    assert_eq!(detail["approvals"][0]["reason"], "approval_stale");
    assert_eq!(detail["approvals"][1]["status"], "pending");
    assert_eq!(
        detail["approvals"][1]["action"]["action"]["args"],
        json!(["--staging"])
    );
    assert_eq!(
        detail["action"]["args"],
        json!(["--staging"]),
        "what will run"
    );
    let stale = from_page(
        Method::POST,
        &format!("/api/approvals/{old}/grant"),
        &bob,
        Some(&bob.decision),
    );
    assert_eq!(
        api.code_of(stale).await,
        (StatusCode::CONFLICT, "approval_stale".into())
    );
    // An edit that leaves what runs alone leaves the request alone.
    let patch = authed(
        Method::PATCH,
        &format!("/api/schedules/{schedule}"),
        DAEMON_TOKEN,
    )
    .header(header::CONTENT_TYPE, "application/json")
    .body(Body::from(json!({"description": "ships it"}).to_string()))
    .expect("request");
    assert_eq!(api.send(patch).await.0, StatusCode::OK);
    let a = get(&api, &format!("/api/approvals/{new}")).await;
    assert_eq!(a["approval"]["status"], "pending");

    // Deleting the schedule ends the request's run.
    let delete = empty(
        authed(
            Method::DELETE,
            &format!("/api/schedules/{schedule}"),
            DAEMON_TOKEN,
        )
        .header(header::CONTENT_TYPE, "application/json"),
    );
    assert_eq!(api.send(delete).await.0, StatusCode::OK);
    let a = get(&api, &format!("/api/approvals/{new}")).await;
    assert_eq!(a["approval"]["status"], "voided");
    let detail = get(
        &api,
        &format!("/api/runs/{}", run["id"].as_str().expect("id")),
    )
    .await;
    assert_eq!(
        (&detail["status"], &detail["reason"]),
        (&json!("cancelled"), &json!("schedule_deleted"))
    );
}

#[tokio::test]
async fn an_expired_request_cannot_be_granted_and_the_bundle_verifies() {
    let api = api().await;
    let schedule = create(&api, json!({"expires_after": "1s"})).await;
    let alice = api.browser(Role::Operator).await;
    let run = trigger(&api, &schedule, &alice).await;
    let id = run["approval_id"].as_str().expect("request");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let grant = from_page(
        Method::POST,
        &format!("/api/approvals/{id}/grant"),
        &alice,
        Some(&alice.decision),
    );
    assert_eq!(
        api.code_of(grant).await,
        (StatusCode::CONFLICT, "approval_expired".into())
    );
    let detail = get(
        &api,
        &format!("/api/runs/{}", run["id"].as_str().expect("id")),
    )
    .await;
    assert_eq!(
        (&detail["status"], &detail["reason"]),
        (&json!("expired"), &json!("approval_expired"))
    );

    // The whole log as a bundle: it verifies under the key, and names every step.
    let request = empty(authed(Method::GET, "/api/evidence", DAEMON_TOKEN));
    let response = tower::ServiceExt::oneshot(api.router.clone(), request)
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let key = studio_evidence::Key::new(crate::scheduling::store::TEST_EVIDENCE_KEY);
    let verified = studio_evidence::verify_bundle(&bytes[..], Some(&key)).expect("verifies");
    assert_eq!((verified.rows, verified.signed), (2, true));
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("\"kind\":\"requested\"") && text.contains("\"kind\":\"expired\""));
    let bad = empty(authed(
        Method::GET,
        "/api/evidence?since=yesterday",
        DAEMON_TOKEN,
    ));
    assert_eq!(
        api.code_of(bad).await,
        (StatusCode::BAD_REQUEST, "bad_request".into())
    );
}

#[tokio::test]
async fn the_list_filters_and_pages_with_a_cursor_bound_to_its_filters() {
    let api = api().await;
    let schedule = create(&api, json!({})).await;
    let alice = api.browser(Role::Operator).await;
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(trigger(&api, &schedule, &alice).await);
    }
    let first = get(
        &api,
        &format!("/api/approvals?schedule_id={schedule}&limit=2"),
    )
    .await;
    assert_eq!(first["approvals"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        first["approvals"][0]["run_id"], runs[2]["id"],
        "newest first"
    );
    let cursor = first["next_cursor"].as_str().expect("a next page");
    let rest = get(
        &api,
        &format!("/api/approvals?schedule_id={schedule}&limit=2&cursor={cursor}"),
    )
    .await;
    assert_eq!(rest["approvals"][0]["run_id"], runs[0]["id"]);
    assert_eq!(rest["next_cursor"], Value::Null);
    let run_id = runs[1]["id"].as_str().expect("id");
    let one = get(&api, &format!("/api/approvals?run_id={run_id}")).await;
    assert_eq!(one["approvals"].as_array().map(Vec::len), Some(1));
    let none = get(&api, "/api/approvals?status=granted,denied").await;
    assert_eq!(none["approvals"], json!([]));
    for bad in [
        format!("/api/approvals?status=pending&cursor={cursor}"),
        "/api/approvals?cursor=forged".to_owned(),
    ] {
        let request = empty(authed(Method::GET, &bad, DAEMON_TOKEN));
        assert_eq!(
            api.code_of(request).await,
            (StatusCode::BAD_REQUEST, "invalid_cursor".into()),
            "{bad}"
        );
    }
    let request = empty(authed(
        Method::GET,
        "/api/approvals?status=maybe",
        DAEMON_TOKEN,
    ));
    assert_eq!(
        api.code_of(request).await,
        (StatusCode::BAD_REQUEST, "bad_request".into())
    );
    let request = empty(authed(Method::GET, "/api/approvals/nope", DAEMON_TOKEN));
    assert_eq!(
        api.code_of(request).await,
        (StatusCode::NOT_FOUND, "approval_not_found".into())
    );
    let long = json!({ "reason": "x".repeat(501) });
    let id = runs[0]["approval_id"].as_str().expect("request");
    let mut request = from_page(
        Method::POST,
        &format!("/api/approvals/{id}/deny"),
        &alice,
        Some(&alice.decision),
    );
    *request.body_mut() = Body::from(long.to_string());
    assert_eq!(
        api.code_of(request).await,
        (StatusCode::BAD_REQUEST, "validation_failed".into())
    );
    let a = get(&api, &format!("/api/approvals/{id}")).await;
    assert_eq!(
        a["approval"]["status"], "pending",
        "a refused decision changes nothing"
    );
}
