//! studio-retention-bench: retention's figures for `docs/PERFORMANCE.md`.
//!
//! `cargo run --release -p studio-tests --bin studio-retention-bench [RUNS]`
//!
//! For each of "without archives" and "with archives": a fresh home gets RUNS (default
//! 100,000) runs made 60 days ago, two transitions each, 10,000 of them with a log
//! folder; a studiod starts on it, the policy `runs.max_age = 30d` is set, and one pass
//! runs through `POST /api/admin/retention/run`. Meanwhile a client submits tasks
//! without pause (each a write transaction; the tasks name a label nobody serves, so
//! they stay queued): the slowest submission during the pass, against the slowest one
//! before it, is how long a writer waited on the pass. Printed: the pass's time, runs
//! and rows (runs + transitions) per second, its longest chunk transaction, and the
//! submissions' latencies.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use studio_tests::{TempDir, bench::Daemon};

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("http client")
}

/// Submits tasks until `stop`: each submission's latency (ms) and when it began
/// (seconds since `epoch`).
async fn submitter(
    d: Arc<(String, String)>,
    stop: Arc<AtomicBool>,
    epoch: Instant,
) -> Vec<(f64, f64)> {
    let c = client();
    let mut out = Vec::new();
    let body = json!({"action": {"kind": "command", "executable": "true"}, "labels": ["nobody"]});
    while !stop.load(Ordering::Relaxed) {
        let began = Instant::now();
        let resp = c
            .post(format!("{}/api/tasks", d.0))
            .bearer_auth(&d.1)
            .json(&body)
            .send()
            .await
            .expect("submit");
        assert!(resp.status().is_success(), "{}", resp.status());
        out.push((
            began.duration_since(epoch).as_secs_f64(),
            began.elapsed().as_secs_f64() * 1e3,
        ));
    }
    out
}

async fn one(runs: i64, archive: bool) {
    let home = TempDir::new("retention-bench");
    let first = Daemon::start(home.path());
    let c = client();
    let made: Value = c
        .post(first.url("/api/schedules"))
        .bearer_auth(&first.token)
        .json(&json!({"name": "quiet", "trigger": {"every": "1h"},
            "action": {"kind": "command", "executable": "true"}}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("schedule");
    let schedule = made["id"].as_str().expect("an id").to_owned();
    first.stop();
    studio_tests::fill::old_runs(home.path(), &schedule, runs, 10_000, 60).await;
    let d = Daemon::start(home.path());
    let set = c
        .put(d.url("/api/admin/retention"))
        .bearer_auth(&d.token)
        .json(&json!({"runs": {"max_age": "30d"}}))
        .send()
        .await
        .expect("policy");
    assert!(set.status().is_success(), "{}", set.status());

    let epoch = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(submitter(
        Arc::new((d.url(""), d.token.clone())),
        stop.clone(),
        epoch,
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let dir = TempDir::new("retention-bench-archives");
    let body = if archive {
        json!({"archive_dir": dir.path().join("a").display().to_string()})
    } else {
        json!({})
    };
    let began = Instant::now();
    let from = began.duration_since(epoch).as_secs_f64();
    let pass: Value = c
        .post(d.url("/api/admin/retention/run"))
        .bearer_auth(&d.token)
        .json(&body)
        .send()
        .await
        .expect("pass")
        .json()
        .await
        .expect("a pass");
    let took = began.elapsed().as_secs_f64();
    let to = from + took;
    stop.store(true, Ordering::Relaxed);
    let lat = load.await.expect("submitter");
    assert_eq!(pass["outcome"], "completed", "{pass}");
    let pruned_runs = pass["pruned"]["runs"].as_f64().unwrap_or(0.0);
    let rows = pruned_runs + pass["pruned"]["run_transitions"].as_f64().unwrap_or(0.0);
    let max = |xs: &mut Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        let p50 = xs.get(xs.len() / 2).copied().unwrap_or(0.0);
        (p50, xs.last().copied().unwrap_or(0.0), xs.len())
    };
    let mut before: Vec<f64> = lat
        .iter()
        .filter(|(t, _)| *t < from)
        .map(|(_, l)| *l)
        .collect();
    let mut during: Vec<f64> = lat
        .iter()
        .filter(|(t, _)| *t >= from && *t <= to)
        .map(|(_, l)| *l)
        .collect();
    let (b50, bmax, bn) = max(&mut before);
    let (d50, dmax, dn) = max(&mut during);
    println!(
        "{} archives: {pruned_runs} runs, {rows} rows in {took:.2} s = {:.0} runs/s, {:.0} rows/s; \
         {} archives, {} chunks, longest chunk transaction {:.1} ms; checkpoint {}",
        if archive { "with" } else { "without" },
        pruned_runs / took,
        rows / took,
        pass["archives"],
        pass["chunks"],
        pass["longest_chunk_ms"].as_f64().unwrap_or(0.0),
        pass["checkpoint"],
    );
    println!(
        "  task submissions before the pass: {bn}, p50 {b50:.1} ms, max {bmax:.1} ms; \
         during it: {dn}, p50 {d50:.1} ms, max {dmax:.1} ms"
    );
    if archive {
        let bytes: u64 = std::fs::read_dir(dir.path().join("a"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        println!("  archives on disk: {:.1} MiB", bytes as f64 / 1048576.0);
    }
    d.stop();
}

#[tokio::main]
async fn main() {
    let runs = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("RUNS is a number"))
        .unwrap_or(100_000);
    one(runs, false).await;
    one(runs, true).await;
}
