//! The scheduler's invariants against a real SQLite file.

use std::sync::Arc;

use super::{
    health::health,
    model::{Outcome, RunKind, RunRow, RunStatus, ScheduleRow, ScheduleStats},
    store::{Claim, Cursor, Finish, NewRun, RunFilter, SchedStore, ScheduleFilter},
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
    let with = |row: &ScheduleRow, has_runs: bool, outcome: Option<(&str, i64)>| {
        let mut row = row.clone();
        row.stats = ScheduleStats {
            has_runs,
            last_outcome: outcome.map(|(status, at_ms)| Outcome {
                status: status.into(),
                at_ms,
            }),
            spend_usd: 0.0,
        };
        health(&row, Some(&armed), now)
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
    s.insert_schedule(&schedule("a", None, None))
        .await
        .expect("insert");
    let stats =
        |s: SchedStore| async move { s.schedule("a").await.expect("read").expect("row").stats };
    assert_eq!(stats(s.clone()).await, ScheduleStats::default());

    let hour = 3_600_000;
    let claim = |kind: RunKind, at: i64| {
        let s = s.clone();
        async move {
            match s.claim(&run("a", None, kind), Cursor::Keep, at).await {
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

/// The summary's census (SQL for most rows, the cadence only for possible overdue ones)
/// agrees with each row's own health, and the list's health filter keeps exactly the
/// rows of the healths asked for.
#[tokio::test]
async fn the_census_and_the_health_filter_agree_with_each_row() {
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
        let mut row = schedule(id, armed.then_some(now + 1_000), None);
        row.enabled = *enabled;
        s.insert_schedule(&row).await.expect("insert");
        if *any {
            let at = outcome.map_or(now, |(_, age)| now - age * 1_000 - 1);
            let r = match s
                .claim(&run(id, None, RunKind::Manual), Cursor::Keep, at)
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
    // Every schedule is `every 1s`: 300 s of slack make 301 s overdue, 200 s not.
    let armed = studio_schedule::Armed::Every { period_ms: 1_000 };
    let mut exact = std::collections::BTreeMap::<&str, Vec<String>>::new();
    for row in s.all_schedules().await.expect("all") {
        exact
            .entry(health(&row, Some(&armed), now))
            .or_default()
            .push(row.name.clone());
    }
    let (counts, candidates) = s.health_census(now).await.expect("census");
    let mut census = std::collections::BTreeMap::<&str, usize>::new();
    for (h, n) in &counts {
        let h = exact.keys().copied().find(|k| k == h).unwrap_or("?");
        *census.entry(h).or_default() += usize::try_from(*n).expect("count");
    }
    for row in &candidates {
        *census.entry(health(row, Some(&armed), now)).or_default() += 1;
    }
    let expected: std::collections::BTreeMap<&str, usize> =
        exact.iter().map(|(h, names)| (*h, names.len())).collect();
    assert_eq!(census, expected);
    assert_eq!(
        exact.get("overdue").map(Vec::len),
        Some(2),
        "late-ok and late-bad: {exact:?}"
    );
    for h in super::health::HEALTHS {
        let filter = ScheduleFilter {
            health: &[h],
            limit: 100,
            ..ScheduleFilter::default()
        };
        let mut kept: Vec<String> = s
            .list_schedules(&filter, now)
            .await
            .expect("list")
            .into_iter()
            .filter(|row| health(row, Some(&armed), now) == *h)
            .map(|row| row.name)
            .collect();
        kept.sort();
        let mut want = exact.get(h).cloned().unwrap_or_default();
        want.sort();
        assert_eq!(kept, want, "health filter {h}");
    }
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

/// Not a timed assertion: prints what the summary's census costs when every schedule
/// may be overdue (10,000 hourly crons, each with an outcome two hours old, so each must
/// be armed), against the common case (run with `--release -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn measure_census_when_every_schedule_may_be_overdue() {
    let dir = TempDir::new("census-speed");
    let db = Store::open(&dir.path().join("state.db"))
        .await
        .expect("open");
    let s = SchedStore::new(&db);
    let now = studio_contract::time::now_ms();
    let zone = studio_schedule::Zone::utc();
    let n = 10_000;
    for i in 0..n {
        let mut row = schedule(&format!("s{i:05}"), Some(now + 60_000), None);
        row.spec = r#"{"trigger":{"cron":{"expression":"0 * * * *"}},"action":{"kind":"command","executable":"true"}}"#.into();
        row.trigger_kind = "cron".into();
        s.insert_schedule(&row).await.expect("insert");
    }
    sqlx::query(
        "UPDATE schedules SET has_runs = 1, last_outcome = 'completed', last_outcome_at_ms = ?",
    )
    .bind(now - 2 * 3_600_000)
    .execute(db.writer())
    .await
    .expect("outcomes");
    let census = async |label: &str| {
        let t = std::time::Instant::now();
        let (counts, candidates) = s.health_census(now).await.expect("census");
        let sql = t.elapsed();
        let mut overdue = 0;
        for row in &candidates {
            let armed = super::engine::arm(row, &zone).ok().map(|(_, a)| a);
            overdue += usize::from(health(row, armed.as_ref(), now) == "overdue");
        }
        println!(
            "{label}: {} classified in SQL, {} armed ({overdue} overdue): SQL {:.1} ms, total {:.1} ms",
            counts.iter().map(|(_, c)| c).sum::<i64>(),
            candidates.len(),
            sql.as_secs_f64() * 1e3,
            t.elapsed().as_secs_f64() * 1e3,
        );
    };
    census("every schedule a candidate").await;
    sqlx::query("UPDATE schedules SET last_outcome_at_ms = ?")
        .bind(now - 60_000)
        .execute(db.writer())
        .await
        .expect("fresh outcomes");
    census("fresh evidence everywhere").await;
}

/// Every run list walks an index in the list's own order: no filter, by schedule, by
/// status, with a window and a cursor — never a scan of the table or a sort of it.
#[tokio::test]
async fn run_lists_walk_an_index_in_page_order() {
    let dir = TempDir::new("plans");
    let db = Store::open(&dir.path().join("state.db"))
        .await
        .expect("open");
    let base = RunFilter {
        schedule_id: None,
        status: None,
        since_ms: None,
        until_ms: None,
        before: None,
        limit: 51,
    };
    let cases = [
        ("runs_by_created", base.clone()),
        (
            "runs_by_schedule",
            RunFilter {
                schedule_id: Some("s".into()),
                before: Some((5, "r".into())),
                ..base.clone()
            },
        ),
        (
            "runs_by_status",
            RunFilter {
                status: Some(RunStatus::TimedOut),
                since_ms: Some(1),
                ..base.clone()
            },
        ),
    ];
    for (index, filter) in cases {
        let sql = format!("EXPLAIN QUERY PLAN {}", super::store::runs_query(&filter));
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind("s")
            .bind("timed_out")
            .bind(1_i64)
            .bind(None::<i64>)
            .bind(5_i64)
            .bind("r")
            .bind(51_i64)
            .fetch_all(db.pool())
            .await
            .expect("plan");
        let plan: Vec<String> = rows
            .iter()
            .map(|r| sqlx::Row::try_get::<String, _>(r, "detail").expect("detail"))
            .collect();
        let plan = plan.join(" | ");
        assert!(plan.contains(index), "{index}: {plan}");
        assert!(!plan.contains("TEMP B-TREE"), "no sort: {plan}");
    }
}
