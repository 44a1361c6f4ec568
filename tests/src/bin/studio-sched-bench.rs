//! studio-sched-bench: the scheduler's figures for `docs/PERFORMANCE.md`.
//!
//! `cargo run --release -p studio-tests --bin studio-sched-bench [-- --quick]`
//!
//! 1. Timing error: N schedules, each `every: 1s` running `true`, for a measured window;
//!    lateness = dispatched_at − scheduled_at of every occurrence in the window, for rising
//!    N, and the highest N (fires/s) whose latest occurrence was within 100 ms.
//! 2. 100,000 enabled cron schedules (nothing due): daemon start time, RSS, CPU while idle.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use studio_contract::ready::Ready;
use studio_tests::{TempDir, bins, free_port, http};

struct Daemon {
    child: Child,
    addr: String,
    token: String,
    started: Duration,
    /// Until the scheduler logged that its queue is loaded.
    armed: Option<Duration>,
}

impl Daemon {
    fn start(home: &Path, env: &[(&str, &str)]) -> Self {
        let addr = format!("127.0.0.1:{}", free_port());
        let t = Instant::now();
        let mut cmd = Command::new(&bins().studiod);
        cmd.arg("--home")
            .arg(home)
            .args(["--addr", &addr])
            .env_remove("STUDIO_TOKEN")
            .env("RUST_LOG", "warn,studio_daemon::scheduling::engine=info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn studiod");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("readiness");
        Ready::parse(&line).unwrap_or_else(|| panic!("no readiness line: {line:?}"));
        let started = t.elapsed();
        let mut armed = None;
        let mut err = BufReader::new(child.stderr.take().expect("stderr"));
        let mut log = String::new();
        while err.read_line(&mut log).unwrap_or(0) > 0 {
            if log.contains("scheduler armed") {
                armed = Some(t.elapsed());
                break;
            }
            log.clear();
        }
        // Keep draining so the daemon never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        let token = std::fs::read_to_string(home.join("run/token"))
            .expect("token")
            .trim()
            .to_owned();
        Self {
            child,
            addr,
            token,
            started,
            armed,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn stop(mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates `count` schedules from `make(i)` with 8 concurrent clients.
async fn create_many(
    d: &Daemon,
    count: usize,
    make: impl Fn(usize) -> Value + Send + Sync + 'static,
) {
    let make = Arc::new(make);
    let url = d.url("/api/schedules");
    let tasks: Vec<_> = (0..8)
        .map(|w| {
            let (make, url, token) = (make.clone(), url.clone(), d.token.clone());
            tokio::spawn(async move {
                let client = http();
                for i in (w..count).step_by(8) {
                    let resp = client
                        .post(&url)
                        .bearer_auth(&token)
                        .json(&make(i))
                        .send()
                        .await
                        .expect("create");
                    assert_eq!(
                        resp.status(),
                        201,
                        "{}",
                        resp.text().await.unwrap_or_default()
                    );
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("creator");
    }
}

fn ms(v: &Value) -> Option<i64> {
    v.as_str()?
        .parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

/// Every run with a scheduled instant in `[from, to)`.
async fn runs_between(d: &Daemon, from: i64, to: i64) -> Vec<Value> {
    let client = http();
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = d.url("/api/runs?limit=500");
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let page: Value = client
            .get(&url)
            .bearer_auth(&d.token)
            .send()
            .await
            .expect("runs")
            .json()
            .await
            .expect("json");
        let runs = page["runs"].as_array().cloned().unwrap_or_default();
        let oldest = runs.last().and_then(|r| ms(&r["created_at"]));
        out.extend(
            runs.into_iter()
                .filter(|r| ms(&r["scheduled_at"]).is_some_and(|s| s >= from && s < to)),
        );
        cursor = page["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() || oldest.is_some_and(|o| o < from - 5_000) {
            return out;
        }
    }
}

fn pct(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn timing(n: usize, window: Duration) -> (usize, i64, i64, i64, usize) {
    let home = TempDir::new("sched");
    let d = Daemon::start(
        home.path(),
        &[
            ("STUDIO_COMMAND_ALLOWLIST", "true"),
            ("STUDIO_MAX_CONCURRENT_RUNS", "256"),
        ],
    );
    // One client, paced: each `every` timeline is anchored at its creation, so spreading
    // the creations over a second spreads the fires evenly over every second.
    let client = http();
    let t0 = Instant::now();
    for i in 0..n {
        let due = Duration::from_secs_f64(i as f64 / n as f64);
        if let Some(wait) = due.checked_sub(t0.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let body = json!({"name": format!("bench/{i}"), "trigger": {"every": "1s"}, "action": {"kind": "command", "executable": "true"}});
        let resp = client
            .post(d.url("/api/schedules"))
            .bearer_auth(&d.token)
            .json(&body)
            .send()
            .await
            .expect("create");
        assert_eq!(resp.status(), 201);
    }
    // Let every schedule reach steady state, then measure a window.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let from = studio_contract::time::now_ms();
    tokio::time::sleep(window).await;
    let to = studio_contract::time::now_ms();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = runs_between(&d, from, to).await;
    let mut late: Vec<i64> = runs
        .iter()
        .filter_map(|r| Some(ms(&r["dispatched_at"])? - ms(&r["scheduled_at"])?))
        .collect();
    let undispatched = runs.len() - late.len();
    late.sort_unstable();
    d.stop();
    if late.is_empty() {
        return (0, 0, 0, 0, undispatched);
    }
    (
        late.len(),
        pct(&late, 0.5),
        pct(&late, 0.99),
        *late.last().unwrap_or(&0),
        undispatched,
    )
}

fn cpu_ticks(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            Some(rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0)
}

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(0.0)
        / 1024.0
}

async fn many_cron(count: usize) {
    let home = TempDir::new("cron");
    let d = Daemon::start(home.path(), &[("STUDIO_COMMAND_ALLOWLIST", "true")]);
    let t = Instant::now();
    create_many(&d, count, |i| {
        json!({"name": format!("cron/{i:06}"),
               "trigger": {"cron": {"expression": format!("{} {} 1 1 *", i % 60, (i / 60) % 24), "timezone": "Europe/Berlin"}},
               "action": {"kind": "command", "executable": "true"}})
    })
    .await;
    let created = t.elapsed();
    d.stop();
    let d = Daemon::start(home.path(), &[("STUDIO_COMMAND_ALLOWLIST", "true")]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = d.child.id();
    let rss = rss_mib(pid);
    let before = cpu_ticks(pid);
    let idle = Duration::from_secs(10);
    tokio::time::sleep(idle).await;
    let ticks = cpu_ticks(pid) - before;
    println!("| enabled cron schedules | {count} |");
    println!(
        "| created through the API (8 clients) | {:.1} s ({:.0}/s) |",
        created.as_secs_f64(),
        count as f64 / created.as_secs_f64()
    );
    println!(
        "| daemon start → ready line (serving HTTP) | {:.0} ms |",
        d.started.as_secs_f64() * 1e3
    );
    if let Some(armed) = d.armed {
        println!(
            "| daemon start → every schedule armed | {:.0} ms |",
            armed.as_secs_f64() * 1e3
        );
    }
    println!("| RSS after start | {rss:.1} MiB |");
    println!(
        "| CPU while nothing is due ({} s) | {} ticks ({:.2} %) |",
        idle.as_secs(),
        ticks,
        ticks as f64 / (idle.as_secs_f64() * 100.0) * 100.0
    );
    d.stop();
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let window = Duration::from_secs(if quick { 5 } else { 10 });
    println!("# studio-sched-bench\n");
    println!(
        "## Timing error: `every: 1s` schedules running `true` (window {} s)\n",
        window.as_secs()
    );
    println!("| schedules (fires/s) | occurrences | p50 ms | p99 ms | max ms | not dispatched |");
    println!("|---|---|---|---|---|---|");
    let mut best = 0;
    let steps: &[usize] = if quick {
        &[100, 500]
    } else {
        &[100, 250, 300, 350, 400, 500, 1000]
    };
    for &n in steps {
        let (count, p50, p99, max, undispatched) = timing(n, window).await;
        println!("| {n} | {count} | {p50} | {p99} | {max} | {undispatched} |");
        if max <= 100 && undispatched == 0 && count > 0 {
            best = n;
        }
    }
    println!("\nHighest sustained rate with every occurrence within 100 ms: {best} fires/s\n");
    println!("## 100,000 enabled cron schedules, nothing due\n");
    println!("| measure | value |");
    println!("|---|---|");
    many_cron(if quick { 10_000 } else { 100_000 }).await;
}
