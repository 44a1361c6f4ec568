//! studio-ui-bench: the cockpit's figures for `docs/PERFORMANCE.md`.
//!
//! `cargo run --release -p studio-tests --bin studio-ui-bench [-- --quick] [--hold]`
//!
//! `--hold` keeps the large home running after its figures, printing its addresses,
//! cookie and token, until interrupted: a home to profile a page on.
//!
//! A real `studio up` with 10 schedules and 10 runs, then one with 10,000 schedules
//! (created through the API) and 100,000 runs; on each, the time for a paired browser's
//! request (cookie, through studio-app and its render) of the schedules, runs and
//! overview pages and the attention queue's JSON, p50/p99 over 50 sequential requests
//! each on one keep-alive connection, and the bytes each page sends.
//!
//! The runs: 1,000 real manual runs (`true`) go through the API and the runner; the rest
//! are copies of those rows written into `state.db` while Studio is stopped (a spawn per
//! run would take the whole machine for many minutes), with creation times spread over
//! the last 28 hours, so the listing pages through the same indexes real rows use.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use sqlx::{Connection, SqliteConnection};
use studio_api::{PairRequest, RunPage, SchedulePage};
use studio_tests::{
    Studio, admission_cookie,
    api::{command_spec, cron},
    http,
};

const REQUESTS: usize = 50;

struct Sizes {
    schedules: usize,
    real_runs: usize,
    runs: usize,
}

/// The pages measured, and the marker that counts a page's rows.
const PAGES: &[(&str, &str)] = &[
    ("/schedules", "data-testid=\"schedule-row\""),
    ("/schedules?health=failing", "data-testid=\"schedule-row\""),
    ("/runs", "data-testid=\"run-row\""),
    ("/runs?status=failed", "data-testid=\"run-row\""),
    ("/runs?status=timed_out", "data-testid=\"run-row\""),
    ("/runs?schedule_name=bench-00001", "data-testid=\"run-row\""),
    ("/", "data-testid=\"health-counts\""),
    ("/api/app/attention", "\"kind\":"),
];

/// The daemon's answers behind the heaviest pages, asked directly (bearer token, no app):
/// what a page's time owes to studiod rather than to studio-app's render.
const DAEMON_CALLS: &[(&str, &str)] = &[
    ("/api/schedules?limit=50", "\"recent_runs\":"),
    ("/api/schedules?limit=50&health=failing", "\"recent_runs\":"),
];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let hold = std::env::args().any(|a| a == "--hold");
    let large = if quick {
        Sizes {
            schedules: 1_000,
            real_runs: 200,
            runs: 10_000,
        }
    } else {
        Sizes {
            schedules: 10_000,
            real_runs: 1_000,
            runs: 100_000,
        }
    };
    let small = Sizes {
        schedules: 10,
        real_runs: 10,
        runs: 10,
    };
    println!("# studio-ui-bench\n");
    println!(
        "{REQUESTS} sequential requests per page with the admission cookie, one keep-alive \
         connection; the same pages on a small home and on a large one.\n"
    );
    println!("| page | home | p50 ms | p99 ms | bytes | rows shown |");
    println!("|---|---|---|---|---|---|");
    bench(&small, false).await;
    bench(&large, hold).await;
}

/// Builds a home of `sizes`, then measures every page on it.
async fn bench(sizes: &Sizes, hold: bool) {
    let env = [
        ("STUDIO_COMMAND_ALLOWLIST", "true"),
        ("STUDIO_MAX_CONCURRENT_RUNS", "16"),
    ];
    let studio = Studio::start_with(&env);
    let t = Instant::now();
    create_schedules(&studio, sizes.schedules).await;
    eprintln!(
        "{} schedules created in {:.1} s",
        sizes.schedules,
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    real_runs(&studio, sizes.real_runs).await;
    eprintln!(
        "{} real runs finished in {:.1} s",
        sizes.real_runs,
        t.elapsed().as_secs_f64()
    );

    let home = studio.stop_keep_home(Duration::from_secs(15));
    let t = Instant::now();
    let total = copy_runs(&home.path().join("state.db"), sizes.runs).await;
    eprintln!(
        "runs table holds {total} rows ({:.1} s to copy)",
        t.elapsed().as_secs_f64()
    );
    let studio = Studio::start_in(home, &env);
    let cookie = pair(&studio).await;
    let label = format!("{} schedules, {total} runs", sizes.schedules);
    for (path, row) in PAGES {
        let (p50, p99, bytes, rows) = measure(path, row, |c| {
            c.get(studio.app_url(path)).header("cookie", &cookie)
        })
        .await;
        println!("| `{path}` | {label} | {p50:.1} | {p99:.1} | {bytes} | {rows} |");
    }
    let token = studio.token();
    for (path, row) in DAEMON_CALLS {
        let (p50, p99, bytes, rows) = measure(path, row, |c| {
            c.get(studio.daemon_url(path)).bearer_auth(&token)
        })
        .await;
        println!("| studiod `{path}` | {label} | {p50:.1} | {p99:.1} | {bytes} | {rows} |");
    }
    if hold {
        eprintln!(
            "holding (Ctrl-C ends it): app {} cookie {cookie:?}; studiod {} token {token}; home {}",
            studio.app_url("/"),
            studio.daemon_url("/"),
            studio.home_path().display()
        );
        tokio::signal::ctrl_c().await.expect("wait for Ctrl-C");
    }
}

/// `count` schedules that never come due (a yearly cron), through the API, 8 at a time.
async fn create_schedules(studio: &Studio, count: usize) {
    let url = Arc::new(studio.daemon_url("/api/schedules"));
    let token = Arc::new(studio.token());
    let tasks: Vec<_> = (0..8)
        .map(|w| {
            let (url, token) = (url.clone(), token.clone());
            tokio::spawn(async move {
                let client = http();
                for i in (w..count).step_by(8) {
                    let spec = command_spec(
                        &format!("bench-{i:05}"),
                        cron(&format!("{} {} 1 1 *", i % 60, i % 24)),
                        "true",
                        &[],
                    );
                    let resp = client
                        .post(url.as_str())
                        .bearer_auth(token.as_str())
                        .json(&spec)
                        .send()
                        .await
                        .expect("create a schedule");
                    assert_eq!(resp.status(), 201, "{:?}", resp.text().await);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("creator task");
    }
}

/// `count` manual runs of the first 100 schedules, waited for until none is active.
async fn real_runs(studio: &Studio, count: usize) {
    let client = http();
    let token = studio.token();
    let page: SchedulePage = client
        .get(studio.daemon_url("/api/schedules?limit=100"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("list schedules")
        .json()
        .await
        .expect("schedules JSON");
    let ids: Vec<String> = page.schedules.into_iter().map(|s| s.id).collect();
    for i in 0..count {
        let url = studio.daemon_url(&format!("/api/schedules/{}/trigger", ids[i % ids.len()]));
        let resp = client
            .post(url)
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .send()
            .await
            .expect("trigger");
        assert_eq!(resp.status(), 202, "{:?}", resp.text().await);
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let mut active = false;
        for status in ["queued", "running"] {
            let url = studio.daemon_url(&format!("/api/runs?status={status}&limit=1"));
            let body: RunPage = client
                .get(&url)
                .bearer_auth(&token)
                .send()
                .await
                .expect("list active runs")
                .json()
                .await
                .expect("runs JSON");
            active |= !body.runs.is_empty();
        }
        if !active {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "runs still active after 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Copies the runs table's rows (new ids, no occurrence keys, creation times spread
/// back over 28 hours) until it holds `target` rows; returns the final count.
async fn copy_runs(db: &std::path::Path, target: usize) -> i64 {
    let url = format!("sqlite://{}", db.display());
    let mut conn = SqliteConnection::connect(&url)
        .await
        .expect("open state.db");
    let have: i64 = sqlx::query_scalar("SELECT count(*) FROM runs")
        .fetch_one(&mut conn)
        .await
        .expect("count runs");
    let copies = (target as i64 - have).max(0) / have.max(1) + 1;
    let span_ms: i64 = 28 * 3600 * 1000;
    let step = span_ms / (copies * have.max(1)).max(1);
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1),
              src AS (SELECT r.*, row_number() OVER (ORDER BY r.id) AS k FROM runs r)
         INSERT INTO runs (id, schedule_id, occurrence_key, kind, status, reason, action,
             scheduled_at_ms, created_at_ms, dispatched_at_ms, finished_at_ms, pid,
             exit_code, signal, stdout_tail, stderr_tail, stdout_bytes, stderr_bytes,
             cost_usd, tokens, counted, chain_parent_id, chain_depth, replaces_run_id,
             follow_ups)
         SELECT lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-7' ||
                      substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(2)) || '-' ||
                      hex(randomblob(6))),
                schedule_id, NULL, kind,
                CASE WHEN (k + i) % 10 = 0 THEN 'failed' ELSE status END,
                reason, action, scheduled_at_ms,
                created_at_ms - (i * ?2 + k) * ?3, dispatched_at_ms, finished_at_ms, pid,
                CASE WHEN (k + i) % 10 = 0 THEN 1 ELSE exit_code END, signal,
                stdout_tail, stderr_tail, stdout_bytes, stderr_bytes, cost_usd, tokens, 0,
                chain_parent_id, chain_depth, replaces_run_id, follow_ups
         FROM src, n
         LIMIT ?4",
    )
    .bind(copies)
    .bind(have)
    .bind(step)
    .bind((target as i64 - have).max(0))
    .execute(&mut conn)
    .await
    .expect("copy runs");
    let total: i64 = sqlx::query_scalar("SELECT count(*) FROM runs")
        .fetch_one(&mut conn)
        .await
        .expect("count runs");
    conn.close().await.expect("close state.db");
    total
}

/// Pairs with the code `studio up` printed and returns the admission cookie.
async fn pair(studio: &Studio) -> String {
    let resp = http()
        .post(studio.app_url("/api/studio/pair"))
        .header("origin", studio.app_origin())
        .json(&PairRequest {
            code: studio.first_code(),
        })
        .send()
        .await
        .expect("pair");
    assert_eq!(resp.status(), 200);
    admission_cookie(&resp).expect("admission cookie")
}

/// p50 and p99 in ms, the body's bytes, and how many `row` markers the page holds.
async fn measure(
    path: &str,
    row: &str,
    request: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
) -> (f64, f64, usize, usize) {
    let client = http();
    let get = || async {
        let t = Instant::now();
        let resp = request(&client).send().await.expect("page");
        assert_eq!(resp.status(), 200, "{path}");
        let body = resp.text().await.expect("page body");
        (t.elapsed(), body)
    };
    let (_, body) = get().await;
    assert!(
        path.starts_with("/api/") || body.contains(r#"data-server-state="paired""#),
        "{path} did not render paired"
    );
    let mut samples = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        samples.push(get().await.0);
    }
    samples.sort();
    let pct =
        |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3;
    (pct(0.5), pct(0.99), body.len(), body.matches(row).count())
}
