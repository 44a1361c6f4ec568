//! Old runs written straight into a stopped home's `state.db`, for what needs many of
//! them faster than a scheduler makes them (retention's test and benchmark).

use std::path::Path;

use sqlx::{Connection, SqliteConnection, sqlite::SqliteConnectOptions};

/// Writes `n` finished runs of `schedule` (ids `old-000000`…), made `age_days` ago one
/// millisecond apart, each with two transitions; every tenth failed. The first
/// `with_logs` get a log folder holding one line.
pub async fn old_runs(home: &Path, schedule: &str, n: i64, with_logs: i64, age_days: i64) {
    let opts = SqliteConnectOptions::new().filename(home.join("state.db"));
    let mut db = SqliteConnection::connect_with(&opts).await.expect("open");
    let old = jiff::Timestamp::now().as_millisecond() - age_days * 86_400_000;
    let mut tx = db.begin().await.expect("begin");
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?1 - 1) \
         INSERT INTO runs (id, schedule_id, schedule_name, kind, status, action, \
         created_at_ms, dispatched_at_ms, finished_at_ms, exit_code, stdout_bytes, \
         stderr_bytes, error_line) \
         SELECT printf('old-%06d', i), ?2, 'quiet', 'scheduled', \
         CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'completed' END, '{}', ?3 + i, ?3 + i, \
         ?3 + i + 5, CASE WHEN i % 10 = 0 THEN 1 ELSE 0 END, 12, 0, \
         CASE WHEN i % 10 = 0 THEN 'exit 1' END FROM n",
    )
    .bind(n)
    .bind(schedule)
    .bind(old)
    .execute(&mut *tx)
    .await
    .expect("runs");
    sqlx::query(
        "INSERT INTO run_transitions (run_id, from_status, to_status, reason, at_ms) \
         SELECT id, NULL, 'running', 'dispatched', created_at_ms FROM runs \
         WHERE id LIKE 'old-%' UNION ALL \
         SELECT id, 'running', status, 'exited', finished_at_ms FROM runs WHERE id LIKE 'old-%'",
    )
    .execute(&mut *tx)
    .await
    .expect("transitions");
    tx.commit().await.expect("commit");
    db.close().await.expect("close");
    for i in 0..with_logs {
        let dir = home.join("runs").join(format!("old-{i:06}"));
        std::fs::create_dir_all(&dir).expect("folder");
        std::fs::write(dir.join("stdout.log"), format!("line of run {i}\n")).expect("log");
    }
}
