//! Tasks against a real SQLite file: idempotency, the waiter cap, the claim's label
//! match, concurrency block and fair order, a task following its attempt, the claim's
//! query plan, and a queued task's cancel.

use studio_contract::role::Role;

use super::{
    model::RunStatus,
    store::{NewTask, Note, SchedStore, Submitted},
};
use crate::{
    audit::{Actor, Kind},
    testing::TempDir,
};

async fn store(dir: &TempDir) -> SchedStore {
    let store = crate::testing::open_store(dir).await;
    SchedStore::with_test_key(&store)
}

fn actor() -> Actor {
    Actor {
        principal: "daemon".into(),
        role: Role::Admin,
        origin: None,
        epoch: "e1".into(),
    }
}

fn task(id: &str, labels: &str, priority: i64) -> NewTask {
    NewTask {
        id: id.into(),
        idempotency_key: None,
        spec: r#"{"action":{"executable":"true","kind":"command"}}"#.into(),
        spec_sha256: "sha-a".into(),
        labels_key: labels.into(),
        priority,
        concurrency: None,
        submitted_by: "daemon".into(),
        approval: None,
    }
}

async fn submit(s: &SchedStore, new: &NewTask, at: i64) -> Submitted {
    let by = actor();
    let note = Note {
        by: &by,
        kind: Kind::TaskSubmitted,
        object: format!("task:{}", new.id),
        schedule_id: None,
        detail: serde_json::json!({}),
    };
    s.submit_task(new, &note, at).await.expect("submit")
}

fn labels(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

#[tokio::test]
async fn the_same_key_answers_the_same_task_and_another_spec_conflicts() {
    let dir = TempDir::new("tasks-idem");
    let s = store(&dir).await;
    let mut first = task("t1", "", 5);
    first.idempotency_key = Some("ci-1".into());
    assert!(matches!(
        submit(&s, &first, 1).await,
        Submitted::Created(..)
    ));
    let mut again = task("t2", "", 5);
    again.idempotency_key = Some("ci-1".into());
    match submit(&s, &again, 2).await {
        Submitted::Existing(t) => assert_eq!(t.id, "t1"),
        other => panic!("{other:?}"),
    }
    again.spec_sha256 = "sha-b".into();
    match submit(&s, &again, 3).await {
        Submitted::Conflict(t) => assert_eq!(t.id, "t1"),
        other => panic!("{other:?}"),
    }
    assert!(
        s.task("t2").await.expect("read").is_none(),
        "nothing written"
    );
}

#[tokio::test]
async fn a_concurrency_key_blocks_claims_and_caps_its_waiters() {
    let dir = TempDir::new("tasks-cap");
    let s = store(&dir).await;
    let keyed = |id: &str| NewTask {
        concurrency: Some(("deploy".into(), 1)),
        ..task(id, "", 5)
    };
    assert!(matches!(
        submit(&s, &keyed("t0"), 1).await,
        Submitted::Created(..)
    ));
    let claimed = s
        .claim_task("t0", "builtin", 30_000, 2)
        .await
        .expect("claim");
    let (task0, run0, _) = claimed.expect("claimed");
    assert_eq!((task0.status.as_str(), task0.attempts), ("running", 1));
    assert_eq!(run0.task_id.as_deref(), Some("t0"));
    // Ten may wait behind the one holder (limit 1 × 10); the eleventh is refused.
    for i in 1..=10 {
        let new = keyed(&format!("t{i}"));
        assert!(matches!(
            submit(&s, &new, 10 + i).await,
            Submitted::Created(..)
        ));
    }
    assert!(matches!(
        submit(&s, &keyed("t11"), 30).await,
        Submitted::QueueFull
    ));
    // The holder blocks its key: nothing is claimable until it ends.
    assert!(
        s.claim_candidates(&[])
            .await
            .expect("candidates")
            .is_empty()
    );
    s.transition(
        &run0.id,
        RunStatus::Running,
        RunStatus::Completed,
        Some("exit_0"),
        None,
        40,
    )
    .await
    .expect("finish")
    .expect("finished");
    let done = s.task("t0").await.expect("read").expect("task");
    assert_eq!(
        (done.status.as_str(), done.finished_at_ms),
        ("completed", Some(40))
    );
    let next = s.claim_candidates(&[]).await.expect("candidates");
    assert_eq!(
        next.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["t1"],
        "oldest first"
    );
}

#[tokio::test]
async fn a_claim_serves_only_labels_the_worker_has_and_walks_an_index() {
    let dir = TempDir::new("tasks-labels");
    let s = store(&dir).await;
    for (id, key, priority) in [
        ("a", "gpu,linux", 5),
        ("b", "", 1),
        ("c", "linux", 9),
        ("d", "arm", 5),
    ] {
        assert!(matches!(
            submit(&s, &task(id, key, priority), 1).await,
            Submitted::Created(..)
        ));
    }
    let ids = |c: Vec<super::store::Candidate>| {
        let mut ids: Vec<String> = c.into_iter().map(|c| c.id).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(s.claim_candidates(&[]).await.expect("none")), ["b"]);
    assert_eq!(
        ids(s
            .claim_candidates(&labels(&["linux"]))
            .await
            .expect("linux")),
        ["b", "c"]
    );
    assert_eq!(
        ids(s
            .claim_candidates(&labels(&["linux", "gpu"]))
            .await
            .expect("both")),
        ["a", "b", "c"]
    );
    // Every read of a claim is a seek of `tasks_queued`: none scans the queue (SQLite's
    // plan; PostgreSQL's planner chooses by its statistics).
    if !s.plans_are_sqlites() {
        return;
    }
    let plan = s.claim_plan().await.expect("plan");
    assert!(
        plan.contains("INDEX tasks_queued (labels_key>?)")
            && plan.contains("INDEX tasks_queued (labels_key=? AND priority=?)"),
        "{plan}"
    );
    assert!(
        !plan.contains("SCAN tasks") && !plan.contains("tasks_by_status"),
        "{plan}"
    );
}

#[tokio::test]
async fn a_queued_task_is_cancelled_and_a_claimed_one_is_not_claimed_twice() {
    let dir = TempDir::new("tasks-cancel");
    let s = store(&dir).await;
    for id in ["q", "r"] {
        assert!(matches!(
            submit(&s, &task(id, "", 5), 1).await,
            Submitted::Created(..)
        ));
    }
    let by = actor();
    let note = Note {
        by: &by,
        kind: Kind::TaskCancelled,
        object: "task:q".into(),
        schedule_id: None,
        detail: serde_json::json!({}),
    };
    let (cancelled, _) = s
        .cancel_queued_task("q", &note, 2)
        .await
        .expect("cancel")
        .expect("was queued");
    assert_eq!(cancelled.status, "cancelled");
    assert!(
        s.cancel_queued_task("q", &note, 3)
            .await
            .expect("again")
            .is_none()
    );
    assert!(
        s.claim_task("r", "builtin", 30_000, 4)
            .await
            .expect("first")
            .is_some()
    );
    assert!(
        s.claim_task("r", "builtin", 30_000, 5)
            .await
            .expect("second")
            .is_none()
    );
    assert!(
        s.claim_task("q", "builtin", 30_000, 6)
            .await
            .expect("cancelled")
            .is_none()
    );
}

/// Runs the claimed attempt of `id` to `to` with `reason` and `exit`.
async fn end_attempt(s: &SchedStore, id: &str, to: RunStatus, reason: &str, exit: i64, at: i64) {
    let (_, run, _) = s
        .claim_task(id, "builtin", 30_000, at)
        .await
        .expect("claim")
        .expect("claimed");
    let finish = super::store::Finish {
        exit_code: Some(exit),
        ..Default::default()
    };
    s.transition(
        &run.id,
        RunStatus::Running,
        to,
        Some(reason),
        Some(&finish),
        at + 1,
    )
    .await
    .expect("end")
    .expect("ended");
}

#[tokio::test]
async fn a_retry_policy_waits_a_jittered_backoff_then_gives_up_after_its_attempts() {
    let dir = TempDir::new("tasks-retry");
    let s = store(&dir).await;
    let new = NewTask {
        spec: r#"{"action":{"executable":"true","kind":"command"},"retry":{"max_attempts":2,
            "backoff":{"initial":"1s","max":"1s","factor":2},"on":["failed"],"exit_codes":[3]}}"#
            .into(),
        ..task("t", "", 5)
    };
    assert!(matches!(submit(&s, &new, 1).await, Submitted::Created(..)));
    end_attempt(&s, "t", RunStatus::Failed, "exit_3", 3, 10).await;
    let waiting = s.task("t").await.expect("read").expect("task");
    assert_eq!(waiting.status, "retry_wait");
    let due = waiting.next_attempt_at_ms.expect("a next attempt");
    assert!(
        (11..=1_011).contains(&due),
        "within the first backoff: {due}"
    );
    assert_eq!(s.next_retry().await.expect("next"), Some(due));
    assert!(
        s.release_retries(due - 1).await.expect("early").is_empty(),
        "not yet"
    );
    assert_eq!(s.release_retries(due).await.expect("due").len(), 1);
    // The second attempt fails too: that was the last.
    end_attempt(&s, "t", RunStatus::Failed, "exit_3", 3, 2_000).await;
    let done = s.task("t").await.expect("read").expect("task");
    assert_eq!((done.status.as_str(), done.attempts), ("failed", 2));
    assert_eq!(s.next_retry().await.expect("next"), None);

    // By hand, an ended task goes again; a queued one is not "retried".
    let by = actor();
    let note = Note {
        by: &by,
        kind: Kind::TaskRetried,
        object: "task:t".into(),
        schedule_id: None,
        detail: serde_json::json!({}),
    };
    let (again, _) = s
        .retry_task("t", &note, 3_000)
        .await
        .expect("retry")
        .expect("ended");
    assert_eq!(
        (again.status.as_str(), again.finished_at_ms),
        ("queued", None)
    );
    assert!(
        s.retry_task("t", &note, 3_001)
            .await
            .expect("again")
            .is_none()
    );
}

#[tokio::test]
async fn only_the_outcomes_and_exit_codes_a_policy_names_are_retried() {
    let dir = TempDir::new("tasks-retry-on");
    let s = store(&dir).await;
    let spec = |on: &str| {
        format!(
            r#"{{"action":{{"executable":"true","kind":"command"}},"retry":{{"max_attempts":5,
            "on":{on},"exit_codes":[75]}}}}"#
        )
    };
    let cases = [
        (
            "a",
            spec(r#"["failed"]"#),
            RunStatus::Failed,
            "exit_1",
            1,
            "failed",
        ),
        (
            "b",
            spec(r#"["failed"]"#),
            RunStatus::Failed,
            "exit_75",
            75,
            "retry_wait",
        ),
        (
            "c",
            spec(r#"["worker_lost"]"#),
            RunStatus::Failed,
            "shim_lost",
            -1,
            "retry_wait",
        ),
        (
            "d",
            spec(r#"["failed"]"#),
            RunStatus::TimedOut,
            "deadline",
            -1,
            "timed_out",
        ),
        (
            "e",
            spec(r#"["timed_out"]"#),
            RunStatus::Cancelled,
            "cancelled_by_user",
            -1,
            "cancelled",
        ),
    ];
    for (id, spec, to, reason, exit, want) in cases {
        let new = NewTask {
            spec,
            ..task(id, "", 5)
        };
        assert!(matches!(submit(&s, &new, 1).await, Submitted::Created(..)));
        end_attempt(&s, id, to, reason, exit, 10).await;
        let t = s.task(id).await.expect("read").expect("task");
        assert_eq!(t.status, want, "{id}: {reason}");
    }
}

/// Not a timed assertion: prints what a claim costs with 10 and with 100,000 tasks
/// queued across label sets and priorities (run with `--release -- --ignored
/// --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn measure_claim_cost() {
    for queued in [10_i64, 100_000] {
        let dir = TempDir::new("tasks-claim-speed");
        let s = store(&dir).await;
        let keys = ["", "linux", "gpu,linux", "arm", "mac"];
        for i in 0..queued {
            let key = keys[usize::try_from(i).unwrap_or(0) % keys.len()];
            let new = task(&format!("t{i:06}"), key, i % 10);
            assert!(matches!(submit(&s, &new, i).await, Submitted::Created(..)));
        }
        let worker = labels(&["linux", "gpu"]);
        let mut times = Vec::new();
        for i in 0..200 {
            let t = std::time::Instant::now();
            let candidates = s.claim_candidates(&worker).await.expect("candidates");
            let first = candidates.first().expect("a candidate").id.clone();
            s.claim_task(&first, "builtin", 30_000, 1_000_000 + i)
                .await
                .expect("claim")
                .expect("claimed");
            times.push(t.elapsed().as_micros());
            // Keep the queue as long as it was.
            let again = task(&format!("r{i:06}"), "linux", i % 10);
            assert!(matches!(
                submit(&s, &again, 2_000_000 + i).await,
                Submitted::Created(..)
            ));
        }
        times.sort_unstable();
        println!(
            "claim with {queued} queued: p50 {} µs, p99 {} µs",
            times[times.len() / 2],
            times[times.len() * 99 / 100]
        );
    }
}

/// A remote worker's lease: its task `leased` until the start is reported, renewed only
/// under its own fence, a report under another fence refused, an expired lease ended
/// `worker_lost` by the reaper's write (and not after a renewal), and the reaper's
/// reads walk `runs_leases`.
#[tokio::test]
async fn a_remote_lease_is_fenced_renewed_and_expires_as_worker_lost() {
    use super::store::{Ended, Finish, NewWorker};
    let dir = TempDir::new("tasks-lease");
    let s = store(&dir).await;
    let worker = NewWorker {
        id: "w1".into(),
        name: "w1".into(),
        cert_sha256: "c1".into(),
        cert_serial: "01".into(),
        cert_not_after_ms: i64::MAX,
    };
    let by = actor();
    let note = Note {
        by: &by,
        kind: Kind::WorkerTokenCreated,
        object: "worker_token".into(),
        schedule_id: None,
        detail: serde_json::json!({}),
    };
    s.create_join_token("d1", "gpu", 10_000, &note, 1)
        .await
        .expect("token");
    assert!(
        s.join_worker("d1", &worker, "e1", 2)
            .await
            .expect("join")
            .is_some()
    );
    let again = NewWorker {
        id: "w2".into(),
        cert_sha256: "c2".into(),
        ..worker.clone()
    };
    assert!(
        s.join_worker("d1", &again, "e1", 3)
            .await
            .expect("reuse")
            .is_none(),
        "a token is used once"
    );
    submit(&s, &task("t1", "gpu", 5), 10).await;
    let (claimed, run, _) = s
        .claim_task("t1", "w1", 1_000, 100)
        .await
        .expect("claim")
        .expect("claimed");
    assert_eq!(claimed.status.as_str(), "leased");
    let fence = s.fence_of(&run.id).await.expect("fence").expect("a fence");
    assert!(
        s.remote_started(&run.id, ("w1", fence + 1), 42, (2_000, 60_000), 200)
            .await
            .expect("start")
            .is_none(),
        "another fence is refused"
    );
    assert!(
        s.remote_started(&run.id, ("w1", fence), 42, (2_000, 60_000), 200)
            .await
            .expect("start")
            .is_some()
    );
    assert_eq!(s.task("t1").await.expect("t").expect("t").status, "running");
    let renewed = s
        .renew_leases(
            "w1",
            &[(run.id.clone(), fence), ("r-none".into(), 1)],
            5_000,
            300,
        )
        .await
        .expect("renew");
    assert_eq!(renewed, std::slice::from_ref(&run.id));
    assert!(s.expired_leases(4_000).await.expect("read").is_empty());
    assert!(
        s.expire_lease(&run.id, 4_000)
            .await
            .expect("expire")
            .is_none()
    );
    assert_eq!(s.next_lease_expiry().await.expect("next"), Some(5_000));
    let (ended, _) = s
        .expire_lease(&run.id, 5_001)
        .await
        .expect("expire")
        .expect("expired");
    assert_eq!(
        (ended.status(), ended.reason.as_deref()),
        (Some(RunStatus::Failed), Some("worker_lost"))
    );
    let finish = Finish::default();
    let late = Ended {
        status: RunStatus::Completed,
        reason: "exit_0",
        finish: &finish,
    };
    assert!(
        s.remote_finished(&run.id, ("w1", fence), late, 6_000)
            .await
            .expect("late")
            .is_none(),
        "a late report changes nothing"
    );
    assert_eq!(s.task("t1").await.expect("t").expect("t").status, "failed");
}

/// A task that needs a grant waits with its first attempt `awaiting_approval`, is not a
/// candidate; granted, it is queued and the claim takes that same run over, consuming
/// the grant; denied, the task ends `denied`.
#[tokio::test]
async fn a_task_waits_for_its_grant_and_the_claim_takes_its_run_over() {
    use super::{
        approval::NewApproval,
        store::{Decided, Verdict},
    };
    let dir = TempDir::new("tasks-approval");
    let s = store(&dir).await;
    let request = |id: &str| NewApproval {
        id: id.into(),
        action_json: "{}".into(),
        action_sha256: "sha".into(),
        requested_by: Some("daemon".into()),
        expires_at_ms: 1_000_000,
        distinct_from_requester: false,
    };
    let mut gated = task("t1", "", 5);
    gated.approval = Some(request("a1"));
    let Submitted::Created(t, _) = submit(&s, &gated, 10).await else {
        panic!("created");
    };
    assert_eq!(t.status, "awaiting_approval");
    let waiting = t.last_run_id.clone().expect("its first attempt");
    assert!(s.claim_candidates(&[]).await.expect("c").is_empty());
    let person = Actor {
        principal: "p1".into(),
        ..actor()
    };
    let granted = s
        .decide("a1", Verdict::Grant { hold: None }, &person, None, 20)
        .await
        .expect("decide");
    assert!(matches!(granted, Decided::Done { .. }), "{granted:?}");
    assert_eq!(s.task("t1").await.expect("t").expect("t").status, "queued");
    let (claimed, run, _) = s
        .claim_task("t1", "builtin", 1_000, 30)
        .await
        .expect("claim")
        .expect("claimed");
    assert_eq!((run.id.as_str(), claimed.attempts), (waiting.as_str(), 1));
    assert_eq!(run.status(), Some(RunStatus::Running));
    let a = s.approval("a1").await.expect("a").expect("a");
    assert_eq!(a.status, "consumed");

    let mut denied = task("t2", "", 5);
    denied.approval = Some(request("a2"));
    submit(&s, &denied, 40).await;
    s.decide("a2", Verdict::Deny, &person, Some("no"), 50)
        .await
        .expect("deny");
    assert_eq!(s.task("t2").await.expect("t").expect("t").status, "denied");
}

/// On PostgreSQL several studiod claim at once: a task another claim has locked is
/// skipped at once (the claimer looks at its next candidate), not waited for; once that
/// claim is gone the task is claimable again. (SQLite's one writer orders claims.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_another_claim_holds_is_skipped_not_waited_for() {
    if !crate::testing::on_postgres() {
        return;
    }
    let dir = TempDir::new("skip-locked");
    let first = crate::testing::open_store(&dir).await;
    let url = first.url().cloned().expect("a PostgreSQL store");
    let second = crate::store::Store::open_at(studio_store::Location::Postgres(&url))
        .await
        .expect("a second studiod's store");
    let s = SchedStore::with_test_key(&first);
    submit(&s, &task("t1", "", 5), 1).await;
    // Another studiod's claim holds the row.
    let mut holder = second.writer().begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM tasks WHERE id = 't1' FOR UPDATE")
        .execute(&mut *holder)
        .await
        .expect("lock");
    let claim = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        s.claim_task("t1", "builtin", 30_000, 2),
    )
    .await
    .expect("the claim did not wait for the lock")
    .expect("claim");
    assert!(claim.is_none(), "a locked task is skipped");
    holder.rollback().await.expect("rollback");
    let (task, run, _) = s
        .claim_task("t1", "builtin", 30_000, 3)
        .await
        .expect("claim")
        .expect("claimed once the lock is gone");
    assert_eq!(task.id, "t1");
    assert_eq!(run.task_id.as_deref(), Some("t1"));
}
