//! What an enrolled worker controls, sent as an attacker would: another worker's run, a
//! stale fence, a run id that names a path, labels its token never granted, an outcome
//! for a run it does not hold. Against a real scheduler over a real `state.db`.

use studio_contract::role::Role;

use super::{
    store::{NewTask, NewWorker, Note, WorkerRow},
    tests::scheduler,
    workers::LogStream,
};
use crate::{
    audit::{Actor, Kind},
    testing::TempDir,
};

fn admin() -> Actor {
    Actor {
        principal: "daemon".into(),
        role: Role::Admin,
        origin: None,
        epoch: "e1".into(),
    }
}

/// Enrols worker `id` with a token granting `labels`.
async fn enrol(s: &super::Scheduler, id: &str, labels: &[&str]) -> WorkerRow {
    let by = admin();
    let labels: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
    s.record_join_token(&format!("digest-{id}"), &labels, i64::MAX, &by)
        .await
        .expect("token");
    let worker = NewWorker {
        id: id.into(),
        name: id.into(),
        cert_sha256: format!("cert-{id}"),
        cert_serial: "01".into(),
        cert_not_after_ms: i64::MAX,
    };
    s.join_worker(&format!("digest-{id}"), &worker, "e1")
        .await
        .expect("join")
        .expect("joined")
}

#[tokio::test]
async fn a_worker_reaches_only_its_own_attempts_under_their_fence() {
    let dir = TempDir::new("workers-attack");
    let s = scheduler(&dir).await;
    let a = enrol(&s, "wa", &["gpu"]).await;
    let b = enrol(&s, "wb", &["gpu"]).await;

    // Labels its token never granted are dropped: it cannot widen what it serves.
    let a = s
        .register_worker(&a, &["gpu".into(), "root".into()], 1, "x")
        .await
        .expect("register")
        .expect("admitted");
    assert_eq!(a.serving(), ["gpu"]);
    let b = s
        .register_worker(&b, &["gpu".into()], 1, "x")
        .await
        .expect("register")
        .expect("admitted");

    let by = admin();
    let note = Note {
        by: &by,
        kind: Kind::TaskSubmitted,
        object: "task:t1".into(),
        schedule_id: None,
        detail: serde_json::json!({}),
    };
    let task = NewTask {
        id: "t1".into(),
        idempotency_key: None,
        spec: r#"{"action":{"executable":"true","kind":"command"},"labels":["gpu"]}"#.into(),
        spec_sha256: "sha".into(),
        labels_key: "gpu".into(),
        priority: 5,
        concurrency: None,
        submitted_by: "daemon".into(),
        approval: None,
    };
    s.reads()
        .submit_task(&task, &note, 1)
        .await
        .expect("submit");
    let mut session = super::workers::Session::default();
    let leased = s.next_instructions(&a, &mut session).await.expect("lease");
    let [super::workers::Instruction::Lease(grant)] = leased.as_slice() else {
        panic!("one lease: {leased:?}");
    };
    let (run, fence) = (grant.run.id.clone(), grant.fence);

    // Another worker, or a stale fence: nothing is recorded.
    assert!(!s.attempt_started(&b, &run, fence, 1).await.expect("b"));
    assert!(
        !s.attempt_started(&a, &run, fence - 1, 1)
            .await
            .expect("stale")
    );
    let beat = s
        .heartbeat(&b, &[(run.clone(), fence)])
        .await
        .expect("beat");
    assert_eq!(
        beat.kill,
        std::slice::from_ref(&run),
        "b holds nothing of a's"
    );
    let outcome: studio_runner::Outcome = serde_json::from_value(serde_json::json!({
        "ending": "exited", "exit_code": 0, "signal": null,
        "stdout": {"bytes": 0, "logged": 0, "tail": ""},
        "stderr": {"bytes": 0, "logged": 0, "tail": ""},
        "report": null, "report_error": null
    }))
    .expect("an outcome");
    assert!(
        !s.attempt_finished(&b, &run, fence, (&outcome, false))
            .await
            .expect("b")
    );
    assert!(
        !s.attempt_refused(&b, &run, fence, "not_allowed", "x")
            .await
            .expect("b")
    );

    // Log chunks: none for another's run, none for a path, none under a stale fence.
    let chunk = (LogStream::Stdout, 0);
    assert!(
        !s.attempt_log(&b, &run, fence, chunk, b"forged")
            .await
            .expect("b")
    );
    for path in ["../../run/token", "/etc/passwd", "..", ""] {
        assert!(
            !s.attempt_log(&a, path, fence, chunk, b"x")
                .await
                .expect("path")
        );
    }
    assert!(!dir.path().join("run").join("token").exists());
    assert!(
        !s.attempt_log(&a, &run, fence + 1, chunk, b"x")
            .await
            .expect("fence")
    );
    assert!(!s.run_log(&run, "stdout").exists(), "nothing was written");

    // Its own, under its fence: recorded once.
    assert!(
        s.attempt_log(&a, &run, fence, chunk, b"ok\n")
            .await
            .expect("a")
    );
    assert!(s.attempt_started(&a, &run, fence, 42).await.expect("a"));
    assert!(
        s.attempt_finished(&a, &run, fence, (&outcome, false))
            .await
            .expect("a")
    );
    assert!(
        !s.attempt_finished(&a, &run, fence, (&outcome, false))
            .await
            .expect("again"),
        "an end is recorded once"
    );
    assert_eq!(
        std::fs::read(s.run_log(&run, "stdout")).expect("log"),
        b"ok\n"
    );
    let ended = s.reads().run(&run).await.expect("run").expect("run");
    assert_eq!(ended.status.as_str(), "completed");

    // A job the worker killed after a whole lease without studiod ends `worker_lost`;
    // `lost` said of any other ending changes nothing.
    let cancelled: studio_runner::Outcome = serde_json::from_value(serde_json::json!({
        "ending": "cancelled", "exit_code": null, "signal": 15,
        "stdout": {"bytes": 0, "logged": 0, "tail": ""},
        "stderr": {"bytes": 0, "logged": 0, "tail": ""},
        "report": null, "report_error": null
    }))
    .expect("an outcome");
    for (id, ended, want) in [
        ("t2", &cancelled, ("failed", "worker_lost")),
        ("t3", &outcome, ("completed", "exit_0")),
    ] {
        let task = NewTask {
            id: id.into(),
            ..task.clone()
        };
        s.reads()
            .submit_task(&task, &note, 2)
            .await
            .expect("submit");
        let leased = s.next_instructions(&a, &mut session).await.expect("lease");
        let [super::workers::Instruction::Lease(grant)] = leased.as_slice() else {
            panic!("one lease: {leased:?}");
        };
        assert!(
            s.attempt_finished(&a, &grant.run.id, grant.fence, (ended, true))
                .await
                .expect("a")
        );
        let run = s
            .reads()
            .run(&grant.run.id)
            .await
            .expect("run")
            .expect("run");
        assert_eq!(
            (run.status.as_str(), run.reason.as_deref().unwrap_or("")),
            want,
            "{id}"
        );
    }

    // Revoked, it is admitted no more.
    s.revoke_worker("wa", &by).await.expect("revoke");
    assert!(s.admitted_worker("cert-wa").await.expect("read").is_none());
}
