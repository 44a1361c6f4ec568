//! studio-task-bench: the tasks' figures for `docs/PERFORMANCE.md`.
//!
//! `cargo run --release -p studio-tests --bin studio-task-bench`
//!
//! 1. Submit throughput: 4,000 tasks through `POST /api/tasks` from 16 clients. They
//!    name a label no worker has, so they stay queued and only the submission is
//!    measured.
//! 2. Submit → start on an idle studiod, its built-in worker only: 200 tasks running
//!    `true`, one every 50 ms. Each latency is its attempt's `dispatched_at` minus the
//!    task's `created_at`, both studiod's clocks.
//! 3. The same with four local `studio worker` processes (joined over mutual TLS, two
//!    jobs each), the tasks labelled so that only they serve them: `dispatched_at` is
//!    when a worker's start report reached studiod. Then each worker's idle RSS.

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::json;
use studio_api::{Task, TaskDetail};
use studio_tests::{TempDir, bench::Daemon, bins, http, join_worker};

fn ms(text: &str) -> i64 {
    text.parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .unwrap_or_else(|_| panic!("not an instant: {text}"))
}

fn pct(sorted: &[i64], p: f64) -> i64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// A `studio worker` joined to `d` in its own home, running until dropped.
struct Worker {
    child: Child,
    _home: TempDir,
}

impl Worker {
    async fn join(client: &reqwest::Client, d: &Daemon, n: usize) -> Self {
        let created: studio_api::JoinTokenCreated = client
            .post(d.url("/api/workers/tokens"))
            .bearer_auth(&d.token)
            .json(&json!({"labels": ["bench"], "ttl": "10m"}))
            .send()
            .await
            .expect("a token")
            .json()
            .await
            .expect("a token body");
        let home = join_worker(
            &created.server,
            &created.token,
            &format!("bench{n}"),
            &["true"],
        );
        let dir = home.path().display().to_string();
        let child = Command::new(&bins().studio)
            .args(["worker", "--capacity", "2", "--worker-home", &dir])
            .env_remove("STUDIO_HOME")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn studio worker");
        Self { child, _home: home }
    }

    /// Resident memory of the worker process, in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Submits 200 tasks from `body`, one every 50 ms, and reads each one's submit → start
/// latency: sorted.
async fn start_latencies(
    client: &reqwest::Client,
    d: &Daemon,
    body: &serde_json::Value,
) -> Vec<i64> {
    let mut ids = Vec::new();
    for _ in 0..200 {
        ids.push(submit(client, d, body).await.id);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut latencies = Vec::new();
    for id in &ids {
        let detail: TaskDetail = client
            .get(d.url(&format!("/api/tasks/{id}")))
            .bearer_auth(&d.token)
            .send()
            .await
            .expect("task")
            .json()
            .await
            .expect("detail");
        let started = detail
            .attempts
            .first()
            .and_then(|a| a.core.dispatched_at.clone())
            .unwrap_or_else(|| panic!("task {id} did not start: {detail:?}"));
        latencies.push(ms(&started) - ms(&detail.task.created_at));
    }
    latencies.sort_unstable();
    latencies
}

async fn submit(client: &reqwest::Client, d: &Daemon, body: &serde_json::Value) -> Task {
    let resp = client
        .post(d.url("/api/tasks"))
        .bearer_auth(&d.token)
        .json(body)
        .send()
        .await
        .expect("submit");
    assert_eq!(
        resp.status(),
        201,
        "{}",
        resp.text().await.unwrap_or_default()
    );
    resp.json().await.expect("a task")
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    println!("# studio-task-bench\n");
    let home = TempDir::new("task-bench");
    let d = Daemon::start(home.path());
    let d = std::sync::Arc::new(d);

    let total = 4_000;
    let clients = 16;
    let t = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|w| {
            let d = d.clone();
            tokio::spawn(async move {
                let client = http();
                for i in (w..total).step_by(clients) {
                    let body = json!({
                        "action": {"kind": "command", "executable": "true"},
                        "labels": ["nowhere"],
                        "idempotency_key": format!("bench-{i}"),
                    });
                    submit(&client, &d, &body).await;
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("client");
    }
    let took = t.elapsed();
    println!(
        "submit throughput: {total} tasks from {clients} clients in {:.2} s: {:.0} tasks/s",
        took.as_secs_f64(),
        total as f64 / took.as_secs_f64()
    );

    let client = http();
    let body = json!({"action": {"kind": "command", "executable": "true"}});
    let latencies = start_latencies(&client, &d, &body).await;
    println!(
        "submit → start (built-in worker, idle, {} tasks one every 50 ms): p50 {} ms, p99 {} ms, max {} ms",
        latencies.len(),
        pct(&latencies, 0.5),
        pct(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default()
    );

    let mut workers = Vec::new();
    for n in 0..4 {
        workers.push(Worker::join(&client, &d, n).await);
    }
    // Until all four are connected.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list: studio_api::WorkerList = client
            .get(d.url("/api/workers"))
            .bearer_auth(&d.token)
            .send()
            .await
            .expect("workers")
            .json()
            .await
            .expect("a list");
        if list
            .workers
            .iter()
            .filter(|w| w.connected && !w.builtin)
            .count()
            == 4
        {
            break;
        }
        assert!(Instant::now() < deadline, "the workers did not connect");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let body = json!({"action": {"kind": "command", "executable": "true"}, "labels": ["bench"]});
    let latencies = start_latencies(&client, &d, &body).await;
    println!(
        "submit → start (four remote workers over mutual TLS, idle, {} tasks one every 50 ms): p50 {} ms, p99 {} ms, max {} ms",
        latencies.len(),
        pct(&latencies, 0.5),
        pct(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss: Vec<u64> = workers.iter().map(Worker::rss_kib).collect();
    println!(
        "a worker's idle RSS after 200 jobs: {} KiB ({})",
        rss.iter().max().copied().unwrap_or_default(),
        rss.iter()
            .map(|r| format!("{r} KiB"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}
