//! The scheduler from outside, against docs/SCHEDULER.md: the real `studio up`, HTTP to
//! studiod with the daemon token, real jobs, real crashes and restarts.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use jiff::Timestamp;
use reqwest::Method;
use rustix::process::Signal;
use serde::Serialize;
use studio_api::{
    Run, RunCore, RunDetail, RunKind, RunListItem, RunPage, RunStatus, Schedule,
    schedule::{Action, Policies, ScheduleSpec, Trigger},
};
use studio_tests::{
    Reply, Studio, TempDir, alive,
    api::{command as run_command, command_spec as command, cron, every},
    signal,
};

mod allowlist;
mod api;
mod approvals;
mod backup;
mod cluster;
mod disk;
mod events;
mod gates;
mod health;
mod identity;
mod notify;
mod postgres;
mod recovery;
mod retention;
mod runner;
mod secrets;
mod shims;
mod split_hosts;
mod tasks;
mod workers;

/// Executables the tests' schedules run.
const ALLOW: &str = "sh,true,sleep";
/// The usual bound on waiting for something the scheduler should do within seconds.
const WAIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// The API, as a client sees it.

/// studiod's API with the daemon token.
struct Api {
    client: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    fn new(studio: &Studio) -> Self {
        Self::at(studio.daemon_url(""), studio.token())
    }

    /// The API of a studiod at `base` (`http://host:port`).
    fn at(base: String, token: String) -> Self {
        Self {
            client: studio_tests::http(),
            base,
            token,
        }
    }

    /// One request with `body` as its JSON text; `None` when the daemon could not be
    /// reached (it may be restarting).
    async fn try_send(&self, method: Method, path: &str, body: Option<String>) -> Option<Reply> {
        let unsafe_method = !matches!(method, Method::GET | Method::HEAD | Method::OPTIONS);
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if unsafe_method {
            req = req.header("content-type", "application/json");
        }
        if let Some(body) = body {
            req = req.body(body);
        }
        let resp = req.send().await.ok()?;
        let status = resp.status().as_u16();
        let text = resp.text().await.ok()?;
        Some(Reply { status, text })
    }

    async fn send(&self, method: Method, path: &str, body: Option<String>) -> Reply {
        self.try_send(method.clone(), path, body)
            .await
            .unwrap_or_else(|| panic!("{method} {path}: the daemon did not answer"))
    }

    async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, None).await
    }

    /// `POST` of a request body.
    async fn post(&self, path: &str, body: &impl Serialize) -> Reply {
        let body = serde_json::to_string(body).expect("a request body");
        self.send(Method::POST, path, Some(body)).await
    }

    /// `POST` to a route that takes no body (trigger, enable, disable, cancel).
    async fn act(&self, path: &str) -> Reply {
        self.send(Method::POST, path, None).await
    }

    async fn delete(&self, path: &str) -> Reply {
        self.send(Method::DELETE, path, None).await
    }

    /// `POST /api/schedules`, which must answer 201.
    async fn create(&self, spec: &ScheduleSpec) -> Schedule {
        let reply = self.post("/api/schedules", spec).await;
        assert_eq!(reply.status, 201, "create {spec:?}: {reply}");
        reply.json()
    }

    /// `POST /api/schedules/{id}/trigger`, which must answer 202 with a manual run.
    async fn trigger(&self, schedule: &str) -> Run {
        let reply = self
            .act(&format!("/api/schedules/{schedule}/trigger"))
            .await;
        let run: Run = reply.expect(202);
        assert_eq!(run.core.kind, RunKind::Manual, "{reply}");
        run
    }

    /// Creates a schedule from `spec` and triggers a manual run of it: their ids.
    async fn create_and_trigger(&self, spec: &ScheduleSpec) -> (String, String) {
        let id = self.create(spec).await.id;
        let run_id = self.trigger(&id).await.core.id;
        (id, run_id)
    }

    async fn disable(&self, schedule: &str) {
        let reply = self
            .act(&format!("/api/schedules/{schedule}/disable"))
            .await;
        let body: Schedule = reply.expect(200);
        assert!(!body.enabled, "{reply}");
    }

    async fn schedule(&self, id: &str) -> Schedule {
        self.get(&format!("/api/schedules/{id}")).await.expect(200)
    }

    async fn try_run(&self, id: &str) -> Option<RunDetail> {
        let reply = self
            .try_send(Method::GET, &format!("/api/runs/{id}"), None)
            .await?;
        (reply.status == 200).then(|| reply.json())
    }

    async fn run(&self, id: &str) -> RunDetail {
        self.get(&format!("/api/runs/{id}")).await.expect(200)
    }

    /// Every page of a run listing (`path` carries the filters, without `limit`/`cursor`).
    async fn try_list(&self, path: &str) -> Option<Vec<RunListItem>> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut url = format!("{path}{sep}limit=100");
            if let Some(c) = &cursor {
                url.push_str("&cursor=");
                url.push_str(&encode(c));
            }
            let reply = self.try_send(Method::GET, &url, None).await?;
            if reply.status != 200 {
                return None;
            }
            let page: RunPage = reply.json();
            out.extend(page.runs);
            match page.next_cursor {
                Some(c) if !c.is_empty() => cursor = Some(c),
                _ => return Some(out),
            }
            assert!(out.len() < 100_000, "the cursor never ends");
        }
    }

    /// The schedule's runs, oldest scheduled first (unscheduled ones by creation).
    async fn try_runs(&self, schedule: &str) -> Option<Vec<RunListItem>> {
        let mut runs = self
            .try_list(&format!("/api/schedules/{schedule}/runs"))
            .await?;
        runs.sort_by_key(|r| {
            (
                ms_opt(r.core.scheduled_at.as_deref()).unwrap_or(i64::MAX),
                ms(&r.core.created_at),
            )
        });
        Some(runs)
    }

    async fn runs(&self, schedule: &str) -> Vec<RunListItem> {
        self.try_runs(schedule)
            .await
            .unwrap_or_else(|| panic!("cannot list the runs of {schedule}"))
    }

    /// `GET /api/runs/{id}/log?<query>`: status, `x-studio-log-size`, bytes.
    async fn log(&self, run: &str, query: &str) -> (u16, Option<u64>, Vec<u8>) {
        let resp = self
            .client
            .get(format!("{}/api/runs/{run}/log?{query}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("log request");
        let status = resp.status().as_u16();
        let size = resp
            .headers()
            .get("x-studio-log-size")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let bytes = resp.bytes().await.expect("log body").to_vec();
        (status, size, bytes)
    }

    /// Waits for run `id` to satisfy `done`, and returns it.
    async fn wait_run(&self, id: &str, what: &str, done: impl Fn(&RunDetail) -> bool) -> RunDetail {
        until(what, WAIT, async || {
            self.try_run(id).await.filter(|r| done(r))
        })
        .await
    }

    /// Waits for a run to be terminal.
    async fn finished(&self, id: &str) -> RunDetail {
        self.wait_run(id, &format!("run {id} to end"), terminal)
            .await
    }

    /// Waits until the schedule's runs satisfy `done`, and returns them.
    async fn wait_runs(
        &self,
        schedule: &str,
        what: &str,
        done: impl Fn(&[RunListItem]) -> bool,
    ) -> Vec<RunListItem> {
        until(what, WAIT, async || {
            self.try_runs(schedule).await.filter(|r| done(r))
        })
        .await
    }
}

/// What every view of a run carries (a detail, a trigger's answer, a list row).
trait Core {
    fn core(&self) -> &RunCore;
}

impl<T: Core> Core for &T {
    fn core(&self) -> &RunCore {
        (**self).core()
    }
}

impl Core for RunCore {
    fn core(&self) -> &RunCore {
        self
    }
}

impl Core for Run {
    fn core(&self) -> &RunCore {
        &self.core
    }
}

impl Core for RunDetail {
    fn core(&self) -> &RunCore {
        &self.run.core
    }
}

impl Core for RunListItem {
    fn core(&self) -> &RunCore {
        &self.core
    }
}

/// Percent-encodes an opaque cursor for a query string.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls `check` every 100 ms until it gives `Some`, failing the test after `timeout`.
async fn until<T>(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "gave up after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Milliseconds since the epoch of an RFC 3339 string.
fn ms(v: &str) -> i64 {
    ms_opt(Some(v)).unwrap_or_else(|| panic!("not an RFC 3339 instant: {v}"))
}

fn ms_opt(v: Option<&str>) -> Option<i64> {
    v?.parse::<Timestamp>().ok().map(|t| t.as_millisecond())
}

/// Milliseconds since the epoch of an instant a run or schedule must carry.
fn ms_of(v: &Option<String>) -> i64 {
    ms(v.as_deref().unwrap_or_else(|| panic!("no instant")))
}

fn now_ms() -> i64 {
    Timestamp::now().as_millisecond()
}

/// RFC 3339 for an instant `secs` whole seconds from now.
fn in_secs(secs: i64) -> String {
    Timestamp::from_second(Timestamp::now().as_second() + secs)
        .expect("instant")
        .to_string()
}

fn terminal(run: &impl Core) -> bool {
    run.core().status.is_terminal()
}

fn running(run: &impl Core) -> bool {
    let run = run.core();
    run.status == RunStatus::Running && run.dispatched_at.is_some()
}

fn is(run: &impl Core, status: RunStatus, reason: &str) -> bool {
    let run = run.core();
    run.status == status && run.reason.as_deref() == Some(reason)
}

/// A `sh -c <script>` schedule.
fn sh(name: &str, trigger: Trigger, script: &str) -> ScheduleSpec {
    command(name, trigger, "sh", &["-c", script])
}

fn at(instant: &str) -> Trigger {
    Trigger::At(instant.into())
}

fn with_policies(spec: ScheduleSpec, policies: Policies) -> ScheduleSpec {
    ScheduleSpec { policies, ..spec }
}

/// Starts Studio with the test allow-list, UTC as the scheduler's zone, and `extra`.
fn start(extra: &[(&str, &str)]) -> Studio {
    let mut env = vec![
        ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
        ("STUDIO_SCHEDULER_TZ", "UTC"),
    ];
    env.extend_from_slice(extra);
    Studio::start_with(&env)
}

/// A command's stdout and stderr, as text.
fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A marker file inside the test's home.
fn marker(studio: &Studio, name: &str) -> PathBuf {
    studio.home_path().join(name)
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether two runs' [dispatched, finished] spans overlap.
fn overlapping(a: &impl Core, b: &impl Core) -> bool {
    let (a, b) = (a.core(), b.core());
    let (a0, a1) = (ms_of(&a.dispatched_at), ms_of(&a.finished_at));
    let (b0, b1) = (ms_of(&b.dispatched_at), ms_of(&b.finished_at));
    a0 < b1 && b0 < a1
}
