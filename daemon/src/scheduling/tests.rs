//! The scheduler's invariants against a real SQLite file.

use std::sync::Arc;

use super::{
    engine::EngineError,
    health::health,
    model::{Outcome, RunKind, RunRow, RunStatus, ScheduleRow, ScheduleStats},
    store::{Claim, Cursor, Finish, NewRun, RunFilter, SchedStore, ScheduleFilter},
};
use crate::{store::Store, testing::TempDir};

async fn store(dir: &TempDir) -> SchedStore {
    let store = crate::testing::open_store(dir).await;
    SchedStore::with_test_key(&store)
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
        cadence_ms: Some(1_000),
        max_runs,
        runs_counted: 0,
        created_at_ms: 0,
        updated_at_ms: 0,
        revision: 1,
        managed_by: None,
        owner_key: None,
        source: None,
        stats: ScheduleStats::default(),
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
        attempt: 1,
        approval: None,
        approval_id: None,
        task: None,
    }
}

#[tokio::test]
async fn a_cursor_is_claimed_once() {
    let dir = TempDir::new("claim");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", Some(1_000), None), None)
        .await
        .expect("insert");
    let cursor = Cursor::Advance {
        expected: 1_000,
        next: Some(2_000),
        term: 0,
    };
    let first = s
        .claim(
            &run("a", Some("a:1000".into()), RunKind::Scheduled),
            cursor,
            1_000,
            None,
        )
        .await
        .expect("claim");
    let second = s
        .claim(
            &run("a", Some("a:1000".into()), RunKind::Scheduled),
            cursor,
            1_000,
            None,
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

/// A leader that paused while another took the next term fires nothing, however the
/// cursor stands: the term is checked in the claim's own statement.
#[tokio::test]
async fn a_claim_under_a_passed_term_writes_nothing() {
    let dir = TempDir::new("term");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", Some(1_000), None), None)
        .await
        .expect("insert");
    let old = s.take_term(1).await.expect("a term");
    let new = s.take_term(2).await.expect("the next term");
    assert_eq!(new, old + 1, "each leader takes the next term");
    let fire = |term| Cursor::Advance {
        expected: 1_000,
        next: Some(2_000),
        term,
    };
    let stale = s
        .claim(
            &run("a", Some("a:1000".into()), RunKind::Scheduled),
            fire(old),
            1_000,
            None,
        )
        .await
        .expect("claim");
    assert!(matches!(stale, Claim::Lost), "a passed term fires nothing");
    let row = s.schedule("a").await.expect("read").expect("row");
    assert_eq!((row.next_fire_at_ms, row.runs_counted), (Some(1_000), 0));
    assert!(s.active_runs().await.expect("read").is_empty(), "no run");
    let current = s
        .claim(
            &run("a", Some("a:1000".into()), RunKind::Scheduled),
            fire(new),
            1_000,
            None,
        )
        .await
        .expect("claim");
    assert!(
        matches!(current, Claim::Claimed(..)),
        "the current term fires"
    );
}

#[tokio::test]
async fn an_occurrence_cannot_be_written_twice() {
    let dir = TempDir::new("occ");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", Some(1_000), None), None)
        .await
        .expect("insert");
    let key = Some("a:1000".to_owned());
    assert!(matches!(
        s.claim(
            &run("a", key.clone(), RunKind::Manual),
            Cursor::Keep,
            1,
            None
        )
        .await
        .expect("claim"),
        Claim::Claimed(..)
    ));
    assert!(matches!(
        s.claim(&run("a", key, RunKind::Manual), Cursor::Keep, 1, None)
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
    s.insert_schedule(&schedule("a", Some(1_000), Some(3)), None)
        .await
        .expect("insert");
    let claims: Vec<_> = (0..50)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                s.claim(&run("a", None, RunKind::Manual), Cursor::Keep, 1, None)
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
        term: 0,
    };
    let fire = s
        .claim(
            &run("a", Some("a:1000".into()), RunKind::Scheduled),
            cursor,
            1_000,
            None,
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
        s.claim(&chain, Cursor::Keep, 1, None).await.expect("claim"),
        Claim::Claimed(..)
    ));
}

#[tokio::test]
async fn a_never_dispatched_run_is_tombstoned_and_replaced_once() {
    let dir = TempDir::new("tomb");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", Some(1_000), Some(1)), None)
        .await
        .expect("insert");
    let cursor = Cursor::Advance {
        expected: 1_000,
        next: Some(2_000),
        term: 0,
    };
    let Claim::Claimed(orphan, _, _) = s
        .claim(
            &run("a", Some("a:1000".into()), RunKind::Scheduled),
            cursor,
            1_000,
            None,
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
    let Claim::Claimed(other, _, _) = s.claim(&chain, Cursor::Keep, 1, None).await.expect("claim")
    else {
        panic!("claimed");
    };
    assert!(
        s.mark_dispatched(&other.id, 42, None, Some("/bin/true"), Some(5_000), 7)
            .await
            .expect("stamp")
    );
    assert!(
        !s.mark_dispatched(&other.id, 43, None, Some("/bin/true"), None, 8)
            .await
            .expect("stamp"),
        "stamped once"
    );
    let other = s.run(&other.id).await.expect("read").expect("row");
    assert_eq!(
        other.deadline_at_ms,
        Some(5_007),
        "the deadline counts from the dispatch"
    );
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
    s.insert_schedule(&schedule("a", None, None), None)
        .await
        .expect("insert");
    let Claim::Claimed(r, _, _) = s
        .claim(&run("a", None, RunKind::Manual), Cursor::Keep, 1, None)
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
    let one = s.run(&r.id).await.expect("read").expect("run");
    assert_eq!(one.stdout_tail.as_deref(), Some("hi\n"));
    let listed = s
        .list_runs(&RunFilter {
            limit: 10,
            ..RunFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(
        listed[0].stdout_tail, None,
        "lists leave the tails in the table"
    );
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
    s.insert_schedule(&schedule("a", None, None), None)
        .await
        .expect("insert");
    for t in 0..7 {
        s.claim(
            &run("a", None, RunKind::Manual),
            Cursor::Keep,
            100 + t,
            None,
        )
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
    row.cadence_ms = Some(60_000);
    let with = |row: &ScheduleRow, has_runs: bool, outcome: Option<(&str, i64)>| {
        let mut row = row.clone();
        row.stats = ScheduleStats {
            has_runs,
            last_outcome: outcome.map(|(status, at_ms)| Outcome {
                status: status.into(),
                at_ms,
            }),
            spend_usd: 0.0,
            recent: Vec::new(),
        };
        health(&row, now)
    };
    assert_eq!(with(&row, false, None), "never-fired");
    assert_eq!(with(&row, true, None), "no-evidence");
    assert_eq!(
        with(&row, true, Some(("completed", now - 1_000))),
        "healthy"
    );
    assert_eq!(with(&row, true, Some(("failed", now - 1_000))), "failing");
    // max(3 × 60 s, 60 s + 300 s) = 360 s without evidence is overdue.
    assert_eq!(
        with(&row, true, Some(("completed", now - 361_000))),
        "overdue"
    );
    assert_eq!(
        with(&row, true, Some(("completed", now - 359_000))),
        "healthy"
    );
    // Overdue outranks failing; nothing armed is never overdue.
    assert_eq!(with(&row, true, Some(("failed", now - 361_000))), "overdue");
    row.next_fire_at_ms = None;
    assert_eq!(with(&row, true, Some(("failed", now - 361_000))), "failing");
    row.enabled = false;
    assert_eq!(with(&row, true, None), "disabled");
}

/// The rollups the database keeps (migration 0004) follow every run write: the latest
/// top-level outcome, any-run, spend, and the hourly counts by status.
#[tokio::test]
async fn rollups_follow_the_runs() {
    let dir = TempDir::new("rollups");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", None, None), None)
        .await
        .expect("insert");
    let stats =
        |s: SchedStore| async move { s.schedule("a").await.expect("read").expect("row").stats };
    assert_eq!(stats(s.clone()).await, ScheduleStats::default());

    let hour = 3_600_000;
    let claim = |kind: RunKind, at: i64| {
        let s = s.clone();
        async move {
            match s.claim(&run("a", None, kind), Cursor::Keep, at, None).await {
                Ok(Claim::Claimed(row, ..)) => *row,
                other => panic!("claim: {other:?}"),
            }
        }
    };
    let finish = |id: String, to: RunStatus, cost: Option<f64>, at: i64| {
        let s = s.clone();
        async move {
            let f = Finish {
                cost_usd: cost,
                ..Finish::default()
            };
            s.transition(&id, RunStatus::Running, to, None, Some(&f), at)
                .await
                .expect("finish")
                .expect("finished");
        }
    };
    let first = claim(RunKind::Manual, 10 * hour + 5).await;
    let st = stats(s.clone()).await;
    assert!(st.has_runs);
    assert_eq!(st.last_outcome, None, "a running run is no outcome yet");

    finish(first.id, RunStatus::Failed, Some(0.25), 10 * hour + 10).await;
    let st = stats(s.clone()).await;
    assert_eq!(
        st.last_outcome,
        Some(Outcome {
            status: "failed".into(),
            at_ms: 10 * hour + 10
        })
    );
    assert_eq!(st.spend_usd, 0.25);

    // A chain step's outcome is not the schedule's; its cost is.
    let chained = claim(RunKind::Chain, 11 * hour).await;
    finish(chained.id, RunStatus::Completed, Some(0.5), 11 * hour + 1).await;
    let st = stats(s.clone()).await;
    assert_eq!(
        st.last_outcome.as_ref().map(|o| o.status.as_str()),
        Some("failed")
    );
    assert_eq!(st.spend_usd, 0.75);
    assert_eq!(s.spend("a").await.expect("spend"), 0.75);

    let second = claim(RunKind::Scheduled, 11 * hour + 2).await;
    finish(second.id, RunStatus::Completed, None, 11 * hour + 3).await;
    let st = stats(s.clone()).await;
    assert_eq!(
        st.last_outcome,
        Some(Outcome {
            status: "completed".into(),
            at_ms: 11 * hour + 3
        })
    );

    let counts = s.run_counts_since(10 * hour).await.expect("counts");
    assert_eq!(
        counts,
        [
            (10 * hour, "failed".to_owned(), 1),
            (11 * hour, "completed".to_owned(), 2),
        ]
    );
    assert_eq!(
        s.run_counts_since(11 * hour).await.expect("counts").len(),
        1,
        "hours before `since` are left out"
    );
    assert_eq!(s.prune_run_counts(11 * hour).await.expect("prune"), 2);
    assert_eq!(s.run_counts_since(0).await.expect("counts").len(), 1);
}

/// A row stored before cadences were kept is found, filled once, and then left alone.
#[tokio::test]
async fn a_missing_cadence_is_filled_once() {
    let dir = TempDir::new("cadence");
    let s = store(&dir).await;
    let mut old = schedule("old", Some(5), None);
    old.cadence_ms = None;
    s.insert_schedule(&old, None).await.expect("insert");
    s.insert_schedule(&schedule("new", Some(5), None), None)
        .await
        .expect("insert");
    let missing = s.schedules_without_cadence().await.expect("missing");
    assert_eq!(
        missing.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["old"]
    );
    s.set_cadence("old", 1_000).await.expect("fill");
    s.set_cadence("old", 9_000).await.expect("a second fill");
    let row = s.schedule("old").await.expect("read").expect("row");
    assert_eq!(row.cadence_ms, Some(1_000));
    assert!(
        s.schedules_without_cadence()
            .await
            .expect("none")
            .is_empty()
    );
}

/// The health rule in SQL (the summary's counts, the list's filter) gives each row the
/// answer the rule in Rust gives it.
#[tokio::test]
async fn health_in_sql_agrees_with_each_row() {
    let dir = TempDir::new("census");
    let s = store(&dir).await;
    let now = 100 * 3_600_000;
    /// (id, enabled, armed, last outcome and its age in seconds, any run)
    type Case = (&'static str, bool, bool, Option<(&'static str, i64)>, bool);
    let cases: &[Case] = &[
        ("off", false, true, Some(("failed", 10)), true),
        ("new", true, true, None, false),
        ("running", true, true, None, true),
        ("ok", true, true, Some(("completed", 10)), true),
        ("bad", true, true, Some(("failed", 10)), true),
        ("late-ok", true, true, Some(("completed", 400)), true),
        ("late-bad", true, true, Some(("timed_out", 400)), true),
        ("old-but-fine", true, true, Some(("completed", 200)), true),
        ("unarmed-bad", true, false, Some(("failed", 4_000)), true),
    ];
    for (id, enabled, armed, outcome, any) in cases {
        // Every schedule is `every 1s`: 300 s of slack make 301 s overdue, 200 s not.
        let mut row = schedule(id, armed.then_some(now + 1_000), None);
        row.enabled = *enabled;
        s.insert_schedule(&row, None).await.expect("insert");
        if *any {
            let at = outcome.map_or(now, |(_, age)| now - age * 1_000 - 1);
            let r = match s
                .claim(&run(id, None, RunKind::Manual), Cursor::Keep, at, None)
                .await
            {
                Ok(Claim::Claimed(r, ..)) => *r,
                other => panic!("claim: {other:?}"),
            };
            if let Some((status, age)) = outcome {
                let to = RunStatus::parse(status).expect("status");
                s.transition(&r.id, RunStatus::Running, to, None, None, now - age * 1_000)
                    .await
                    .expect("finish");
            }
        }
    }
    let mut exact = std::collections::BTreeMap::<String, Vec<String>>::new();
    for row in s.all_schedules().await.expect("all") {
        exact
            .entry(health(&row, now).to_owned())
            .or_default()
            .push(row.name.clone());
    }
    assert_eq!(
        exact.get("overdue").map(Vec::len),
        Some(2),
        "late-ok and late-bad: {exact:?}"
    );
    let counts: std::collections::BTreeMap<String, usize> = s
        .health_counts(now)
        .await
        .expect("counts")
        .into_iter()
        .map(|(h, n)| (h, usize::try_from(n).expect("count")))
        .collect();
    let expected: std::collections::BTreeMap<String, usize> = exact
        .iter()
        .map(|(h, names)| (h.clone(), names.len()))
        .collect();
    assert_eq!(counts, expected);
    for h in super::health::HEALTHS {
        let filter = ScheduleFilter {
            health: &[h],
            limit: 100,
            ..ScheduleFilter::default()
        };
        let listed: Vec<String> = s
            .list_schedules(&filter, now)
            .await
            .expect("list")
            .into_iter()
            .map(|row| row.name)
            .collect();
        assert_eq!(
            listed,
            exact.get(*h).cloned().unwrap_or_default(),
            "health filter {h}"
        );
    }
    let both = ScheduleFilter {
        health: &["failing", "overdue"],
        limit: 100,
        ..ScheduleFilter::default()
    };
    assert_eq!(
        s.list_schedules(&both, now).await.expect("list").len(),
        exact["failing"].len() + exact["overdue"].len()
    );
}

/// What a job writes is kept whatever its bytes: a NUL (which PostgreSQL's text cannot
/// hold) is kept as U+FFFD on both databases, and a real number's cost round-trips after
/// a NULL one went through the same statement.
#[tokio::test]
async fn output_with_nul_bytes_and_costs_after_no_cost_are_kept() {
    let dir = TempDir::new("nul");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", Some(0), None), None)
        .await
        .expect("insert");
    let mut ended = Vec::new();
    for (i, cost) in [None, Some(0.125), None, Some(2.5)].into_iter().enumerate() {
        let i = i64::try_from(i).expect("small");
        let Claim::Claimed(r, _, _) = s
            .claim(
                &run("a", Some(format!("a:{i}")), RunKind::Scheduled),
                Cursor::Advance {
                    expected: i,
                    next: Some(i + 1),
                    term: 0,
                },
                i,
                None,
            )
            .await
            .expect("claim")
        else {
            panic!("claimed");
        };
        s.mark_dispatched(&r.id, 1, None, Some("/bin/true"), None, i)
            .await
            .expect("stamp");
        let finish = Finish {
            stdout_tail: Some("abcd\0e".into()),
            stderr_tail: Some("boom\0\n".into()),
            cost_usd: cost,
            ..Finish::default()
        };
        s.transition(
            &r.id,
            RunStatus::Running,
            RunStatus::Failed,
            Some("exit_1"),
            Some(&finish),
            i,
        )
        .await
        .expect("finish");
        ended.push((r.id, cost));
    }
    for (id, cost) in ended {
        let row = s.run(&id).await.expect("read").expect("row");
        // A tail stays within its size: the replacement's extra bytes cost its oldest.
        assert_eq!(row.stdout_tail.as_deref(), Some("cd\u{FFFD}e"));
        assert_eq!(row.stderr_tail.as_deref(), Some("om\u{FFFD}\n"));
        assert_eq!(row.cost_usd, cost);
    }
}

/// Not a timed assertion: prints what one fire's database work costs (run with
/// `--release -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn measure_fire_database_work() {
    let dir = TempDir::new("speed");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", Some(0), None), None)
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
            term: 0,
        };
        let Claim::Claimed(r, _, _) = s
            .claim(
                &run("a", Some(format!("a:{i}")), RunKind::Scheduled),
                cursor,
                i,
                None,
            )
            .await
            .expect("claim")
        else {
            panic!("claimed");
        };
        claim += t.elapsed().as_micros();
        let t = std::time::Instant::now();
        s.mark_dispatched(&r.id, 1, None, Some("/bin/true"), None, i)
            .await
            .expect("stamp");
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

/// Not a timed assertion: prints the p50 of a status change alone and with an evidence
/// row sealed in its transaction (run with `--release -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn measure_evidence_row_cost() {
    let dir = TempDir::new("evidence-speed");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", None, None), None)
        .await
        .expect("insert");
    let n = 4_000;
    let mut plain = Vec::with_capacity(n);
    let mut sealed = Vec::with_capacity(n);
    for i in 0..n {
        let mut new = run("a", None, RunKind::Manual);
        new.status = RunStatus::Queued;
        let Claim::Claimed(r, _, _) = s.claim(&new, Cursor::Keep, 1, None).await.expect("claim")
        else {
            panic!("claimed");
        };
        let t = std::time::Instant::now();
        // Alternate, so both see the same database as it grows.
        if i % 2 == 0 {
            s.transition(
                &r.id,
                RunStatus::Queued,
                RunStatus::Cancelled,
                None,
                None,
                2,
            )
            .await
            .expect("change");
            plain.push(t.elapsed().as_micros());
        } else {
            s.transition_with_evidence(&r.id, (RunStatus::Queued, RunStatus::Cancelled), 2)
                .await
                .expect("change with evidence");
            sealed.push(t.elapsed().as_micros());
        }
    }
    let p50 = |v: &mut Vec<u128>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (a, b) = (p50(&mut plain), p50(&mut sealed));
    println!(
        "status change p50: {a} µs alone, {b} µs with an evidence row (+{} µs)",
        b.saturating_sub(a)
    );
}

/// Not a timed assertion: prints what the summary's health counts cost over 10,000
/// hourly schedules with outcomes, and what a page of them filtered by health costs
/// (run with `--release -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn measure_health_over_ten_thousand_schedules() {
    let dir = TempDir::new("census-speed");
    let db = Store::open(&dir.path().join("state.db"))
        .await
        .expect("open");
    let s = SchedStore::with_test_key(&db);
    let now = studio_contract::time::now_ms();
    let n = 10_000;
    for i in 0..n {
        let mut row = schedule(&format!("s{i:05}"), Some(now + 60_000), None);
        row.spec = r#"{"trigger":{"cron":{"expression":"0 * * * *"}},"action":{"kind":"command","executable":"true"}}"#.into();
        row.trigger_kind = "cron".into();
        row.cadence_ms = Some(3_600_000);
        s.insert_schedule(&row, None).await.expect("insert");
    }
    sqlx::query(
        "UPDATE schedules SET has_runs = 1, \
         last_outcome = CASE WHEN rowid % 10 = 0 THEN 'failed' ELSE 'completed' END, \
         last_outcome_at_ms = CASE WHEN rowid % 100 = 0 THEN $1 - 4 * 3600000 ELSE $1 - 1800000 END",
    )
    .bind(now)
    .execute(db.writer())
    .await
    .expect("outcomes");
    let t = std::time::Instant::now();
    let rounds = 20;
    let mut counts = Vec::new();
    for _ in 0..rounds {
        counts = s.health_counts(now).await.expect("counts");
    }
    println!(
        "health counts over {n} schedules: {:.2} ms each ({counts:?})",
        t.elapsed().as_secs_f64() * 1e3 / f64::from(rounds)
    );
    let t = std::time::Instant::now();
    let filter = ScheduleFilter {
        health: &["failing", "overdue"],
        limit: 501,
        ..ScheduleFilter::default()
    };
    let mut page = Vec::new();
    for _ in 0..rounds {
        page = s.list_schedules(&filter, now).await.expect("list");
    }
    println!(
        "a page of failing or overdue schedules ({} rows): {:.2} ms each",
        page.len(),
        t.elapsed().as_secs_f64() * 1e3 / f64::from(rounds)
    );
}

/// A scheduler over a fresh home (its loop not started).
pub(super) async fn scheduler(dir: &TempDir) -> Arc<super::Scheduler> {
    let store = crate::testing::open_store(dir).await;
    let stop = studio_contract::lifecycle::Shutdown::new();
    super::Scheduler::new(
        SchedStore::with_test_key(&store),
        super::SchedulerConfig::default(),
        studio_schedule::Zone::utc(),
        dir.path().join("runs"),
        dir.path().join("run"),
        stop,
        None,
    )
    .await
    .expect("scheduler")
}

/// Two studiod schedulers on one new PostgreSQL database, members `a` and `b`, each with
/// folders and a stop of its own (failover budget 3 s); not yet running.
async fn two_members(
    label: &str,
) -> (
    [TempDir; 2],
    Vec<(Arc<super::Scheduler>, studio_contract::lifecycle::Shutdown)>,
) {
    let dirs = [
        TempDir::new(&format!("{label}-a")),
        TempDir::new(&format!("{label}-b")),
    ];
    let first = crate::testing::open_store(&dirs[0]).await;
    let url = first.url().cloned().expect("a PostgreSQL store");
    let second = Store::open_at(studio_store::Location::Postgres(&url))
        .await
        .expect("a second studiod's store");
    let mut members = Vec::new();
    for (store, (dir, id)) in [first, second].iter().zip(dirs.iter().zip(["a", "b"])) {
        let stop = studio_contract::lifecycle::Shutdown::new();
        let scheduler = super::Scheduler::new(
            SchedStore::with_test_key(store).for_member(id),
            super::SchedulerConfig {
                epoch: id.into(),
                addr: format!("127.0.0.1:{id}"),
                failover: std::time::Duration::from_secs(3),
                ..super::SchedulerConfig::default()
            },
            studio_schedule::Zone::utc(),
            dir.path().join("runs"),
            dir.path().join("run"),
            stop.clone(),
            None,
        )
        .await
        .expect("scheduler");
        members.push((scheduler, stop));
    }
    (dirs, members)
}

/// On a shared database (PostgreSQL), work one studiod announces wakes the claimers of
/// another: its listener hears the notification. (SQLite has one studiod.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_announced_by_one_studiod_wakes_another() {
    if !crate::testing::on_postgres() {
        return;
    }
    let (_dirs, members) = two_members("listen").await;
    let members: Vec<_> = members.into_iter().map(|(s, _)| s).collect();
    let (a, b) = (&members[0], &members[1]);
    let mut changes = b.work_changes();
    tokio::spawn(b.clone().listen_forever());
    let wait = std::time::Duration::from_secs(10);
    // The listener's own first look, once it listens.
    tokio::time::timeout(wait, changes.changed())
        .await
        .expect("listening")
        .expect("open");
    a.tasks_changed();
    tokio::time::timeout(wait, changes.changed())
        .await
        .expect("b heard a's announcement")
        .expect("open");
}

/// A process the test started, killed when the test ends however it ends.
struct Bystander(std::process::Child);

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Bystander {
    /// Its exit status, once it has ended (within 5 s, or the test fails).
    async fn killed(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            loop {
                if let Some(status) = self.0.try_wait().expect("poll") {
                    return status;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the process ended")
    }
}

/// An unrelated process leading its own group, as a recorded pid's new owner would be.
fn bystander() -> Bystander {
    use std::os::unix::process::CommandExt;
    Bystander(
        std::process::Command::new("/bin/sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("spawn sleep"),
    )
}

/// A dispatched `running` run whose leader was recorded as `leader`.
async fn dispatched(s: &super::Scheduler, leader: &studio_runner::ProcessIdentity) -> String {
    let mut r = run("a", None, RunKind::Chain);
    r.counted = false;
    let Claim::Claimed(row, _, _) = s
        .store
        .claim(&r, Cursor::Keep, 1, None)
        .await
        .expect("claim")
    else {
        panic!("claimed");
    };
    s.store
        .mark_dispatched(
            &row.id,
            leader.pid,
            Some(leader),
            Some("/bin/sleep"),
            None,
            2,
        )
        .await
        .expect("stamp");
    row.id
}

#[tokio::test]
async fn recovery_signals_a_recorded_leader_only_while_it_is_that_very_process() {
    let dir = TempDir::new("reuse");
    let s = scheduler(&dir).await;
    s.store
        .insert_schedule(&schedule("a", None, None), None)
        .await
        .expect("schedule");
    // The pid now belongs to another process than the one recorded (it started later).
    let mut other = bystander();
    let now = studio_runner::ProcessIdentity::of(other.0.id(), &s.boot_id).expect("identity");
    let earlier = studio_runner::ProcessIdentity {
        start_ticks: now.start_ticks - 1,
        ..now.clone()
    };
    let reused = dispatched(&s, &earlier).await;
    // The same process, but recorded on another boot.
    let rebooted = dispatched(
        &s,
        &studio_runner::ProcessIdentity {
            boot_id: "an-earlier-boot".into(),
            ..now.clone()
        },
    )
    .await;
    // And one recorded as exactly itself: what is left of a lost job.
    let mut own = bystander();
    let own_id = studio_runner::ProcessIdentity::of(own.0.id(), &s.boot_id).expect("identity");
    let lost = dispatched(&s, &own_id).await;

    s.recover().await.expect("recover");

    assert!(
        other.0.try_wait().expect("poll").is_none(),
        "a process under a reused pid was signalled"
    );
    assert!(
        !own.killed().await.success(),
        "the recorded leader was killed"
    );
    for id in [reused, rebooted, lost] {
        let row = s.store.run(&id).await.expect("read").expect("row");
        assert_eq!(
            (row.status.as_str(), row.reason.as_deref()),
            ("failed", Some("daemon_lost")),
            "{id}"
        );
    }
}

#[tokio::test]
async fn a_claimed_run_keeps_its_follow_ups_and_a_replacement_is_the_next_attempt() {
    let dir = TempDir::new("attempt");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", None, None), None)
        .await
        .expect("schedule");
    let mut r = run("a", Some("a:1".into()), RunKind::Scheduled);
    r.follow_ups = Some(r#"{"on_success":null,"on_fail":null}"#.into());
    let Claim::Claimed(row, _, _) = s.claim(&r, Cursor::Keep, 1, None).await.expect("claim") else {
        panic!("claimed");
    };
    assert_eq!(
        row.follow_ups, r.follow_ups,
        "every column lands in its own place"
    );
    assert_eq!(row.attempt, 1);
    let (replacement, _) = s
        .tombstone_and_replace(&row, "r2", 2)
        .await
        .expect("replace")
        .expect("replaced");
    assert_eq!(replacement.attempt, 2);
    assert_eq!(replacement.follow_ups, r.follow_ups);
    assert_eq!(
        replacement.replaces_run_id.as_deref(),
        Some(row.id.as_str())
    );
}

/// A `running` run, claimed but not stamped, with the given evidence files in its folder.
async fn launched(
    s: &super::Scheduler,
    files: &[(&str, serde_json::Value)],
) -> (String, std::path::PathBuf) {
    let mut r = run("a", None, RunKind::Chain);
    r.counted = false;
    let Claim::Claimed(row, _, _) = s
        .store
        .claim(&r, Cursor::Keep, 1, None)
        .await
        .expect("claim")
    else {
        panic!("claimed");
    };
    let dir = s.runs_dir.join(&row.id);
    std::fs::create_dir_all(&dir).expect("run folder");
    for (name, value) in files {
        studio_runner::evidence::record(&dir, name, value).expect("evidence");
    }
    (row.id, dir)
}

fn outcome_json(exit_code: i32) -> serde_json::Value {
    serde_json::json!({
        "ending": "exited", "exit_code": exit_code, "signal": null,
        "stdout": {"bytes": 3, "logged": 3, "tail": "hi\n"},
        "stderr": {"bytes": 0, "logged": 0, "tail": ""},
        "report": null, "report_error": null
    })
}

async fn status_of(s: &super::Scheduler, id: &str) -> RunRow {
    s.store.run(id).await.expect("read").expect("row")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_settles_each_run_by_what_its_shim_recorded() {
    use studio_runner::{
        ProcessIdentity,
        evidence::{JOB_FILE, OUTCOME_FILE, SHIM_FILE},
    };
    let dir = TempDir::new("evidence");
    let s = scheduler(&dir).await;
    s.store
        .insert_schedule(&schedule("a", None, None), None)
        .await
        .expect("schedule");
    let boot = s.boot_id.clone();
    let me = ProcessIdentity::of(std::process::id(), &boot).expect("identity");
    // This pid, recorded as an earlier process: a shim that is gone.
    let gone = serde_json::to_value(ProcessIdentity {
        start_ticks: me.start_ticks - 1,
        ..me.clone()
    })
    .expect("json");
    let live = |b: &Bystander| {
        serde_json::to_value(ProcessIdentity::of(b.0.id(), &boot).expect("identity")).expect("json")
    };

    let (never, _) = launched(&s, &[]).await;
    let (ended, _) = launched(
        &s,
        &[
            (SHIM_FILE, gone.clone()),
            (JOB_FILE, gone.clone()),
            (OUTCOME_FILE, outcome_json(0)),
        ],
    )
    .await;
    // A shim still running (a stand-in that lives a moment), its job recorded.
    let mut shim = Bystander(
        std::process::Command::new("/bin/sleep")
            .arg("1")
            .spawn()
            .expect("spawn"),
    );
    let (adopted, adopted_dir) =
        launched(&s, &[(SHIM_FILE, live(&shim)), (JOB_FILE, live(&shim))]).await;
    // A shim gone without an outcome, its job still running: that job is killed.
    let mut orphan = bystander();
    let (shim_lost, _) =
        launched(&s, &[(SHIM_FILE, gone.clone()), (JOB_FILE, live(&orphan))]).await;
    let (uncertain, _) = launched(&s, &[(SHIM_FILE, gone.clone())]).await;
    let other_boot = serde_json::to_value(ProcessIdentity {
        boot_id: "an-earlier-boot".into(),
        ..me.clone()
    })
    .expect("json");
    let (rebooted, _) = launched(&s, &[(SHIM_FILE, other_boot)]).await;

    s.recover().await.expect("recover");

    let tomb = status_of(&s, &never).await;
    assert_eq!(
        (tomb.status.as_str(), tomb.reason.as_deref()),
        ("failed", Some("never_dispatched")),
        "no shim ever recorded itself: replaced"
    );
    let done = status_of(&s, &ended).await;
    assert_eq!(
        (done.status.as_str(), done.exit_code),
        ("completed", Some(0)),
        "{done:?}"
    );
    assert!(done.dispatched_at_ms.is_some(), "its launch is stamped");
    for (id, reason) in [
        (&shim_lost, "shim_lost"),
        (&uncertain, "launch_uncertain"),
        (&rebooted, "host_rebooted"),
    ] {
        let row = status_of(&s, id).await;
        assert_eq!(
            (row.status.as_str(), row.reason.as_deref()),
            ("failed", Some(reason)),
            "{row:?}"
        );
    }
    assert!(
        !orphan.killed().await.success(),
        "the lost shim's job was killed"
    );

    // Adopted: running, followed, and ended with the outcome its shim records.
    assert_eq!(status_of(&s, &adopted).await.status, "running");
    assert!(s.active().contains_key(&adopted), "adopted");
    studio_runner::evidence::record(&adopted_dir, OUTCOME_FILE, &outcome_json(3)).expect("outcome");
    let _ = shim.0.wait();
    let row = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let row = status_of(&s, &adopted).await;
            if row.status != "running" {
                return row;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the adopted run ended");
    assert_eq!(
        (row.status.as_str(), row.reason.as_deref(), row.exit_code),
        ("failed", Some("exit_3"), Some(3)),
        "{row:?}"
    );
    assert!(row.dispatched_at_ms.is_some(), "stamped from job.json");
}

/// A claimed `running` chain run of schedule "a", created at `created_ms`.
async fn running_since(s: &super::Scheduler, created_ms: i64) -> String {
    let mut r = run("a", None, RunKind::Chain);
    r.counted = false;
    let Claim::Claimed(row, _, _) = s
        .store
        .claim(&r, Cursor::Keep, created_ms, None)
        .await
        .expect("claim")
    else {
        panic!("claimed");
    };
    row.id
}

#[tokio::test]
async fn the_reaper_ends_only_old_runs_that_nothing_backs() {
    let dir = TempDir::new("reaper");
    let s = scheduler(&dir).await;
    s.store
        .insert_schedule(&schedule("a", None, None), None)
        .await
        .expect("schedule");
    let now = studio_contract::time::now_ms();
    let stale = running_since(&s, now - 120_000).await;
    // Younger than the reaper's patience: it may still be on its way to a launch.
    let young = running_since(&s, now - 1_000).await;
    // Old, but followed by this daemon.
    let followed = running_since(&s, now - 120_000).await;
    s.active()
        .insert(followed.clone(), super::engine::Active::default());

    s.reap().await.expect("reap");

    let row = status_of(&s, &stale).await;
    assert_eq!(
        (row.status.as_str(), row.reason.as_deref()),
        ("failed", Some("stale")),
        "{row:?}"
    );
    assert_eq!(status_of(&s, &young).await.status, "running");
    assert_eq!(status_of(&s, &followed).await.status, "running");
}

#[tokio::test]
async fn pruning_keeps_the_newest_events() {
    let dir = TempDir::new("prune");
    let s = store(&dir).await;
    for i in 0..10 {
        s.insert_schedule(&schedule(&format!("s{i}"), None, None), None)
            .await
            .expect("schedule");
    }
    let latest = s.latest_event_seq().await.expect("seq");
    let all = s.events_after(0, 100).await.expect("events");
    assert!(all.len() >= 10, "one event per schedule at least");
    let removed = s.prune_events(3).await.expect("prune");
    assert_eq!(removed as usize, all.len() - 3);
    let kept: Vec<i64> = s
        .events_after(0, 100)
        .await
        .expect("events")
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(kept, [latest - 2, latest - 1, latest], "the newest three");
}

/// A `detach` leaves running jobs alone at the stop that follows it, and only then: a
/// stop long after it cancels them as any stop does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detach_spares_running_jobs_at_the_next_stop_only() {
    let dir = TempDir::new("detach");
    let s = scheduler(&dir).await;
    s.store
        .insert_schedule(&schedule("a", None, None), None)
        .await
        .expect("schedule");
    let id = running_since(&s, studio_contract::time::now_ms()).await;
    let (canceller, cancelled) = studio_runner::Canceller::pair();
    s.active().insert(
        id.clone(),
        super::engine::Active {
            canceller: Some(canceller),
            ..Default::default()
        },
    );
    assert_eq!(s.detach(), 1, "one job runs");
    s.drain().await;
    assert!(!*cancelled.borrow(), "a detached stop cancels nothing");
    // The window has passed: no restart followed.
    s.detached_until_ms
        .store(0, std::sync::atomic::Ordering::SeqCst);
    s.drain().await;
    assert!(*cancelled.borrow(), "a later stop cancels");
}

/// Each schedule command publishes the event its write committed and records who made
/// it in the audit trail; a refused write publishes and records nothing.
#[tokio::test]
async fn schedule_commands_publish_what_they_write_and_nothing_when_refused() {
    let dir = TempDir::new("commands");
    let s = scheduler(&dir).await;
    let by = crate::audit::Actor {
        principal: "p-1".into(),
        role: studio_contract::role::Role::Operator,
        origin: Some("http://127.0.0.1:8765".into()),
        epoch: "e1".into(),
    };
    let mut events = s.subscribe();
    let op = |e: super::model::EventRow| {
        let data: studio_api::ScheduleEvent = serde_json::from_str(&e.data).expect("event");
        (e.kind, data.id, data.op)
    };
    let row = schedule("a", None, None);
    s.create_schedule(&row, &by).await.expect("create");
    assert_eq!(
        op(events.try_recv().expect("created")),
        (
            "schedule".into(),
            "a".into(),
            studio_api::ScheduleOp::Created
        )
    );
    let mut twin = schedule("b", None, None);
    twin.name.clone_from(&row.name);
    assert!(matches!(
        s.create_schedule(&twin, &by).await,
        Err(EngineError::NameTaken(name)) if name == row.name
    ));
    let mut revised = row.clone();
    revised.revision = 2;
    assert!(matches!(
        s.update_schedule(&revised, 7, &by).await,
        Err(EngineError::Moved)
    ));
    assert!(
        events.try_recv().is_err(),
        "a refused write publishes nothing"
    );
    s.update_schedule(&revised, 1, &by).await.expect("update");
    assert_eq!(
        op(events.try_recv().expect("updated")).2,
        studio_api::ScheduleOp::Updated
    );
    s.delete_schedule("a", &by).await.expect("delete");
    assert_eq!(
        op(events.try_recv().expect("deleted")).2,
        studio_api::ScheduleOp::Deleted
    );
    assert!(matches!(
        s.delete_schedule("a", &by).await,
        Err(EngineError::ScheduleNotFound)
    ));
    assert!(events.try_recv().is_err());

    // The trail: one row per committed change, newest first, each saying who and how.
    let trail = s
        .store
        .audit(&super::store::AuditFilter {
            schedule_id: Some("a"),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("trail");
    let kinds: Vec<&str> = trail.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["schedule_deleted", "schedule_updated", "schedule_created"]
    );
    for r in &trail {
        assert_eq!(r.principal_id.as_deref(), Some("p-1"));
        assert_eq!(r.role.as_deref(), Some("operator"));
        assert_eq!(r.origin.as_deref(), Some("http://127.0.0.1:8765"));
        assert_eq!(r.object.as_deref(), Some("schedule:a"));
        assert_eq!(r.epoch, "e1");
    }
    let detail: serde_json::Value = serde_json::from_str(&trail[1].detail).expect("JSON");
    assert_eq!(detail["revision"], 2);
    assert_eq!(detail["from_revision"], 1);
}

#[tokio::test]
async fn a_run_keeps_the_name_it_ran_under_and_says_why_it_failed_in_one_line() {
    let dir = TempDir::new("names");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", None, None), None)
        .await
        .expect("insert");
    let claim = |s: &SchedStore| {
        let s = s.clone();
        async move {
            match s
                .claim(&run("a", None, RunKind::Manual), Cursor::Keep, 1, None)
                .await
                .expect("claim")
            {
                Claim::Claimed(r, _, _) => r,
                _ => panic!("claimed"),
            }
        }
    };
    let first = claim(&s).await;
    assert_eq!(first.schedule_name.as_deref(), Some("test/a"));
    assert_eq!(first.error_line, None);
    let failed = Finish {
        exit_code: Some(3),
        stdout_tail: Some("fetching sales\n".into()),
        stderr_tail: Some("connecting\nERROR: relation \"sales\" does not exist\n\n".into()),
        ..Finish::default()
    };
    let (done, event) = s
        .transition(
            &first.id,
            RunStatus::Running,
            RunStatus::Failed,
            Some("exit_3"),
            Some(&failed),
            5,
        )
        .await
        .expect("finish")
        .expect("finished");
    let line = "ERROR: relation \"sales\" does not exist";
    assert_eq!(done.error_line.as_deref(), Some(line));
    let payload: studio_api::RunEvent =
        serde_json::from_str(&event.last().expect("run event").data).expect("run event");
    assert_eq!(payload.error_line.as_deref(), Some(line));
    assert_eq!(payload.schedule_name.as_deref(), Some("test/a"));

    // Renamed, then deleted: the runs keep the name they ran under, lists included.
    let mut renamed = s.schedule("a").await.expect("read").expect("row");
    renamed.name = "test/renamed".into();
    s.update_schedule(&renamed, renamed.revision, None)
        .await
        .expect("rename")
        .expect("renamed");
    let second = claim(&s).await;
    assert_eq!(second.schedule_name.as_deref(), Some("test/renamed"));
    s.delete_schedule("a", 9, None).await.expect("delete");
    let listed = s
        .list_runs(&RunFilter {
            limit: 10,
            ..RunFilter::default()
        })
        .await
        .expect("list");
    let names: Vec<_> = listed
        .iter()
        .map(|r| (r.schedule_id.as_deref(), r.schedule_name.as_deref()))
        .collect();
    assert_eq!(
        names,
        [(None, Some("test/renamed")), (None, Some("test/a"))],
        "detached runs keep their names"
    );
    assert_eq!(listed[1].error_line.as_deref(), Some(line));
}

#[test]
fn the_error_line_is_the_last_said_line_of_the_stream_that_has_one() {
    use super::model::error_line;
    let failed = RunStatus::Failed;
    assert_eq!(
        error_line(failed, Some("a\nboom\n  \n"), Some("out")),
        Some("boom".into())
    );
    assert_eq!(
        error_line(RunStatus::TimedOut, Some(""), Some("step 1\nstep 2\n")),
        Some("step 2".into()),
        "stdout when stderr is empty"
    );
    assert_eq!(
        error_line(
            failed,
            Some("\n[studio] cannot start \"li\": No such file\n"),
            None
        ),
        Some("cannot start \"li\": No such file".into()),
        "Studio's own mark is left out"
    );
    assert_eq!(
        error_line(failed, Some("red \u{1b}[31mERR\u{1b}[0m\r\n"), None),
        Some("red [31mERR[0m".into()),
        "control characters are dropped"
    );
    let long = "x".repeat(500);
    let cut = error_line(failed, Some(&long), None).expect("a line");
    assert_eq!(cut.chars().count(), 201);
    assert!(cut.ends_with('…'));
    assert_eq!(error_line(failed, None, Some(" \n")), None);
    assert_eq!(
        error_line(RunStatus::Completed, Some("warning: x"), None),
        None,
        "only a run that failed or timed out has one"
    );
}

#[tokio::test]
async fn each_schedule_keeps_its_newest_runs_as_they_come_change_and_go() {
    let dir = TempDir::new("recent");
    let s = store(&dir).await;
    for id in ["a", "b", "c"] {
        s.insert_schedule(&schedule(id, None, None), None)
            .await
            .expect("insert");
    }
    let mut made = Vec::new();
    for (id, n) in [("a", 12), ("b", 2)] {
        for i in 0..n {
            let Claim::Claimed(r, _, _) = s
                .claim(
                    &run(id, None, RunKind::Manual),
                    Cursor::Keep,
                    1_000 + i,
                    None,
                )
                .await
                .expect("claim")
            else {
                panic!("claimed");
            };
            made.push((id, r.id));
        }
    }
    let newest = |id: &str, skip: usize| -> Vec<String> {
        let mut ids: Vec<String> = made
            .iter()
            .filter(|(s, _)| *s == id)
            .map(|(_, r)| r.clone())
            .collect();
        ids.reverse();
        ids.into_iter()
            .skip(skip)
            .take(studio_api::RECENT_RUNS)
            .collect()
    };
    let strip = |id: &'static str| {
        let s = &s;
        async move {
            s.schedule(id)
                .await
                .expect("read")
                .expect("a schedule")
                .stats
                .recent
        }
    };
    let ids = |marks: &[crate::scheduling::model::RunMark]| {
        marks.iter().map(|m| m.id.clone()).collect::<Vec<_>>()
    };
    assert_eq!(
        ids(&strip("a").await),
        newest("a", 0),
        "newest first, ten at most"
    );
    assert_eq!(ids(&strip("b").await), newest("b", 0));
    assert!(strip("c").await.is_empty());
    assert!(strip("a").await.iter().all(|m| m.status == "running"));

    // A change of status shows.
    let last = newest("b", 0)[0].clone();
    s.transition(
        &last,
        RunStatus::Running,
        RunStatus::Cancelled,
        None,
        None,
        2_000,
    )
    .await
    .expect("transition")
    .expect("it was running");
    assert_eq!(strip("b").await[0].status, "cancelled");

    // A shown run deleted, the next older one comes in; an older one deleted changes
    // nothing.
    s.delete_run(&newest("a", 0)[0]).await;
    assert_eq!(ids(&strip("a").await), newest("a", 1));
    let oldest = made
        .iter()
        .find(|(s, _)| *s == "a")
        .expect("a run")
        .1
        .clone();
    s.delete_run(&oldest).await;
    assert_eq!(ids(&strip("a").await), newest("a", 1));
}

#[tokio::test]
async fn up_next_reads_the_due_index_in_order_without_sorting() {
    let dir = TempDir::new("up-next");
    let s = store(&dir).await;
    if !s.plans_are_sqlites() {
        return;
    }
    let plan = s.plan(super::store::UP_NEXT, 1).await.join("\n");
    assert!(plan.contains("schedules_due"), "{plan}");
    assert!(!plan.contains("TEMP B-TREE"), "{plan}");
}

#[tokio::test]
async fn health_is_read_from_its_index_not_from_the_specs() {
    let dir = TempDir::new("health-plan");
    let s = store(&dir).await;
    if !s.plans_are_sqlites() {
        return;
    }
    let plan = s
        .plan(&super::store::health_counts_sql(), 1)
        .await
        .join("\n");
    assert!(plan.contains("COVERING INDEX schedules_health"), "{plan}");
    let healths = ["failing"];
    let filters = [
        ScheduleFilter::default(),
        ScheduleFilter {
            enabled: Some(true),
            query: Some("nightly"),
            after_name: Some("a"),
            health: &healths,
            limit: 50,
        },
    ];
    for f in &filters {
        let sql = super::store::list_sql(f, 0);
        let plan = s.plan(sql.text(), sql.marks()).await.join("\n");
        assert!(plan.contains("INDEX schedules_health"), "{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }
}

/// The leader's lock on PostgreSQL: one session holds it and takes the next term; no
/// other takes it until the holder resigns (a clean stop) or falls silent past its
/// timeout (a frozen or cut-off leader, whose socket stays open), and the silent one's
/// next ping fails. A fire under the silent leader's term is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_lock_has_one_holder_and_a_silent_one_loses_it() {
    if !crate::testing::on_postgres() {
        return;
    }
    use super::store::LeaderSession;
    let dir = TempDir::new("lead");
    let store = crate::testing::open_store(&dir).await;
    let url = store.url().cloned().expect("a PostgreSQL store");
    let s = SchedStore::with_test_key(&store);
    let silence = std::time::Duration::from_secs(1);
    let session = || async { LeaderSession::connect(&url).await.expect("a session") };
    let (mut a, mut b) = (session().await, session().await);
    let first = a
        .try_lead(silence, "a", 1)
        .await
        .expect("try")
        .expect("a leads");
    assert_eq!(
        b.try_lead(silence, "b", 2).await.expect("try"),
        None,
        "one holder"
    );
    a.ping(None).await.expect("the holder's session answers");
    a.resign().await;
    let second = b
        .try_lead(silence, "b", 3)
        .await
        .expect("try")
        .expect("b leads");
    assert_eq!(second, first + 1, "each leader takes the next term");
    let cluster = s.cluster().await.expect("cluster");
    assert_eq!(
        (cluster.term, cluster.leader.as_deref()),
        (second, Some("b"))
    );

    s.insert_schedule(&schedule("a", Some(1_000), None), None)
        .await
        .expect("insert");
    // b falls silent, as a SIGSTOPped leader would: the server ends its session.
    let mut c = session().await;
    tokio::time::sleep(silence * 3).await;
    let third = c
        .try_lead(silence, "c", 4)
        .await
        .expect("try")
        .expect("c leads");
    assert_eq!(third, second + 1);
    assert!(
        b.ping(Some(("b", 5))).await.is_err(),
        "the silent leader learns it lost the lock"
    );
    let fire = |term| Cursor::Advance {
        expected: 1_000,
        next: Some(2_000),
        term,
    };
    let occurrence = || run("a", Some("a:1000".into()), RunKind::Scheduled);
    let stale = s.claim(&occurrence(), fire(second), 1_000, None).await;
    assert!(
        matches!(stale.expect("claim"), Claim::Lost),
        "b's term fires nothing"
    );
    let current = s.claim(&occurrence(), fire(third), 1_000, None).await;
    assert!(matches!(current.expect("claim"), Claim::Claimed(..)));
}

/// Two studiod schedulers on one PostgreSQL database: exactly one leads; when it stops,
/// the other takes the next term within the failover budget, and the stopped one's
/// member row says it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_leader_stops_the_other_member_leads() {
    if !crate::testing::on_postgres() {
        return;
    }
    let (_dirs, members) = two_members("member").await;
    let members: Vec<_> = members
        .into_iter()
        .map(|(scheduler, stop)| {
            let task = tokio::spawn(scheduler.clone().run());
            (scheduler, stop, task)
        })
        .collect();
    let within =
        |limit_s: u64| tokio::time::Instant::now() + std::time::Duration::from_secs(limit_s);
    let deadline = within(10);
    let leader = loop {
        let leading: Vec<usize> = (0..2).filter(|&i| members[i].0.term().is_some()).collect();
        assert!(leading.len() <= 1, "two leaders at once");
        if let [one] = leading[..] {
            break one;
        }
        assert!(tokio::time::Instant::now() < deadline, "nobody leads");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let term = members[leader].0.term().expect("a term");
    let (stopped, _, task) = {
        let (s, stop, task) = &members[leader];
        stop.trigger();
        (s.clone(), stop.clone(), task)
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while !task.is_finished() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let other = &members[1 - leader].0;
    let deadline = within(5);
    while other.term().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no failover within 5 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(other.term(), Some(term + 1));
    assert_eq!(stopped.term(), None);
    let deadline = within(5);
    loop {
        let cluster = other.reads().cluster().await.expect("cluster");
        assert_eq!(cluster.leader.as_deref(), Some(other.reads().member()));
        let gone = cluster
            .members
            .iter()
            .find(|m| m.id == stopped.reads().member())
            .expect("the stopped member's row");
        if gone.stopped_at_ms.is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "its stop is recorded"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    members[1 - leader].1.trigger();
}

/// A member settles its own unfinished runs on a shared database; on SQLite every one is
/// the one studiod's, whatever member id it was recorded under (a `state.db` restored
/// into another home keeps the old home's id, and its runs must still be recovered).
#[tokio::test]
async fn own_runs_are_a_members_when_shared_and_all_on_sqlite() {
    let dir = TempDir::new("own");
    let s = store(&dir).await;
    s.insert_schedule(&schedule("a", Some(1_000), None), None)
        .await
        .expect("insert");
    let old = s.clone().for_member("old-home");
    let claimed = old
        .claim(&run("a", None, RunKind::Manual), Cursor::Keep, 1_000, None)
        .await
        .expect("claim");
    let Claim::Claimed(r, _, _) = claimed else {
        panic!("claimed: {claimed:?}");
    };
    let mine: Vec<String> = s
        .clone()
        .for_member("new-home")
        .own_active_runs()
        .await
        .expect("read")
        .into_iter()
        .map(|r| r.id)
        .collect();
    if crate::testing::on_postgres() {
        assert!(mine.is_empty(), "another member's run: {mine:?}");
    } else {
        assert_eq!(mine, vec![r.id.clone()]);
    }
}
