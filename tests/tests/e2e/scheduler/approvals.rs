//! Approval-gated runs in real processes: the daemon token cannot decide; a grant
//! from a paired browser (through studio-app, with its decision token) launches the run
//! exactly once even when studiod is killed between the grant and the launch; the clock's
//! request expires on its own; a denial ends a run; and the exported evidence bundle
//! verifies with the home's key, while an edit, a deletion, an insertion or a reordering
//! of its rows is caught.

use studio_api::{
    ApprovalDetail, ApprovalStatus, Code, Decided, app::BrowserPaired, schedule::ApprovalPolicy,
};
use studio_tests::admission_cookie;

use super::*;
use crate::{from_browser, pair};

/// A paired browser: its admission cookie and its decision token.
pub(super) struct Browser {
    cookie: String,
    decision: String,
}

pub(super) async fn browser(studio: &Studio) -> Browser {
    browser_with(studio, &studio.pair_code()).await
}

/// A browser paired with `code`.
async fn browser_with(studio: &Studio, code: &str) -> Browser {
    let resp = pair(studio, code).await;
    let cookie = admission_cookie(&resp).expect("a cookie");
    let paired: BrowserPaired = Reply::of(resp).await.expect(200);
    Browser {
        cookie,
        decision: paired.decision_token,
    }
}

pub(super) fn gated(spec: ScheduleSpec, expires_after: &str, distinct: bool) -> ScheduleSpec {
    with_policies(
        spec,
        Policies {
            approval: Some(ApprovalPolicy {
                required: true,
                expires_after: expires_after.into(),
                distinct_from_requester: distinct,
            }),
            ..Policies::default()
        },
    )
}

/// A decision from `who`'s page, through the app.
pub(super) async fn decide(studio: &Studio, who: &Browser, approval: &str, verdict: &str) -> Reply {
    let path = format!("/api/approvals/{approval}/{verdict}");
    let resp = from_browser(
        studio,
        Method::POST,
        &path,
        &who.cookie,
        Some(&who.decision),
    )
    .body(r#"{"reason":"checked the diff"}"#)
    .send()
    .await;
    match resp {
        Ok(resp) => Reply::of(resp).await,
        // studiod died mid-answer (the crash point): the app may drop the connection.
        Err(e) => Reply {
            status: 0,
            text: e.to_string(),
        },
    }
}

/// A grant from `who`'s cookie and decision token, sent with `origin` as its Origin.
async fn grant_from(studio: &Studio, who: &Browser, approval: &str, origin: &str) -> Reply {
    let resp = studio_tests::http()
        .post(studio.app_url(&format!("/api/approvals/{approval}/grant")))
        .header("cookie", &who.cookie)
        .header("origin", origin)
        .header("content-type", "application/json")
        .header("x-studio-decision-token", &who.decision)
        .body("{}")
        .send()
        .await
        .expect("grant");
    Reply::of(resp).await
}

async fn status_of(api: &Api, approval: &str) -> ApprovalStatus {
    let detail: ApprovalDetail = api
        .get(&format!("/api/approvals/{approval}"))
        .await
        .expect(200);
    detail.approval.status
}

fn kinds(detail: &RunDetail) -> Vec<&str> {
    detail.evidence.iter().map(|r| r.kind.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_a_grant_launches_once_across_a_kill_between_grant_and_launch() {
    let studio = start(&[("STUDIO_TEST_CRASH_AT", "after_grant")]);
    let api = Api::new(&studio);
    let ran = marker(&studio, "ran");
    let spec = gated(
        sh(
            "gated/once",
            every("1h"),
            &format!("echo \"$STUDIO_RUN_ID\" >> '{}'", ran.display()),
        ),
        "10m",
        true,
    );
    let schedule = api.create(&spec).await.id;
    let (requester, approver) = (browser(&studio).await, browser(&studio).await);
    let trigger = format!("/api/schedules/{schedule}/trigger");
    let run: Run = Reply::of(
        from_browser(&studio, Method::POST, &trigger, &requester.cookie, None)
            .send()
            .await
            .expect("trigger"),
    )
    .await
    .expect(202);
    assert_eq!(run.core.status, RunStatus::AwaitingApproval);
    let approval = run.core.approval_id.clone().expect("a request");

    // The daemon token is the machine's owner, not a person: refused, nothing changes.
    let by_token = api
        .post(
            &format!("/api/approvals/{approval}/grant"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(
        by_token.code(),
        (403, Code::HumanDecisionRequired),
        "{by_token}"
    );
    // The requester may not grant its own run.
    let own = decide(&studio, &requester, &approval, "grant").await;
    assert_eq!(own.code(), (403, Code::RequesterCannotApprove), "{own}");
    assert_eq!(
        api.run(&run.core.id).await.run.core.status,
        RunStatus::AwaitingApproval
    );

    // Another person grants; studiod dies right after committing it, before the launch.
    let daemon = studio.child_pid("daemon");
    decide(&studio, &approver, &approval, "grant").await;
    let restarted = studio.wait_running("daemon", Some(daemon), WAIT);
    assert_ne!(
        restarted, daemon,
        "studiod died between the grant and the launch"
    );
    let done = api.finished(&run.core.id).await;
    assert_eq!(done.run.core.status, RunStatus::Completed, "{done:?}");
    assert_eq!(
        lines_of(&ran),
        std::slice::from_ref(&run.core.id),
        "launched exactly once"
    );
    assert_eq!(
        api.runs(&schedule).await.len(),
        1,
        "one run, no replacement"
    );
    assert_eq!(
        kinds(&done),
        ["requested", "granted", "consumed", "launched"]
    );
    assert_eq!(done.approvals[0].status, ApprovalStatus::Consumed);
    // Used once: a second grant (from a browser paired with the new studiod: a restart
    // ends the earlier sessions) is refused.
    let again = decide(&studio, &browser(&studio).await, &approval, "grant").await;
    assert_eq!(again.code(), (409, Code::ApprovalNotPending), "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_expire_and_deny_and_the_evidence_bundle_catches_tampering() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    // The clock fires a request nobody decides: it expires on its own.
    let clock = api
        .create(&gated(
            sh("gated/clock", at(&in_secs(1)), "true"),
            "2s",
            false,
        ))
        .await
        .id;
    let expired = api
        .wait_runs(&clock, "the unanswered request to expire", |runs| {
            runs.iter().any(|r| r.core().status == RunStatus::Expired)
        })
        .await;
    assert_eq!(expired.len(), 1, "{expired:?}");
    assert_eq!(
        expired[0].core().reason.as_deref(),
        Some("approval_expired")
    );

    // A person denies a manual run.
    let person = browser(&studio).await;
    let manual = api
        .create(&gated(sh("gated/manual", every("1h"), "true"), "1h", false))
        .await
        .id;
    let run = api.trigger(&manual).await;
    let approval = run.core.approval_id.clone().expect("a request");
    let denied: Decided = decide(&studio, &person, &approval, "deny")
        .await
        .expect(200);
    assert_eq!(denied.run.core.status, RunStatus::Denied);
    assert_eq!(denied.approval.reason.as_deref(), Some("checked the diff"));
    let detail: ApprovalDetail = api
        .get(&format!("/api/approvals/{approval}"))
        .await
        .expect(200);
    assert_eq!(detail.approval.status, ApprovalStatus::Denied);

    // The CLI lists and shows requests (it decides nothing).
    let listed = studio.cli(&["approvals", "--status", "denied"]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listed.contains(&approval) && listed.contains("gated/manual"),
        "{listed}"
    );
    assert!(!listed.contains("gated/clock"), "filtered: {listed}");
    let shown = studio.cli(&["approvals", "show", &approval]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    for want in [
        "status     denied",
        "runs       sh -c true",
        "reason     checked the diff",
    ] {
        assert!(shown.contains(want), "{want:?} in {shown}");
    }
    let json = studio.cli(&["approvals", "--json"]);
    let page: studio_api::ApprovalPage = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(page.approvals.len(), 2);
    let missing = studio.cli(&["approvals", "show", "nope"]);
    assert_ne!(missing.status.code(), Some(0), "{missing:?}");

    // The whole log, exported by the CLI, verifies with the home's key...
    let export = studio.cli(&["evidence", "export"]);
    assert!(export.status.success(), "{export:?}");
    let bundle = String::from_utf8(export.stdout).expect("text");
    let dir = TempDir::new("bundle");
    let key = studio.home_path().join("run/evidence.key");
    let verify = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write the bundle");
        let out = studio.cli(&[
            "evidence",
            "verify",
            path.to_str().expect("path"),
            "--key",
            key.to_str().expect("key"),
        ]);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = verify("whole.jsonl", &bundle);
    assert_eq!(code, Some(0), "{err}");
    // ...and each of the four tamperings is caught at its row.
    let lines: Vec<&str> = bundle.lines().collect();
    assert_eq!(lines.len(), 5, "a header and four rows: {bundle}");
    let join = |rows: &[&str]| rows.join("\n") + "\n";
    let edited = lines[2].replace("\"kind\":\"expired\"", "\"kind\":\"granted\"");
    assert_ne!(edited, lines[2]);
    let cases = [
        (
            "edit",
            join(&[lines[0], lines[1], &edited, lines[3], lines[4]]),
        ),
        ("deletion", join(&[lines[0], lines[1], lines[3], lines[4]])),
        (
            "insertion",
            join(&[lines[0], lines[1], lines[2], lines[2], lines[3], lines[4]]),
        ),
        (
            "reordering",
            join(&[lines[0], lines[1], lines[3], lines[2], lines[4]]),
        ),
    ];
    for (what, text) in cases {
        let (code, err) = verify(&format!("{what}.jsonl"), &text);
        assert_eq!(code, Some(1), "{what}: {err}");
        assert!(
            err.contains("row 2") || err.contains("row 3"),
            "{what}: {err}"
        );
    }
    // A bundle from a later instant starts from the hash of the row before it.
    let row = |line: &str| serde_json::from_str::<serde_json::Value>(line).expect("row");
    let at = row(lines[3])["at_ms"].as_i64().expect("at_ms");
    let since = Timestamp::from_millisecond(at)
        .expect("instant")
        .to_string();
    let later = studio.cli(&["evidence", "export", "--since", &since]);
    let later = String::from_utf8(later.stdout).expect("text");
    let header = row(later.lines().next().expect("a header"));
    assert_eq!(
        header["previous_chain_sha256"],
        row(lines[2])["chain_sha256"]
    );
    assert_eq!(header["rows"], 2);
    let (code, err) = verify("later.jsonl", &later);
    assert_eq!(code, Some(0), "{err}");

    // Bad input: one line, exit 2.
    let out = studio.cli(&["evidence", "export", "--since", "yesterday"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_refuse_a_viewer_and_a_foreign_origin_and_an_edit_voids_a_request() {
    // A second origin the app serves (as behind a proxy): allowed at the door, but not
    // the origin the browser paired from.
    let studio = start(&[("STUDIO_ALLOWED_ORIGINS", "http://studio.example")]);
    let api = Api::new(&studio);
    let ran = marker(&studio, "ran");
    let script = |word: &str| format!("echo {word} >> '{}'", ran.display());
    let spec = gated(
        sh("gated/edit", every("1h"), &script("first")),
        "10m",
        false,
    );
    let schedule = api.create(&spec).await.id;
    let admin = browser(&studio).await;
    let link = studio.cli(&["pair", "--role", "viewer"]);
    let code =
        studio_tests::code_from_link(&String::from_utf8_lossy(&link.stdout)).expect("a link");
    let viewer = browser_with(&studio, &code).await;
    let run = api.trigger(&schedule).await;
    let first = run.core.approval_id.clone().expect("a request");

    // A viewer decides nothing; a foreign origin is refused at the door; the browser's
    // own token sent from another origin the app allows does not resolve.
    let refused = decide(&studio, &viewer, &first, "grant").await;
    assert_eq!(refused.code(), (403, Code::Forbidden), "{refused}");
    let foreign = grant_from(&studio, &admin, &first, "http://evil.example").await;
    assert_eq!(foreign.code(), (403, Code::OriginNotAllowed), "{foreign}");
    let moved = grant_from(&studio, &admin, &first, "http://studio.example").await;
    assert_eq!(moved.code(), (403, Code::HumanDecisionRequired), "{moved}");
    assert_eq!(
        status_of(&api, &first).await,
        ApprovalStatus::Pending,
        "nothing changed"
    );

    // An edit of what runs voids the request and raises one for the new action.
    let patch = api
        .send(
            Method::PATCH,
            &format!("/api/schedules/{schedule}"),
            Some(
                serde_json::json!({"action": {"kind": "command", "executable": "sh",
                    "args": ["-c", script("second")]}})
                .to_string(),
            ),
        )
        .await;
    assert_eq!(patch.status, 200, "{patch}");
    let waiting = api.run(&run.core.id).await;
    let second = waiting.run.core.approval_id.clone().expect("a new request");
    assert_ne!(second, first);
    assert_eq!(status_of(&api, &first).await, ApprovalStatus::Voided);
    let stale = decide(&studio, &admin, &first, "grant").await;
    assert_eq!(stale.code(), (409, Code::ApprovalStale), "{stale}");
    let granted: Decided = decide(&studio, &admin, &second, "grant").await.expect(200);
    assert_eq!(granted.run.core.id, run.core.id);
    let done = api.finished(&run.core.id).await;
    assert_eq!(done.run.core.status, RunStatus::Completed, "{done:?}");
    assert_eq!(lines_of(&ran), ["second"], "the approved action ran, once");
    assert_eq!(
        kinds(&done),
        [
            "requested",
            "voided",
            "requested",
            "granted",
            "consumed",
            "launched"
        ]
    );
}

/// A task that needs a grant: submitted from the terminal, it waits `awaiting_approval`
/// and no worker takes it; the daemon token cannot grant it; a person's grant queues it
/// and its one attempt (the run the request is bound to) runs, sealed as launched; a
/// denied task ends `denied` without running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_hold_a_task_until_a_person_grants_it() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let out = marker(&studio, "task-ran");
    let submit = |script: String| {
        let api = &api;
        async move {
            let body = serde_json::json!({
                "action": {"kind": "command", "executable": "sh", "args": ["-c", script]},
                "approval": {"required": true, "expires_after": "15m"},
            });
            let task: studio_api::Task = api.post("/api/tasks", &body).await.expect(201);
            task
        }
    };
    let task = submit(format!("echo ran >> {}", out.display())).await;
    assert_eq!(
        task.status,
        studio_api::TaskStatus::AwaitingApproval,
        "{task:?}"
    );
    let waiting = task.last_run_id.clone().expect("its first attempt");
    let run: RunDetail = api.get(&format!("/api/runs/{waiting}")).await.expect(200);
    let approval = run.run.core.approval_id.clone().expect("a request");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!out.exists(), "nothing runs before the grant");
    let refused = api.act(&format!("/api/approvals/{approval}/grant")).await;
    assert_eq!(refused.status, 403, "{refused}");

    let person = browser(&studio).await;
    let granted = decide(&studio, &person, &approval, "grant").await;
    assert_eq!(granted.status, 200, "{granted}");
    let done: studio_api::TaskDetail = until("the granted task to end", WAIT, async || {
        let t: studio_api::TaskDetail = api
            .get(&format!("/api/tasks/{}", task.id))
            .await
            .expect(200);
        t.task.status.is_terminal().then_some(t)
    })
    .await;
    assert_eq!(
        done.task.status,
        studio_api::TaskStatus::Completed,
        "{done:?}"
    );
    assert_eq!(done.attempts.len(), 1);
    assert_eq!(
        done.attempts[0].core.id, waiting,
        "the bound run is the attempt"
    );
    assert_eq!(lines_of(&out), ["ran"]);
    assert_eq!(status_of(&api, &approval).await, ApprovalStatus::Consumed);
    let run: RunDetail = api.get(&format!("/api/runs/{waiting}")).await.expect(200);
    assert!(kinds(&run).contains(&"launched"), "{:?}", kinds(&run));

    let other = submit("true".into()).await;
    let run: RunDetail = api
        .get(&format!(
            "/api/runs/{}",
            other.last_run_id.expect("attempt")
        ))
        .await
        .expect(200);
    let approval = run.run.core.approval_id.expect("a request");
    let denied = decide(&studio, &person, &approval, "deny").await;
    assert_eq!(denied.status, 200, "{denied}");
    let t: studio_api::TaskDetail = api
        .get(&format!("/api/tasks/{}", other.id))
        .await
        .expect(200);
    assert_eq!(t.task.status, studio_api::TaskStatus::Denied, "{t:?}");
}
