//! Backups in real processes (docs/OPERATIONS.md, "Backups"): `studio backup` while
//! schedules fire every second and tasks are submitted without pause gives two
//! consistent snapshots with a manifest; `studio restore` refuses a running home, a
//! tampered backup and a non-empty destination, and puts the rows back exactly, so a
//! Studio started on the restored home has them.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use sqlx::{Connection, SqliteConnection, sqlite::SqliteConnectOptions};

use super::*;

const TABLES: [&str; 7] = [
    "schedules",
    "runs",
    "run_transitions",
    "tasks",
    "events",
    "admin_events",
    "secrets",
];

/// Row counts of `TABLES` in the database at `path` (opened read-only), after checking
/// its integrity and that no run names a schedule it does not hold.
async fn rows(path: &Path) -> Vec<(String, i64)> {
    let opts = SqliteConnectOptions::new().filename(path).read_only(true);
    let mut db = SqliteConnection::connect_with(&opts).await.expect("open");
    let ok: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut db)
        .await
        .expect("check");
    assert_eq!(ok, "ok", "{}", path.display());
    let orphans: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM runs r WHERE r.schedule_id IS NOT NULL \
         AND NOT EXISTS (SELECT 1 FROM schedules s WHERE s.id = r.schedule_id)",
    )
    .fetch_one(&mut db)
    .await
    .expect("orphans");
    assert_eq!(orphans, 0, "a snapshot holds no run without its schedule");
    let mut out = Vec::new();
    for table in TABLES {
        let n: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
                .fetch_one(&mut db)
                .await
                .expect("count");
        out.push((table.to_owned(), n));
    }
    db.close().await.expect("close");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_restores_to_the_same_rows() {
    if studio_tests::postgres::enabled() {
        // studiod refuses it, naming pg_dump (its unit tests check the answer).
        eprintln!("skipped: a PostgreSQL state is backed up by pg_dump, not `studio backup`");
        return;
    }
    let studio = start(&[]);
    let api = Api::new(&studio);
    for i in 0..5 {
        api.create(&command(&format!("load-{i}"), every("1s"), "true", &[]))
            .await;
    }
    // Tasks without pause while the backup is taken.
    let stop = Arc::new(AtomicBool::new(false));
    let submitter = tokio::spawn({
        let (stop, api) = (stop.clone(), Api::new(&studio));
        async move {
            let body = serde_json::json!({"action": {"kind": "command", "executable": "true"}});
            while !stop.load(Ordering::Relaxed) {
                let _ = api.post("/api/tasks", &body).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let out_dir = TempDir::new("backups");
    let dest = out_dir.path().join("b1");
    let dest_arg = dest.display().to_string();
    let made = studio.cli(&["backup", &dest_arg]);
    assert!(made.status.success(), "{}", text(&made));
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    stop.store(true, Ordering::Relaxed);
    submitter.await.expect("submitter");

    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dest.join("backup.json")).expect("manifest"))
            .expect("json");
    let files: Vec<&str> = manifest["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|f| f["file"].as_str())
        .collect();
    assert_eq!(files, ["state.db", "app.db"], "{manifest}");
    let backed = rows(&dest.join("state.db")).await;
    let runs = backed.iter().find(|(t, _)| t == "runs").map_or(0, |r| r.1);
    assert!(runs > 0, "taken under load: {backed:?}");
    // Into a directory that holds something: refused, exit 2.
    let again = studio.cli(&["backup", &dest_arg]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    // Into a running home: refused.
    let busy = studio.cli(&["restore", &dest_arg]);
    assert_eq!(busy.status.code(), Some(2), "{}", text(&busy));
    assert!(text(&busy).contains("stop it first"), "{}", text(&busy));

    // A fresh home: restored row for row; a Studio started on it has the schedules.
    let fresh = TempDir::new("restored");
    let fresh_arg = fresh.path().display().to_string();
    let restore = |src: &str| {
        studio_tests::studio_cmd(&["--home", &fresh_arg, "restore", src], &[], None)
            .output()
            .expect("studio restore")
    };
    // A tampered copy is refused and nothing is put in place.
    let tampered = out_dir.path().join("tampered");
    std::fs::create_dir_all(&tampered).expect("dir");
    for f in ["state.db", "app.db", "backup.json"] {
        std::fs::copy(dest.join(f), tampered.join(f)).expect("copy");
    }
    let mut db = std::fs::read(tampered.join("app.db")).expect("read");
    let last = db.len() - 1;
    db[last] ^= 0xff;
    std::fs::write(tampered.join("app.db"), db).expect("write");
    let refused = restore(&tampered.display().to_string());
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(!fresh.path().join("state.db").exists());
    let restored = restore(&dest_arg);
    assert!(restored.status.success(), "{}", text(&restored));
    assert_eq!(rows(&fresh.path().join("state.db")).await, backed);
    let restarted = Studio::start_in(fresh, &[("STUDIO_COMMAND_ALLOWLIST", ALLOW)]);
    let api = Api::new(&restarted);
    let listed: studio_api::SchedulePage = api.get("/api/schedules").await.expect(200);
    let mut names: Vec<String> = listed.schedules.iter().map(|s| s.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["load-0", "load-1", "load-2", "load-3", "load-4"]);
}
