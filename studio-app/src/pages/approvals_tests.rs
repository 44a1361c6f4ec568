//! The Approvals page and a run's approvals rendered to strings with sample data: what a
//! grant lets run, shown exactly and escaped; who asked; the countdown; the decision only
//! for a role that decides; the history with its deciders.

use askama::Template;
use jiff::Timestamp;
use studio_contract::role::Role;

use super::{ApprovalView, ApprovalsPage, ApprovalsQuery, EvidenceView};
use crate::{
    daemon::{Approval, EvidenceRow, PageState, RunDetail},
    pages::{Ctx, Nav, runs},
};

const ME: &str = "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0001";

fn ctx(role: Role) -> Ctx {
    let mut ctx = Ctx::new(PageState::Paired, Nav::Approvals);
    ctx.now = "2026-01-01T12:00:00Z".parse::<Timestamp>().expect("ts");
    ctx.principal = Some(ME.into());
    ctx.role = role;
    ctx
}

/// A request as studiod sends it; the executable and its arguments hold markup.
fn approval(status: &str, requested_by: Option<&str>) -> Approval {
    serde_json::from_value(serde_json::json!({
        "id": "0190bbbb-0000-7000-8000-0000appr0001",
        "run_id": "0190cccc-0000-7000-8000-00000000run1",
        "schedule_id": "sch_1", "schedule_name": "deploy <prod>", "status": status,
        "action": {"action": {"kind": "command", "executable": "<script>alert(1)</script>",
                              "args": ["--target", "a b"]},
                   "cwd": "/srv/app", "env": ["TOKEN", "MODE"],
                   "follow_ups": {"on_fail": {"action": {"kind": "agent", "prompt": "<b>explain</b>"}},
                                  "on_success": null}},
        "action_sha256": "0123456789abcdef".repeat(4),
        "requested_by": requested_by,
        "requested_at": "2026-01-01T11:50:00.000Z",
        "expires_at": "2026-01-01T12:15:00.000Z",
        "distinct_from_requester": true,
        "decided_by": null, "decided_role": null, "decided_origin": null, "decided_at": null,
        "reason": null
    }))
    .expect("approval")
}

fn page(role: Role, pending: Vec<Approval>, decided: Vec<Approval>) -> String {
    let ctx = ctx(role);
    let view = |a: &Approval| ApprovalView::new(a, &ctx);
    ApprovalsPage {
        pending: pending.iter().map(view).collect(),
        decided: decided.iter().map(view).collect(),
        more_pending: false,
        query: ApprovalsQuery::default(),
        next: Some("c/1".into()),
        ctx: ctx.clone(),
    }
    .render()
    .expect("renders")
}

#[test]
fn a_pending_request_shows_exactly_what_runs_as_text() {
    let html = page(Role::Operator, vec![approval("pending", None)], vec![]);
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(!html.contains("<b>explain"), "{html}");
    assert!(
        html.contains(
            r#"data-testid="approval-command">&#39;&#60;script&#62;alert(1)&#60;/script&#62;&#39; --target &#39;a b&#39;</code>"#
        ),
        "{html}"
    );
    assert!(
        html.contains(r#"data-testid="follow-up-prompt">&#60;b&#62;explain&#60;/b&#62;</pre>"#),
        "{html}"
    );
    assert!(html.contains("after a failure: "), "{html}");
    assert!(html.contains("<code>/srv/app</code>"));
    assert!(
        html.contains("<code>TOKEN</code>, <code>MODE</code>"),
        "{html}"
    );
    assert!(html.contains(">deploy &#60;prod&#62;</a>"), "{html}");
    assert!(html.contains(r#"data-testid="approval-requester">the clock"#));
    assert!(html.contains(r#"title="0123456789abcdef"#) && html.contains(">0123456789ab</code>"));
    // The countdown ticks towards the expiry, which is also given as an instant.
    assert!(
        html.contains(
            r#"data-expires="2026-01-01T12:15:00.000Z" title="expires 2026-01-01 12:15:00 UTC""#
        ) && html.contains(">15 min 0 s left</strong>"),
        "{html}"
    );
    assert!(
        html.contains(r#"<time datetime="2026-01-01T12:15:00Z" title="2026-01-01 12:15:00 UTC""#)
    );
    for id in [
        "approval-reason",
        "approval-grant",
        "approval-deny",
        "approval-result",
    ] {
        assert!(html.contains(&format!(r#"data-testid="{id}""#)), "{id}");
    }
    assert!(
        html.contains(r#"data-url="/api/approvals/0190bbbb-0000-7000-8000-0000appr0001/grant""#)
    );
    assert!(html.contains(r#"aria-current="page" data-testid="nav-approvals""#));
    assert!(
        html.contains("<title>(1) Approvals · Studio</title>"),
        "{html}"
    );
}

#[test]
fn a_viewer_reads_the_requests_and_is_offered_no_decision() {
    let html = page(Role::Viewer, vec![approval("pending", None)], vec![]);
    assert!(html.contains(r#"data-testid="approval""#));
    for id in ["approval-reason", "approval-grant", "approval-deny"] {
        assert!(!html.contains(&format!(r#"data-testid="{id}""#)), "{id}");
    }
    assert!(html.contains(r#"data-testid="role-note""#));
}

#[test]
fn requesters_are_named_and_this_browser_is_told_it_may_not_decide() {
    let html = page(Role::Admin, vec![approval("pending", Some(ME))], vec![]);
    assert!(html.contains("browser ffff0001 (this browser)"), "{html}");
    assert!(html.contains("another person must decide it"), "{html}");
    let other = "0190aaaa-bbbb-7ccc-8ddd-000000000002";
    let html = page(Role::Admin, vec![approval("pending", Some(other))], vec![]);
    assert!(html.contains(r#"data-testid="approval-requester">browser 00000002 <time"#));
    assert!(html.contains("The browser that asked for this run may not decide it."));
    let html = page(
        Role::Admin,
        vec![approval("pending", Some("daemon"))],
        vec![],
    );
    assert!(html.contains(r#"data-testid="approval-requester">daemon token"#));
    assert!(
        !html.contains(r#"data-testid="approval-distinct""#),
        "only a browser that asked is barred"
    );
}

#[test]
fn an_expired_request_offers_no_decision_and_the_history_names_deciders() {
    let mut late = approval("pending", None);
    late.expires_at = "2026-01-01T11:59:00.000Z".into();
    let mut denied = approval("denied", Some("daemon"));
    denied.decided_by = Some("0190aaaa-bbbb-7ccc-8ddd-000000000002".into());
    denied.decided_role = Some(Role::Operator);
    denied.decided_at = Some("2026-01-01T11:55:00.000Z".into());
    denied.reason = Some("<i>not during the freeze</i>".into());
    let html = page(Role::Operator, vec![late], vec![denied]);
    assert!(html.contains(">expired</strong>"), "{html}");
    assert!(
        html.contains(r#"data-testid="approval-decision" hidden"#),
        "{html}"
    );
    assert!(html.contains(r#"data-testid="decided-row""#));
    assert!(html.contains(r#"data-testid="decided-status">denied<"#));
    assert!(
        html.contains(
            r#"data-testid="decided-by">browser 00000002 <span class="muted">(operator)</span>"#
        ),
        "{html}"
    );
    assert!(
        html.contains(
            r#"data-testid="decided-reason">&#60;i&#62;not during the freeze&#60;/i&#62;<"#
        ),
        "{html}"
    );
    assert!(html.contains(r#"href="/approvals?cursor=c%2F1""#), "{html}");
}

#[test]
fn a_binding_this_version_cannot_read_is_shown_as_its_json() {
    let mut odd = approval("pending", None);
    odd.action = serde_json::json!({"action": {"kind": "teleport", "to": "<mars>"}});
    let html = page(Role::Operator, vec![odd], vec![]);
    assert!(html.contains(r#"data-testid="approval-raw""#), "{html}");
    assert!(html.contains("&#60;mars&#62;"), "{html}");
    assert!(!html.contains("<mars>"));
}

fn awaiting_run() -> RunDetail {
    serde_json::from_value(serde_json::json!({
        "id": "0190cccc-0000-7000-8000-00000000run1", "schedule_id": "sch_1",
        "schedule_name": "deploy", "kind": "manual", "status": "awaiting_approval",
        "attempt": 1, "counted": true, "chain_depth": 0,
        "approval_id": "0190bbbb-0000-7000-8000-0000appr0001",
        "created_at": "2026-01-01T11:50:00.000Z",
        "transitions": [{"from": null, "to": "awaiting_approval", "reason": "triggered",
                         "at": "2026-01-01T11:50:00.000Z"}]
    }))
    .expect("run")
}

fn run_page(detail: &RunDetail, role: Role) -> String {
    let ctx = ctx(role);
    runs::DetailPage {
        run: Some(runs::RunRow::detail(detail, &ctx)),
        history: Vec::new(),
        approvals: detail
            .approvals
            .iter()
            .map(|a| ApprovalView::new(a, &ctx))
            .collect(),
        evidence: detail
            .evidence
            .iter()
            .map(|e| EvidenceView::new(e, &ctx))
            .collect(),
        notifications: Vec::new(),
        ctx,
    }
    .render()
    .expect("renders")
}

fn evidence(seq: i64, kind: &str) -> EvidenceRow {
    EvidenceRow {
        seq,
        at_ms: 1_767_268_200_000 + seq * 1000,
        kind: kind.into(),
        content: serde_json::json!({"approval": "a"}),
        content_sha256: "c".repeat(64),
        chain_sha256: format!("{seq:012}{}", "f".repeat(52)),
        mac: "m".repeat(64),
    }
}

#[test]
fn a_run_awaiting_approval_says_so_and_links_to_its_decision() {
    let mut detail = awaiting_run();
    detail.approvals = vec![approval("pending", Some("daemon"))];
    detail.evidence = vec![evidence(1, "requested")];
    let html = run_page(&detail, Role::Operator);
    assert!(html.contains(r#"data-testid="run-awaiting""#), "{html}");
    assert!(
        html.contains(
            r#"href="/approvals#approval-0190bbbb-0000-7000-8000-0000appr0001" data-testid="run-decide">Decide it"#
        ),
        "{html}"
    );
    assert!(html.contains(r#"data-testid="run-awaiting-countdown">15 min 0 s left<"#));
    assert!(html.contains(r#"data-testid="run-approval-status">waiting for a decision<"#));
    assert!(html.contains(r#"data-testid="run-approval-hash">0123456789ab<"#));
    assert!(html.contains(r#"data-testid="evidence-kind">requested<"#));
    assert!(
        html.contains(">000000000001</code>"),
        "the chain hash is shortened"
    );
    assert!(!html.contains("run-cancel"), "nothing runs yet to cancel");
}

#[test]
fn a_decided_run_names_its_decider_reason_and_every_sealed_step() {
    let mut detail = awaiting_run();
    detail.run.core.status = studio_api::RunStatus::Denied;
    let mut denied = approval("denied", Some("daemon"));
    denied.decided_by = Some(ME.into());
    denied.decided_role = Some(Role::Admin);
    denied.decided_at = Some("2026-01-01T11:55:00.000Z".into());
    denied.reason = Some("<u>freeze</u>".into());
    detail.approvals = vec![denied];
    detail.evidence = vec![evidence(1, "requested"), evidence(2, "denied")];
    let html = run_page(&detail, Role::Viewer);
    assert!(!html.contains(r#"data-testid="run-awaiting""#));
    assert!(
        html.contains(r#"data-testid="run-approval-decider">browser ffff0001 (this browser)<"#)
    );
    assert!(html.contains(r#"data-testid="run-approval-reason">&#60;u&#62;freeze&#60;/u&#62;<"#));
    assert_eq!(html.matches(r#"data-testid="evidence-row""#).count(), 2);
    assert!(html.contains("never started: denied"), "{html}");
}
