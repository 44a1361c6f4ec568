//! studio-sched-bench: the scheduler's figures for `docs/PERFORMANCE.md`.
//!
//! `cargo run --release -p studio-tests --bin studio-sched-bench [-- --quick] [--timing-only]`
//!
//! With `STUDIO_TEST_DATABASE_URL` naming a PostgreSQL server, each studiod keeps its state
//! in a new database there.
//!
//! 1. Timing error: N schedules, each `every: 1s` running `true`, for a measured window;
//!    lateness = dispatched_at − scheduled_at of every occurrence in the window, for rising
//!    N, and the highest N (fires/s) whose latest occurrence was within 100 ms; the CPU
//!    each fire costs, in all (every process of the machine: studiod, its launcher, the
//!    shims, the jobs) and in studiod alone.
//! 2. A shim's memory, and the launcher's, while a job runs.
//! 3. 100,000 enabled cron schedules (nothing due): daemon start time, RSS, CPU while idle.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use studio_api::{
    Run, RunListItem, RunPage, Schedule,
    schedule::{CronTrigger, ScheduleSpec, Trigger},
};
use studio_contract::ready::Ready;
use studio_runner::ProcessIdentity;
use studio_tests::{
    TempDir, WORKER_ADDR,
    api::{command_spec, every},
    bins, free_port, http,
};

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
            .env(WORKER_ADDR.0, WORKER_ADDR.1)
            .env("RUST_LOG", "warn,studio_daemon::scheduling::engine=info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // With STUDIO_TEST_DATABASE_URL, the state is in a new PostgreSQL database.
        if let Some(url) = studio_tests::postgres::database_for(home) {
            cmd.env("STUDIO_DATABASE_URL", url);
        }
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
    make: impl Fn(usize) -> ScheduleSpec + Send + Sync + 'static,
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

fn ms(v: Option<&str>) -> Option<i64> {
    v?.parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

/// Every run with a scheduled instant in `[from, to)`.
async fn runs_between(d: &Daemon, from: i64, to: i64) -> Vec<RunListItem> {
    let client = http();
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = d.url("/api/runs?limit=500");
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let page: RunPage = client
            .get(&url)
            .bearer_auth(&d.token)
            .send()
            .await
            .expect("runs")
            .json()
            .await
            .expect("json");
        let oldest = page.runs.last().and_then(|r| ms(Some(&r.core.created_at)));
        out.extend(
            page.runs.into_iter().filter(|r| {
                ms(r.core.scheduled_at.as_deref()).is_some_and(|s| s >= from && s < to)
            }),
        );
        cursor = page.next_cursor;
        if cursor.is_none() || oldest.is_some_and(|o| o < from - 5_000) {
            return out;
        }
    }
}

fn pct(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// The figures of one timing step.
struct Timing {
    count: usize,
    p50: i64,
    p99: i64,
    max: i64,
    undispatched: usize,
    /// Busy CPU of the whole machine over the window, per occurrence, in ms.
    cpu_ms: f64,
    /// studiod's own share of it.
    daemon_ms: f64,
}

/// Clock ticks per second of `/proc` times (`USER_HZ`, 100 on Linux).
const TICKS_PER_S: f64 = 100.0;

/// The machine's busy time so far, in ticks: every CPU's total but idle and iowait.
fn machine_busy_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().take(8).sum();
    total - fields.get(3).copied().unwrap_or(0) - fields.get(4).copied().unwrap_or(0)
}

async fn timing(n: usize, window: Duration) -> Timing {
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
        let body = command_spec(&format!("bench/{i}"), every("1s"), "true", &[]);
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
    let (busy0, daemon0) = (machine_busy_ticks(), cpu_ticks(d.child.id()));
    tokio::time::sleep(window).await;
    let (busy1, daemon1) = (machine_busy_ticks(), cpu_ticks(d.child.id()));
    let to = studio_contract::time::now_ms();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = runs_between(&d, from, to).await;
    let mut late: Vec<i64> = runs
        .iter()
        .filter_map(|r| {
            Some(ms(r.core.dispatched_at.as_deref())? - ms(r.core.scheduled_at.as_deref())?)
        })
        .collect();
    let undispatched = runs.len() - late.len();
    late.sort_unstable();
    d.stop();
    let per_fire = |ticks: u64| ticks as f64 * 1e3 / TICKS_PER_S / runs.len().max(1) as f64;
    Timing {
        count: late.len(),
        p50: if late.is_empty() { 0 } else { pct(&late, 0.5) },
        p99: if late.is_empty() { 0 } else { pct(&late, 0.99) },
        max: late.last().copied().unwrap_or(0),
        undispatched,
        cpu_ms: per_fire(busy1 - busy0),
        daemon_ms: per_fire(daemon1 - daemon0),
    }
}

/// A running job's shim and the launcher that forked it: RSS (pages it touches, shared
/// ones included) and PSS (shared pages split among their sharers).
async fn shim_memory() {
    let home = TempDir::new("shim-mem");
    let d = Daemon::start(home.path(), &[("STUDIO_COMMAND_ALLOWLIST", "sleep")]);
    let client = http();
    let body = command_spec("mem", every("1h"), "sleep", &["5"]);
    let created: Schedule = client
        .post(d.url("/api/schedules"))
        .bearer_auth(&d.token)
        .json(&body)
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    let id = created.id;
    let run: Run = client
        .post(d.url(&format!("/api/schedules/{id}/trigger")))
        .bearer_auth(&d.token)
        .header("content-type", "application/json")
        .send()
        .await
        .expect("trigger")
        .json()
        .await
        .expect("json");
    let shim_file = home
        .path()
        .join("runs")
        .join(&run.core.id)
        .join("shim.json");
    let t = Instant::now();
    while !shim_file.exists() && t.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let shim: ProcessIdentity =
        serde_json::from_slice(&std::fs::read(&shim_file).expect("shim.json")).expect("json");
    let shim = shim.pid;
    let launcher = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", d.child.id()))
        .ok()
        .and_then(|c| c.split_whitespace().next()?.parse::<u32>().ok());
    println!("| process | RSS MiB | PSS MiB |");
    println!("|---|---|---|");
    println!(
        "| studiod | {:.1} | {:.1} |",
        rss_mib(d.child.id()),
        pss_mib(d.child.id())
    );
    if let Some(launcher) = launcher {
        println!(
            "| launcher | {:.1} | {:.1} |",
            rss_mib(launcher),
            pss_mib(launcher)
        );
    }
    println!(
        "| shim (one per running job) | {:.1} | {:.1} |",
        rss_mib(shim),
        pss_mib(shim)
    );
    d.stop();
}

/// Wall time per empty file created in a fresh home folder. On ext4 this depends on the
/// folder's block group (a group crowded with recently deleted inodes is scanned on every
/// create: 40 µs in one folder of a machine, 1.2 ms in another), and it dominates a
/// fire's cost when high.
fn file_create_us() -> f64 {
    let home = TempDir::new("probe");
    let n = 1000;
    let t = Instant::now();
    for i in 0..n {
        std::fs::File::create(home.path().join(i.to_string())).expect("create");
    }
    t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
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

/// VmRSS of `pid`, in MiB.
fn rss_mib(pid: u32) -> f64 {
    kib_field(&format!("/proc/{pid}/status"), "VmRSS:") / 1024.0
}

/// Pss of `pid` (shared pages split among their sharers), in MiB.
fn pss_mib(pid: u32) -> f64 {
    kib_field(&format!("/proc/{pid}/smaps_rollup"), "Pss:") / 1024.0
}

/// The kB figure on the line starting with `key` of a `/proc` file (0 if absent).
fn kib_field(path: &str, key: &str) -> f64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(0.0)
}

async fn many_cron(count: usize) {
    let home = TempDir::new("cron");
    let d = Daemon::start(home.path(), &[("STUDIO_COMMAND_ALLOWLIST", "true")]);
    let t = Instant::now();
    create_many(&d, count, |i| {
        let trigger = Trigger::Cron(CronTrigger {
            expression: format!("{} {} 1 1 *", i % 60, (i / 60) % 24),
            timezone: Some("Europe/Berlin".into()),
        });
        command_spec(&format!("cron/{i:06}"), trigger, "true", &[])
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
    // Only the fire timing table (with STUDIO_TEST_DATABASE_URL: on PostgreSQL).
    let timing_only = std::env::args().any(|a| a == "--timing-only");
    let window = Duration::from_secs(if quick { 5 } else { 10 });
    println!("# studio-sched-bench\n");
    println!(
        "File system: {:.0} µs to create a file in a home here ({}); each run creates six \
         (its folder, two logs, three evidence files), so figures are comparable only at a \
         like cost.\n",
        file_create_us(),
        std::env::temp_dir().display()
    );
    println!(
        "## Timing error: `every: 1s` schedules running `true` (window {} s)\n",
        window.as_secs()
    );
    println!(
        "| schedules (fires/s) | occurrences | p50 ms | p99 ms | max ms | not dispatched | CPU ms/fire (all) | of which studiod |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut best = 0;
    let steps: &[usize] = if quick {
        &[100, 500]
    } else {
        &[100, 150, 200, 250, 300, 400, 500, 1000]
    };
    for &n in steps {
        let t = timing(n, window).await;
        println!(
            "| {n} | {} | {} | {} | {} | {} | {:.2} | {:.2} |",
            t.count, t.p50, t.p99, t.max, t.undispatched, t.cpu_ms, t.daemon_ms
        );
        if t.max <= 100 && t.undispatched == 0 && t.count > 0 {
            best = n;
        }
    }
    println!("\nHighest sustained rate with every occurrence within 100 ms: {best} fires/s\n");
    if timing_only {
        return;
    }
    println!("## Memory while a job runs\n");
    shim_memory().await;
    println!();
    println!("## 100,000 enabled cron schedules, nothing due\n");
    println!("| measure | value |");
    println!("|---|---|");
    many_cron(if quick { 10_000 } else { 100_000 }).await;
}
