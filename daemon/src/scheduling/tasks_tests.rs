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
    store::Store,
    testing::TempDir,
};

async fn store(dir: &TempDir) -> SchedStore {
    let store = Store::open(&dir.path().join("state.db"))
        .await
        .expect("open");
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
    let plan = s.claim_plan().await.expect("plan");
    assert!(plan.contains("tasks_queued"), "an index walk: {plan}");
    assert!(!plan.contains("SCAN tasks"), "no table scan: {plan}");
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
