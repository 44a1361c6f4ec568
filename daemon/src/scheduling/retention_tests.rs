//! Retention against a real SQLite file and real run folders: what a pass prunes and
//! keeps, its archives, the evidence checkpoint, restores, and what an archive handed to
//! a restore may not reach.

use std::{path::Path, sync::Arc};

use serde_json::json;
use sqlx::AnyPool;
use studio_api::types::{RetentionPolicy, RunsRetention};

use super::{Scheduler, SchedulerConfig, retention::RetentionError, store::SchedStore};
use crate::{audit::Actor, testing::TempDir};

const DAY: i64 = 86_400_000;

struct Home {
    dir: TempDir,
    db: AnyPool,
    /// Whether the store is a PostgreSQL database (`STUDIO_TEST_DATABASE_URL`).
    postgres: bool,
    s: Arc<Scheduler>,
}

async fn home(label: &str, config: SchedulerConfig) -> Home {
    let dir = TempDir::new(label);
    let store = crate::testing::open_store(&dir).await;
    let s = Scheduler::new(
        SchedStore::with_test_key(&store),
        config,
        studio_schedule::Zone::utc(),
        dir.path().join("runs"),
        dir.path().join("run"),
        studio_contract::lifecycle::Shutdown::new(),
        None,
    )
    .await
    .expect("scheduler");
    Home {
        db: store.writer().clone(),
        postgres: store.dialect() == studio_store::Dialect::Postgres,
        dir,
        s,
    }
}

fn admin() -> Actor {
    Actor {
        principal: "daemon".into(),
        role: studio_contract::role::Role::Admin,
        origin: None,
        epoch: "e".into(),
    }
}

impl Home {
    async fn exec(&self, sql: &str) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&self.db)
            .await
            .expect(sql);
    }

    async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(&self.db)
            .await
            .expect(sql)
    }

    async fn schedule(&self, id: &str, spec: &str) {
        sqlx::query(
            "INSERT INTO schedules (id, name, spec, enabled, trigger_kind, anchor_ms, \
             created_at_ms, updated_at_ms, last_fired_at_ms) \
             VALUES ($1, $2, $3, 1, 'every', 0, 0, 0, 1000)",
        )
        .bind(id)
        .bind(format!("test/{id}"))
        .bind(spec)
        .execute(&self.db)
        .await
        .expect("schedule");
    }

    /// A finished run of `schedule` made at `at`, with two transitions and a log folder.
    async fn run(&self, id: &str, schedule: Option<&str>, status: &str, at: i64) {
        sqlx::query(
            "INSERT INTO runs (id, schedule_id, schedule_name, kind, status, action, \
             created_at_ms, finished_at_ms, stdout_bytes, stderr_bytes, cost_usd) \
             VALUES ($1, $2, 'test/' || $2, 'scheduled', $3, '{}', $4, $4 + 500, 6, 0, 0.25)",
        )
        .bind(id)
        .bind(schedule)
        .bind(status)
        .bind(at)
        .execute(&self.db)
        .await
        .expect("run");
        for (from, to) in [(None, "running"), (Some("running"), status)] {
            sqlx::query(
                "INSERT INTO run_transitions (run_id, from_status, to_status, at_ms) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(id)
            .bind(from)
            .bind(to)
            .bind(at)
            .execute(&self.db)
            .await
            .expect("transition");
        }
        let folder = self.dir.path().join("runs").join(id);
        std::fs::create_dir_all(&folder).expect("folder");
        std::fs::write(folder.join("stdout.log"), format!("out {id}\n")).expect("log");
    }

    async fn policy(&self, policy: RetentionPolicy) {
        self.s
            .set_retention_policy(&policy, &admin())
            .await
            .expect("policy");
    }

    fn archives(&self, dir: &Path) -> Vec<std::path::PathBuf> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        files
    }
}

fn keep(max_age: Option<&str>, keep_last: Option<u32>) -> RetentionPolicy {
    RetentionPolicy {
        runs: Some(RunsRetention {
            max_age: max_age.map(str::to_owned),
            keep_last,
        }),
        ..RetentionPolicy::default()
    }
}

const SPEC: &str = r#"{"trigger":{"every":"1h"},"action":{"kind":"command","executable":"true"}}"#;

#[tokio::test]
async fn a_pass_prunes_in_chunks_keeps_the_last_runs_and_archives_each_chunk() {
    let h = home("ret-chunks", SchedulerConfig::default()).await;
    h.schedule("a", SPEC).await;
    h.schedule("b", SPEC).await;
    let old = studio_contract::time::now_ms() - 10 * DAY;
    for i in 0..250 {
        h.run(&format!("a-{i:04}"), Some("a"), "completed", old + i)
            .await;
    }
    for i in 0..5 {
        h.run(&format!("b-{i:04}"), Some("b"), "failed", old + i)
            .await;
    }
    // Still running, however old: never pruned.
    h.exec(&format!(
        "INSERT INTO runs (id, schedule_id, kind, status, action, created_at_ms) \
         VALUES ('a-live', 'a', 'scheduled', 'running', '{{}}', {old})"
    ))
    .await;
    // A kept follow-up names a pruned run as its parent: the reference is nulled.
    h.exec(
        "UPDATE runs SET chain_parent_id = 'a-0000' WHERE id = 'a-0249'; \
         INSERT INTO notify_outbox (id, endpoint, event, run_id, payload, status, \
         created_at_ms, updated_at_ms) VALUES ('n1', 'ops', 'failed', 'a-0001', '{}', \
         'pending', 0, 0)",
    )
    .await;
    let counts_before = h
        .count("SELECT CAST(COALESCE(SUM(runs), 0) AS BIGINT) FROM run_counts_hourly")
        .await;
    let health_before = h.s.reads().schedule("a").await.expect("read").expect("row");
    h.policy(keep(Some("1d"), Some(10))).await;
    let dir = h.dir.path().join("archives");
    let pass =
        h.s.retention_pass("request", Some(&dir.display().to_string()))
            .await
            .expect("pass");

    assert_eq!(pass.outcome, "completed", "{:?}", pass.error);
    assert_eq!(pass.pruned.get("runs"), Some(&240));
    assert_eq!(pass.pruned.get("run_transitions"), Some(&480));
    assert_eq!(pass.pruned.get("log_dirs"), Some(&240));
    assert_eq!(
        (pass.chunks, pass.archives),
        (3, 3),
        "240 runs in chunks of 100"
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM runs WHERE schedule_id = 'a'")
            .await,
        11
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM runs WHERE schedule_id = 'b'")
            .await,
        5,
        "b has fewer runs than keep_last"
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM runs WHERE id = 'a-live'")
            .await,
        1
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM runs WHERE chain_parent_id IS NOT NULL")
            .await,
        0
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM notify_outbox WHERE run_id IS NULL")
            .await,
        1
    );
    assert!(!h.dir.path().join("runs/a-0000").exists());
    assert!(h.dir.path().join("runs/a-0249").exists());
    // The rollups and the schedule's health keep what the pruned runs told.
    assert_eq!(
        h.count("SELECT CAST(COALESCE(SUM(runs), 0) AS BIGINT) FROM run_counts_hourly")
            .await,
        counts_before
    );
    let after = h.s.reads().schedule("a").await.expect("read").expect("row");
    assert_eq!(after.stats, health_before.stats);
    let now = studio_contract::time::now_ms();
    assert_ne!(super::health::health(&after, now), "never-fired");

    let files = h.archives(&dir);
    assert_eq!(files.len(), 3);
    let mut archived = 0;
    for file in &files {
        let manifest = studio_archive::verify(file, None).expect("verifies");
        archived += manifest.tables.get("runs").copied().unwrap_or(0);
    }
    assert_eq!(archived, 240);
    // The pass and its checkpoint are in the audit trail and in readiness's marks (no
    // checkpoint on PostgreSQL, which checkpoints its own log).
    assert_eq!(
        h.count("SELECT COUNT(*) FROM admin_events WHERE kind IN ('retention_pass', 'wal_checkpoint') AND principal_id IS NULL").await,
        if h.postgres { 1 } else { 2 }
    );
    let (last_pass, last_checkpoint) = h.s.reads().retention_marks().await.expect("marks");
    assert!(last_pass.is_some() && last_checkpoint.is_some() != h.postgres);
    assert!(h.postgres || pass.checkpoint.is_some_and(|c| !c.busy));
}

#[tokio::test]
async fn a_restore_puts_a_chunk_back_once_and_refuses_a_second_time() {
    let h = home("ret-restore", SchedulerConfig::default()).await;
    h.schedule("a", SPEC).await;
    let old = studio_contract::time::now_ms() - 10 * DAY;
    for i in 0..30 {
        h.run(&format!("r-{i:03}"), Some("a"), "completed", old + i)
            .await;
    }
    h.exec("UPDATE runs SET chain_parent_id = 'r-000' WHERE id = 'r-029'")
        .await;
    let snapshot =
        "SELECT COUNT(*) || ':' || CAST(COALESCE(SUM(runs), 0) AS BIGINT) FROM run_counts_hourly";
    let counts: String = sqlx::query_scalar(snapshot)
        .fetch_one(&h.db)
        .await
        .expect("counts");
    let spend = h
        .count("SELECT CAST(spend_usd * 100 AS INTEGER) FROM schedules WHERE id = 'a'")
        .await;
    h.policy(keep(None, Some(1))).await;
    let dir = h.dir.path().join("archives");
    let pass =
        h.s.retention_pass("request", Some(&dir.display().to_string()))
            .await
            .expect("pass");
    assert_eq!(pass.pruned.get("runs"), Some(&29));
    let file = h.archives(&dir).remove(0);

    let restored = h.s.restore_archive(&file, &admin()).await.expect("restore");
    assert_eq!(restored.kind, "runs");
    assert_eq!(restored.rows.get("runs"), Some(&29));
    assert_eq!(restored.rows.get("run_transitions"), Some(&58));
    assert_eq!(restored.preimages.get("runs"), Some(&1));
    assert_eq!(restored.log_files, 29);
    assert_eq!(h.count("SELECT COUNT(*) FROM runs").await, 30);
    assert_eq!(
        h.count("SELECT COUNT(*) FROM runs WHERE id = 'r-029' AND chain_parent_id = 'r-000'")
            .await,
        1,
        "the nulled reference is set back"
    );
    assert_eq!(
        std::fs::read_to_string(h.dir.path().join("runs/r-007/stdout.log")).expect("log back"),
        "out r-007\n"
    );
    let after: String = sqlx::query_scalar(snapshot)
        .fetch_one(&h.db)
        .await
        .expect("counts");
    assert_eq!(after, counts, "a restore does not count its runs twice");
    assert_eq!(
        h.count("SELECT CAST(spend_usd * 100 AS INTEGER) FROM schedules WHERE id = 'a'")
            .await,
        spend
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM admin_events WHERE kind = 'archive_restored'")
            .await,
        1
    );

    // Twice: refused, and nothing moves (rows nor folders).
    std::fs::write(h.dir.path().join("runs/r-007/stdout.log"), "changed").expect("write");
    let again = h.s.restore_archive(&file, &admin()).await;
    assert!(matches!(again, Err(RetentionError::Exists(_))), "{again:?}");
    assert_eq!(h.count("SELECT COUNT(*) FROM runs").await, 30);
    assert_eq!(
        std::fs::read_to_string(h.dir.path().join("runs/r-007/stdout.log")).expect("log"),
        "changed"
    );
    // Rows there without their folders: refused in the transaction, no folder left.
    std::fs::remove_dir_all(h.dir.path().join("runs")).expect("clear folders");
    let again = h.s.restore_archive(&file, &admin()).await;
    assert!(matches!(again, Err(RetentionError::Exists(_))), "{again:?}");
    let left: Vec<_> = std::fs::read_dir(h.dir.path().join("runs"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "no staged folder is left: {left:?}");
}

#[tokio::test]
async fn an_archive_that_cannot_be_written_stops_the_pass_before_any_delete() {
    let h = home("ret-fail", SchedulerConfig::default()).await;
    h.schedule("a", SPEC).await;
    let old = studio_contract::time::now_ms() - 10 * DAY;
    for i in 0..20 {
        h.run(&format!("f-{i:03}"), Some("a"), "completed", old + i)
            .await;
    }
    h.policy(keep(Some("1d"), None)).await;
    // A directory that cannot be made: under a regular file.
    let file = h.dir.path().join("a-file");
    std::fs::write(&file, "x").expect("file");
    let refused =
        h.s.retention_pass(
            "request",
            Some(&file.join("archives").display().to_string()),
        )
        .await;
    assert!(
        matches!(refused, Err(RetentionError::Invalid(_))),
        "{refused:?}"
    );
    assert_eq!(h.count("SELECT COUNT(*) FROM runs").await, 20);

    // A directory that vanishes under the pass: the chunk's archive fails, its rows stay.
    let dir = h.dir.path().join("gone");
    let policy = RetentionPolicy {
        archive_dir: Some(dir.display().to_string()),
        ..keep(Some("1d"), None)
    };
    h.policy(policy).await;
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::remove_dir(&dir).expect("remove");
    std::fs::write(&dir, "now a file").expect("file");
    let failed = h.s.retention_pass("clock", None).await;
    assert!(
        matches!(failed, Err(RetentionError::Invalid(_))),
        "{failed:?}"
    );
    assert_eq!(h.count("SELECT COUNT(*) FROM runs").await, 20);
}

#[tokio::test]
async fn evidence_is_pruned_behind_a_checkpoint_and_the_chain_goes_on() {
    let h = home("ret-evidence", SchedulerConfig::default()).await;
    h.schedule("a", SPEC).await;
    let old = studio_contract::time::now_ms() - 10 * DAY;
    for i in 0..150 {
        let id = format!("e-{i:03}");
        h.run(&id, Some("a"), "completed", old + i).await;
        h.s.reads()
            .seal_test_evidence(&id, old + i)
            .await
            .expect("seal");
    }
    // The log may not be cut ahead of its checkpoint, by anyone.
    let refused = sqlx::query("DELETE FROM evidence WHERE seq = 1")
        .execute(&h.db)
        .await;
    assert!(refused.is_err(), "evidence stays append-only");

    h.policy(keep(Some("1d"), Some(20))).await;
    let dir = h.dir.path().join("archives");
    let pass =
        h.s.retention_pass("request", Some(&dir.display().to_string()))
            .await
            .expect("pass");
    // Runs e-000..e-129 are gone, so their 130 rows form the prefix that goes.
    assert_eq!(pass.pruned.get("evidence"), Some(&130), "{pass:?}");
    assert_eq!(h.count("SELECT MIN(seq) FROM evidence").await, 131);
    assert_eq!(
        h.count("SELECT through_seq FROM evidence_checkpoint").await,
        130
    );
    // The checkpoint names a stored row's hash and only moves on.
    assert!(
        sqlx::query("UPDATE evidence_checkpoint SET through_seq = 10")
            .execute(&h.db)
            .await
            .is_err()
    );
    assert!(
        sqlx::query("DELETE FROM evidence_checkpoint")
            .execute(&h.db)
            .await
            .is_err()
    );
    // New rows continue the chain; the live export starts from the checkpoint and
    // verifies, and the archives chain up to it.
    h.s.reads()
        .seal_test_evidence("e-149", studio_contract::time::now_ms())
        .await
        .expect("seal");
    let (previous, rows) = h.s.reads().evidence_since(None).await.expect("export");
    assert_eq!(rows.first().map(|r| r.entry.seq), Some(131));
    let key = studio_evidence::Key::new(super::store::TEST_EVIDENCE_KEY);
    let live = studio_evidence::verify(previous, &rows, Some(&key)).expect("live rows verify");
    assert_eq!(live.rows, 21);
    let mut head = studio_evidence::GENESIS;
    let mut evidence_archives = 0;
    for file in h.archives(&dir) {
        let mut archive = studio_archive::Archive::open(&file).expect("open");
        if let Some((span, sealed)) = archive.evidence().expect("evidence") {
            assert_eq!(
                studio_evidence::digest_of(&span.previous_chain_sha256),
                Some(head)
            );
            head = studio_evidence::verify(head, &sealed, Some(&key))
                .expect("archived rows verify")
                .head;
            evidence_archives += 1;
        }
    }
    assert_eq!(evidence_archives, 2, "130 rows in chunks of 100");
    assert_eq!(head, previous, "the archives end where the live log begins");
    // An evidence archive is verified, never restored.
    let evidence_file = h
        .archives(&dir)
        .into_iter()
        .find(|f| {
            f.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("evidence"))
        })
        .expect("an evidence archive");
    assert!(matches!(
        h.s.restore_archive(&evidence_file, &admin()).await,
        Err(RetentionError::Invalid(_))
    ));
}

#[tokio::test]
async fn tasks_go_whole_and_notifications_and_logs_by_their_own_rules() {
    let h = home("ret-other", SchedulerConfig::default()).await;
    let now = studio_contract::time::now_ms();
    let old = now - 10 * DAY;
    for (task, status) in [("t1", "completed"), ("t2", "failed"), ("t3", "running")] {
        h.exec(&format!(
            "INSERT INTO tasks (id, spec, spec_sha256, status, attempts, created_at_ms, \
             updated_at_ms, finished_at_ms) VALUES ('{task}', '{{}}', 'x', '{status}', 2, \
             {old}, {old}, {old})"
        ))
        .await;
        for attempt in 1..=2 {
            let run_status = if status == "running" && attempt == 2 {
                "running"
            } else {
                "failed"
            };
            h.exec(&format!(
                "INSERT INTO runs (id, task_id, kind, status, action, created_at_ms, \
                 finished_at_ms, attempt) VALUES ('{task}-{attempt}', '{task}', 'task', \
                 '{run_status}', '{{}}', {old}, {old}, {attempt})"
            ))
            .await;
        }
    }
    for (id, status, at) in [
        ("d-old", "delivered", old),
        ("d-new", "delivered", now),
        ("x-old", "dead", old),
        ("p-old", "pending", old),
    ] {
        h.exec(&format!(
            "INSERT INTO notify_outbox (id, endpoint, event, payload, status, created_at_ms, \
             updated_at_ms) VALUES ('{id}', 'ops', 'failed', '{{}}', '{status}', {at}, {at}); \
             INSERT INTO notify_attempts (delivery_id, n, at_ms, took_ms, status) \
             VALUES ('{id}', 1, {at}, 3, 200)"
        ))
        .await;
    }
    let policy = RetentionPolicy {
        notifications: Some(studio_api::types::NotificationsRetention {
            delivered: Some("7d".into()),
            dead: Some("30d".into()),
        }),
        ..keep(Some("1d"), None)
    };
    h.policy(policy).await;
    let pass = h.s.retention_pass("request", None).await.expect("pass");
    assert_eq!(pass.archives, 0, "no directory: nothing archived");
    assert_eq!(pass.pruned.get("tasks"), Some(&2));
    assert_eq!(pass.pruned.get("runs"), Some(&4));
    assert_eq!(
        h.count("SELECT COUNT(*) FROM runs WHERE task_id = 't3'")
            .await,
        2,
        "a task that has not ended keeps all its attempts"
    );
    assert_eq!(pass.pruned.get("notify_outbox"), Some(&1));
    let left: Vec<String> = sqlx::query_scalar("SELECT id FROM notify_outbox ORDER BY id")
        .fetch_all(&h.db)
        .await
        .expect("left");
    assert_eq!(
        left.join(","),
        "d-new,p-old,x-old",
        "dead ones keep 30 days; pending always"
    );
    assert_eq!(h.count("SELECT COUNT(*) FROM notify_attempts").await, 3);
}

#[tokio::test]
async fn the_log_cap_prunes_the_oldest_folders_and_keeps_the_runs() {
    let h = home("ret-logs", SchedulerConfig::default()).await;
    h.schedule("a", SPEC).await;
    let old = studio_contract::time::now_ms() - DAY;
    for i in 0..10 {
        h.run(&format!("l-{i}"), Some("a"), "completed", old + i)
            .await;
    }
    // Each run says 600 KiB: ten are 6000 KiB, two over a 5 MiB cap.
    h.exec("UPDATE runs SET stdout_bytes = 614400").await;
    let policy = RetentionPolicy {
        logs: Some(studio_api::types::LogsRetention {
            max_bytes: Some(5 * 1024 * 1024),
        }),
        ..RetentionPolicy::default()
    };
    h.policy(policy).await;
    let dir = h.dir.path().join("archives");
    let pass =
        h.s.retention_pass("request", Some(&dir.display().to_string()))
            .await
            .expect("pass");
    assert_eq!(pass.pruned.get("log_runs"), Some(&2), "{pass:?}");
    assert_eq!(h.count("SELECT COUNT(*) FROM runs").await, 10);
    assert_eq!(
        h.count(
            "SELECT COUNT(*) FROM runs WHERE logs_pruned_at_ms IS NOT NULL AND id IN ('l-0', 'l-1')"
        )
        .await,
        2
    );
    assert!(!h.dir.path().join("runs/l-0").exists());
    assert!(h.dir.path().join("runs/l-2").exists());
    let file = h.archives(&dir).remove(0);
    let restored = h.s.restore_archive(&file, &admin()).await.expect("restore");
    assert_eq!((restored.kind.as_str(), restored.log_files), ("logs", 2));
    assert_eq!(
        h.count("SELECT COUNT(*) FROM runs WHERE logs_pruned_at_ms IS NOT NULL")
            .await,
        0
    );
    assert!(h.dir.path().join("runs/l-0/stdout.log").exists());
}

#[tokio::test]
async fn a_policy_from_the_configuration_wins_and_the_api_cannot_change_it() {
    let config = SchedulerConfig {
        retention: Some(keep(Some("30d"), Some(100))),
        ..SchedulerConfig::default()
    };
    let h = home("ret-config", config).await;
    let (policy, row) = h.s.retention_policy().await.expect("policy");
    assert_eq!(policy, keep(Some("30d"), Some(100)));
    assert_eq!(row.map(|r| r.source), Some("config".to_owned()));
    let refused =
        h.s.set_retention_policy(&keep(None, Some(1)), &admin())
            .await;
    assert!(
        matches!(refused, Err(RetentionError::Invalid(_))),
        "{refused:?}"
    );
}

#[tokio::test]
async fn one_pass_at_a_time_and_a_restore_waits_for_none() {
    let h = home("ret-busy", SchedulerConfig::default()).await;
    let held = h.s.retention_lock.try_lock().expect("free");
    assert!(matches!(
        h.s.retention_pass("request", None).await,
        Err(RetentionError::Busy)
    ));
    assert!(matches!(
        h.s.restore_archive(Path::new("/nonexistent.zip"), &admin())
            .await,
        Err(RetentionError::Busy)
    ));
    drop(held);
}

#[tokio::test]
async fn a_hostile_archive_reaches_no_other_table_column_or_path() {
    let h = home("ret-hostile", SchedulerConfig::default()).await;
    let write = |tables: Vec<(String, super::store::Rows)>,
                 preimages: Vec<(String, super::store::Rows)>| {
        let dir = h.dir.path().join("hostile");
        std::fs::create_dir_all(&dir).expect("dir");
        studio_archive::write(
            &dir,
            &studio_archive::Chunk {
                kind: studio_archive::Kind::Runs,
                created_at_ms: 0,
                studio_version: "0".into(),
                tables,
                preimages,
                logs: Vec::new(),
                evidence: None,
            },
        )
        .expect("an archive")
        .path
    };
    let row = |v: serde_json::Value| v.as_object().cloned().expect("an object");
    // Another table, a column the table lacks, a column a prune never changes.
    let cases = [
        write(
            vec![("principals".into(), vec![row(json!({"id": "x"}))])],
            Vec::new(),
        ),
        write(
            vec![(
                "runs".into(),
                vec![row(
                    json!({"id": "x", "status) VALUES (1); DROP TABLE runs; --": 1}),
                )],
            )],
            Vec::new(),
        ),
        write(
            Vec::new(),
            vec![(
                "runs".into(),
                vec![row(json!({"id": "x", "status": "completed"}))],
            )],
        ),
        write(
            Vec::new(),
            vec![("secrets".into(), vec![row(json!({"id": "x", "name": "y"}))])],
        ),
        // A run whose id is a path: a later prune would remove that path's folder.
        write(
            vec![(
                "runs".into(),
                vec![row(
                    json!({"id": "../../escape", "kind": "manual", "status": "completed",
                    "action": "{}", "created_at_ms": 0}),
                )],
            )],
            Vec::new(),
        ),
    ];
    for file in &cases {
        let refused = h.s.restore_archive(file, &admin()).await;
        assert!(
            matches!(refused, Err(RetentionError::Invalid(_))),
            "{refused:?}"
        );
    }
    assert_eq!(h.count("SELECT COUNT(*) FROM runs").await, 0);
    assert!(
        h.s.restore_archive(Path::new("relative.zip"), &admin())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn folders_left_by_a_stopped_pass_or_restore_are_swept_once_old() {
    let h = home("ret-sweep", SchedulerConfig::default()).await;
    h.schedule("a", SPEC).await;
    let now = studio_contract::time::now_ms();
    h.run("kept", Some("a"), "completed", now).await;
    let runs = h.dir.path().join("runs");
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7_200);
    for name in ["orphan", ".restore-x", "young-orphan", "kept"] {
        std::fs::create_dir_all(runs.join(name)).expect("folder");
        if name != "young-orphan" {
            std::fs::File::open(runs.join(name))
                .and_then(|d| d.set_modified(two_hours_ago))
                .expect("age the folder");
        }
    }
    let pass = h.s.retention_pass("request", None).await.expect("pass");
    assert_eq!(pass.pruned.get("log_dirs"), Some(&1), "{pass:?}");
    assert!(!runs.join("orphan").exists());
    assert!(!runs.join(".restore-x").exists());
    assert!(
        runs.join("young-orphan").exists(),
        "its run may be on its way"
    );
    assert!(runs.join("kept").exists(), "its run is there");
}

#[tokio::test]
async fn a_run_id_that_names_a_path_never_reaches_a_folder_outside_runs() {
    let h = home("ret-path", SchedulerConfig::default()).await;
    h.schedule("a", SPEC).await;
    let old = studio_contract::time::now_ms() - 10 * DAY;
    let outside = h.dir.path().join("outside");
    std::fs::create_dir_all(&outside).expect("folder");
    std::fs::write(outside.join("keep.txt"), "mine").expect("file");
    h.exec(&format!(
        "INSERT INTO runs (id, schedule_id, kind, status, action, created_at_ms, finished_at_ms) \
         VALUES ('../outside', 'a', 'scheduled', 'completed', '{{}}', {old}, {old})"
    ))
    .await;
    h.policy(keep(Some("1d"), None)).await;
    let dir = h.dir.path().join("archives");
    let pass =
        h.s.retention_pass("request", Some(&dir.display().to_string()))
            .await
            .expect("pass");
    assert_eq!(pass.pruned.get("runs"), Some(&1), "{pass:?}");
    assert!(!pass.pruned.contains_key("log_dirs"), "{pass:?}");
    assert!(
        outside.join("keep.txt").exists(),
        "nothing outside runs/ is touched"
    );
}

#[tokio::test]
async fn an_archive_failing_mid_pass_keeps_its_chunk_and_the_chunks_before_stay_pruned() {
    let h = home("ret-midway", SchedulerConfig::default()).await;
    h.schedule("a", SPEC).await;
    let old = studio_contract::time::now_ms() - 10 * DAY;
    for i in 0..150 {
        let id = format!("m-{i:03}");
        h.run(&id, Some("a"), "completed", old + i).await;
        h.s.reads()
            .seal_test_evidence(&id, old + i)
            .await
            .expect("seal");
    }
    // Row 120 edited behind the log's back: its chunk's archive cannot verify.
    h.exec(if h.postgres {
        "DROP TRIGGER evidence_no_update ON evidence; \
         UPDATE evidence SET content = '{\"edited\":true}' WHERE seq = 120"
    } else {
        "DROP TRIGGER evidence_no_update; \
         UPDATE evidence SET content = '{\"edited\":true}' WHERE seq = 120"
    })
    .await;
    h.policy(keep(Some("1d"), None)).await;
    let dir = h.dir.path().join("archives");
    let pass =
        h.s.retention_pass("request", Some(&dir.display().to_string()))
            .await
            .expect("the pass is recorded");
    assert_eq!(pass.outcome, "failed", "{pass:?}");
    assert!(
        pass.error.as_deref().is_some_and(|e| e.contains("archive")),
        "{pass:?}"
    );
    // The runs' two chunks and the first evidence chunk committed; the second did not.
    assert_eq!(pass.pruned.get("runs"), Some(&150));
    assert_eq!(pass.pruned.get("evidence"), Some(&100));
    assert_eq!(h.count("SELECT MIN(seq) FROM evidence").await, 101);
    assert_eq!(h.count("SELECT COUNT(*) FROM evidence").await, 50);
    // Three archives, each whole; no temporary file is left.
    let files = h.archives(&dir);
    assert_eq!(files.len(), 3, "{files:?}");
    for file in &files {
        studio_archive::verify(file, None).expect("what was archived verifies");
    }
    assert!(
        files.iter().all(|f| !f.to_string_lossy().ends_with(".tmp")),
        "{files:?}"
    );
}
