//! The scheduler's invariants against a real SQLite file.

use std::sync::Arc;

use super::{
    health::health,
    model::{RunKind, RunRow, RunStatus, ScheduleRow},
    store::{Claim, Cursor, Finish, NewRun, RunFilter, SchedStore},
};
use crate::{store::Store, testing::TempDir};

async fn store(dir: &TempDir) -> SchedStore {
    let store = Store::open(&dir.path().join("state.db"))
        .await
        .expect("open");
    SchedStore::new(&store)
}

fn schedule(id: &str, next: Option<i64>, max_runs: Option<i64>) -> ScheduleRow {
    ScheduleRow {
        id: id.into(),
        name: format!("test/{id}"),
        spec: r#"{"trigger":{"every":"1s"},"action":{"kind":"command","executable":"true"}}"#
            .into(),
        enabled: true,
        trigger_kind: "every".into(),
        timezone: None,
        timezone_source: None,
        anchor_ms: 0,
        next_fire_at_ms: next,
        last_fired_at_ms: None,
        max_runs,
        runs_counted: 0,
        created_at_ms: 0,
        updated_at_ms: 0,
        revision: 1,
        managed_by: None,
        owner_key: None,
        source: None,
    }
}

fn run(schedule_id: &str, key: Option<String>, kind: RunKind) -> NewRun {
    NewRun {
        id: uuid::Uuid::now_v7().to_string(),
        schedule_id: Some(schedule_id.into()),
        occurrence_key: key,
        kind,
        status: RunStatus::Running,
        reason: None,
        action: "{}".into(),
        scheduled_at_ms: None,
        counted: true,
        chain_parent_id: None,
        chain_depth: 0,
        replaces_run_id: None,
        follow_ups: None,
    }
}

#[tokio::test]
async fn a_cursor_is_claimed_once() {
    let dir = TempDir::new("claim");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", Some(1_000), None))
        .await
        .expect("insert");
    let cursor = Cursor::Advance {
        expected: 1_000,
        next: Some(2_000),
    };
    let first = s
        .claim(
            &run("a", Some("a:1000".into()), RunKind::Scheduled),
            cursor,
            1_000,
        )
        .await
        .expect("claim");
    let second = s
        .claim(
            &run("a", Some("a:1000".into()), RunKind::Scheduled),
            cursor,
            1_000,
        )
        .await
        .expect("claim");
    assert!(matches!(first, Claim::Claimed(..)));
    assert!(
        matches!(second, Claim::Lost),
        "the cursor moved: the second claim writes nothing"
    );
    let row = s.schedule("a").await.expect("read").expect("row");
    assert_eq!(
        (row.next_fire_at_ms, row.last_fired_at_ms, row.runs_counted),
        (Some(2_000), Some(1_000), 1)
    );
}

#[tokio::test]
async fn an_occurrence_cannot_be_written_twice() {
    let dir = TempDir::new("occ");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", Some(1_000), None))
        .await
        .expect("insert");
    let key = Some("a:1000".to_owned());
    assert!(matches!(
        s.claim(&run("a", key.clone(), RunKind::Manual), Cursor::Keep, 1)
            .await
            .expect("claim"),
        Claim::Claimed(..)
    ));
    assert!(matches!(
        s.claim(&run("a", key, RunKind::Manual), Cursor::Keep, 1)
            .await
            .expect("claim"),
        Claim::Lost
    ));
    let runs = s
        .list_runs(&RunFilter {
            limit: 10,
            ..RunFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(runs.len(), 1);
}

#[tokio::test]
async fn max_runs_holds_under_concurrent_claims() {
    let dir = TempDir::new("max");
    let s = Arc::new(store(&dir).await);
    s.insert_schedule(&schedule("a", Some(1_000), Some(3)))
        .await
        .expect("insert");
    let claims: Vec<_> = (0..50)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                s.claim(&run("a", None, RunKind::Manual), Cursor::Keep, 1)
                    .await
            })
        })
        .collect();
    let mut claimed = 0;
    let mut refused = 0;
    for c in claims {
        match c.await.expect("task").expect("claim") {
            Claim::Claimed(..) => claimed += 1,
            Claim::MaxRunsReached => refused += 1,
            Claim::Lost => panic!("a manual claim is never lost"),
        }
    }
    assert_eq!((claimed, refused), (3, 47));
    // A scheduled fire past the limit disarms the schedule.
    let cursor = Cursor::Advance {
        expected: 1_000,
        next: Some(2_000),
    };
    let fire = s
        .claim(
            &run("a", Some("a:1000".into()), RunKind::Scheduled),
            cursor,
            1_000,
        )
        .await
        .expect("claim");
    assert!(matches!(fire, Claim::MaxRunsReached));
    assert_eq!(
        s.schedule("a")
            .await
            .expect("read")
            .expect("row")
            .next_fire_at_ms,
        None
    );
    // Uncounted runs (chain steps, skips) are not held back by max_runs.
    let mut chain = run("a", None, RunKind::Chain);
    chain.counted = false;
    assert!(matches!(
        s.claim(&chain, Cursor::Keep, 1).await.expect("claim"),
        Claim::Claimed(..)
    ));
}

#[tokio::test]
async fn a_never_dispatched_run_is_tombstoned_and_replaced_once() {
    let dir = TempDir::new("tomb");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", Some(1_000), Some(1)))
        .await
        .expect("insert");
    let cursor = Cursor::Advance {
        expected: 1_000,
        next: Some(2_000),
    };
    let Claim::Claimed(orphan, _, _) = s
        .claim(
            &run("a", Some("a:1000".into()), RunKind::Scheduled),
            cursor,
            1_000,
        )
        .await
        .expect("claim")
    else {
        panic!("claimed");
    };
    let (replacement, events) = s
        .tombstone_and_replace(&orphan, "r2", 5)
        .await
        .expect("replace")
        .expect("replaced");
    assert_eq!(events.len(), 2);
    assert_eq!(
        replacement.occurrence_key.as_deref(),
        Some("a:1000"),
        "the replacement takes the key over"
    );
    assert_eq!(
        replacement.replaces_run_id.as_deref(),
        Some(orphan.id.as_str())
    );
    assert_eq!(replacement.status, "queued");
    let tomb = s.run(&orphan.id).await.expect("read").expect("row");
    assert_eq!(
        (
            tomb.status.as_str(),
            tomb.reason.as_deref(),
            tomb.occurrence_key
        ),
        ("failed", Some("never_dispatched"), None)
    );
    assert_eq!(
        s.schedule("a")
            .await
            .expect("read")
            .expect("row")
            .runs_counted,
        1,
        "not counted twice"
    );
    assert!(
        s.tombstone_and_replace(&orphan, "r3", 6)
            .await
            .expect("again")
            .is_none(),
        "only once"
    );
    // A dispatched run is never replaced.
    let mut chain = run("a", None, RunKind::Chain);
    chain.counted = false;
    let Claim::Claimed(other, _, _) = s.claim(&chain, Cursor::Keep, 1).await.expect("claim") else {
        panic!("claimed");
    };
    assert!(s.mark_dispatched(&other.id, 42, 7).await.expect("stamp"));
    assert!(
        !s.mark_dispatched(&other.id, 43, 8).await.expect("stamp"),
        "stamped once"
    );
    let other = s.run(&other.id).await.expect("read").expect("row");
    assert!(
        s.tombstone_and_replace(&other, "r4", 9)
            .await
            .expect("replace")
            .is_none()
    );
}

#[tokio::test]
async fn status_changes_are_compare_and_set_with_history() {
    let dir = TempDir::new("cas");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", None, None))
        .await
        .expect("insert");
    let Claim::Claimed(r, _, _) = s
        .claim(&run("a", None, RunKind::Manual), Cursor::Keep, 1)
        .await
        .expect("claim")
    else {
        panic!("claimed");
    };
    let finish = Finish {
        exit_code: Some(0),
        stdout_tail: Some("hi\n".into()),
        cost_usd: Some(0.5),
        ..Finish::default()
    };
    let done = s
        .transition(
            &r.id,
            RunStatus::Running,
            RunStatus::Completed,
            Some("exit_0"),
            Some(&finish),
            10,
        )
        .await
        .expect("finish");
    assert!(done.is_some());
    let again = s
        .transition(
            &r.id,
            RunStatus::Running,
            RunStatus::Failed,
            Some("late"),
            None,
            11,
        )
        .await
        .expect("finish");
    assert!(again.is_none(), "a finished run cannot be finished again");
    let t = s.transitions(&r.id).await.expect("history");
    let steps: Vec<(Option<&str>, &str)> = t
        .iter()
        .map(|t| (t.from_status.as_deref(), t.to_status.as_str()))
        .collect();
    assert_eq!(steps, [(None, "running"), (Some("running"), "completed")]);
    assert_eq!(s.spend("a").await.expect("spend"), 0.5);
    let events = s.events_after(0, 100).await.expect("events");
    assert_eq!(
        events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        ["schedule", "run", "run"]
    );
}

#[tokio::test]
async fn runs_page_newest_first_with_a_cursor() {
    let dir = TempDir::new("page");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", None, None))
        .await
        .expect("insert");
    for t in 0..7 {
        s.claim(&run("a", None, RunKind::Manual), Cursor::Keep, 100 + t)
            .await
            .expect("claim");
    }
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = s
            .list_runs(&RunFilter {
                limit: 3,
                before: before.clone(),
                ..RunFilter::default()
            })
            .await
            .expect("list");
        if page.is_empty() {
            break;
        }
        before = page
            .last()
            .map(|r: &RunRow| (r.created_at_ms, r.id.clone()));
        seen.extend(page.into_iter().map(|r| r.created_at_ms));
    }
    assert_eq!(seen, [106, 105, 104, 103, 102, 101, 100]);
}

#[test]
fn health_follows_the_evidence() {
    let now = 10_000_000;
    let mut row = schedule("a", Some(now + 1_000), None);
    let armed = studio_schedule::Armed::Every { period_ms: 60_000 };
    let finished = |status: &str, at: i64| RunRow {
        id: "r".into(),
        schedule_id: Some("a".into()),
        occurrence_key: None,
        kind: "scheduled".into(),
        status: status.into(),
        reason: None,
        action: "{}".into(),
        scheduled_at_ms: None,
        created_at_ms: at,
        dispatched_at_ms: Some(at),
        finished_at_ms: Some(at),
        pid: None,
        exit_code: None,
        signal: None,
        stdout_tail: None,
        stderr_tail: None,
        stdout_bytes: None,
        stderr_bytes: None,
        cost_usd: None,
        tokens: None,
        counted: true,
        chain_parent_id: None,
        chain_depth: 0,
        replaces_run_id: None,
        follow_ups: None,
    };
    assert_eq!(health(&row, Some(&armed), false, None, now), "never-fired");
    assert_eq!(health(&row, Some(&armed), true, None, now), "no-evidence");
    assert_eq!(
        health(
            &row,
            Some(&armed),
            true,
            Some(&finished("completed", now - 1_000)),
            now
        ),
        "healthy"
    );
    assert_eq!(
        health(
            &row,
            Some(&armed),
            true,
            Some(&finished("failed", now - 1_000)),
            now
        ),
        "failing"
    );
    // max(3 × 60 s, 60 s + 300 s) = 360 s without evidence is overdue.
    assert_eq!(
        health(
            &row,
            Some(&armed),
            true,
            Some(&finished("completed", now - 361_000)),
            now
        ),
        "overdue"
    );
    assert_eq!(
        health(
            &row,
            Some(&armed),
            true,
            Some(&finished("completed", now - 359_000)),
            now
        ),
        "healthy"
    );
    row.enabled = false;
    assert_eq!(health(&row, Some(&armed), true, None, now), "disabled");
}

/// Not a timed assertion: prints what one fire's database work costs (run with
/// `--release -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn measure_fire_database_work() {
    let dir = TempDir::new("speed");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", Some(0), None))
        .await
        .expect("insert");
    let n = 2_000;
    let (mut read, mut claim, mut stamp, mut finish) = (0u128, 0u128, 0u128, 0u128);
    for i in 0..n {
        let t = std::time::Instant::now();
        s.schedule("a").await.expect("read");
        read += t.elapsed().as_micros();
        let t = std::time::Instant::now();
        let cursor = Cursor::Advance {
            expected: i,
            next: Some(i + 1),
        };
        let Claim::Claimed(r, _, _) = s
            .claim(
                &run("a", Some(format!("a:{i}")), RunKind::Scheduled),
                cursor,
                i,
            )
            .await
            .expect("claim")
        else {
            panic!("claimed");
        };
        claim += t.elapsed().as_micros();
        let t = std::time::Instant::now();
        s.mark_dispatched(&r.id, 1, i).await.expect("stamp");
        stamp += t.elapsed().as_micros();
        let t = std::time::Instant::now();
        s.transition(
            &r.id,
            RunStatus::Running,
            RunStatus::Completed,
            Some("exit_0"),
            Some(&Finish::default()),
            i,
        )
        .await
        .expect("finish");
        finish += t.elapsed().as_micros();
    }
    let per = |x: u128| x as f64 / f64::from(n as u32);
    println!(
        "per fire µs: read {:.0}, claim {:.0}, stamp {:.0}, finish {:.0}",
        per(read),
        per(claim),
        per(stamp),
        per(finish)
    );
}
