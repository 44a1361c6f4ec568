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
use serde_json::{Value, json};
use studio_tests::{Studio, TempDir, alive, signal};

mod allowlist;
mod api;
mod events;
mod gates;
mod recovery;
mod runner;
mod shims;

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

    /// One request; `None` when the daemon could not be reached (it may be restarting).
    async fn try_send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Option<(u16, Value)> {
        let unsafe_method = !matches!(method, Method::GET | Method::HEAD | Method::OPTIONS);
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if unsafe_method {
            req = req.header("content-type", "application/json");
        }
        if let Some(body) = body {
            req = req.body(body.to_string());
        }
        let resp = req.send().await.ok()?;
        let status = resp.status().as_u16();
        let text = resp.text().await.ok()?;
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path}: not JSON: {text:?}"))
        };
        Some((status, value))
    }

    async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.try_send(method.clone(), path, body)
            .await
            .unwrap_or_else(|| panic!("{method} {path}: the daemon did not answer"))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send(Method::POST, path, Some(body)).await
    }

    /// `POST /api/schedules`, which must answer 201.
    async fn create(&self, spec: &Value) -> Value {
        let (status, body) = self.post("/api/schedules", spec).await;
        assert_eq!(status, 201, "create {spec}: {body}");
        body
    }

    /// `POST /api/schedules/{id}/trigger`, which must answer 202 with a manual run.
    async fn trigger(&self, schedule: &str) -> Value {
        let (status, run) = self
            .post(&format!("/api/schedules/{schedule}/trigger"), &json!({}))
            .await;
        assert_eq!(status, 202, "trigger {schedule}: {run}");
        assert_eq!(run["kind"], "manual", "{run}");
        run
    }

    /// Creates a schedule from `spec` and triggers a manual run of it: their ids.
    async fn create_and_trigger(&self, spec: &Value) -> (String, String) {
        let id = self.create(spec).await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let run_id = self.trigger(&id).await["id"]
            .as_str()
            .expect("run id")
            .to_owned();
        (id, run_id)
    }

    async fn disable(&self, schedule: &str) {
        let (status, body) = self
            .post(&format!("/api/schedules/{schedule}/disable"), &json!({}))
            .await;
        assert_eq!(status, 200, "disable {schedule}: {body}");
        assert_eq!(body["enabled"], false, "{body}");
    }

    async fn schedule(&self, id: &str) -> Value {
        let (status, body) = self.get(&format!("/api/schedules/{id}")).await;
        assert_eq!(status, 200, "schedule {id}: {body}");
        body
    }

    async fn try_run(&self, id: &str) -> Option<Value> {
        match self
            .try_send(Method::GET, &format!("/api/runs/{id}"), None)
            .await?
        {
            (200, run) => Some(run),
            _ => None,
        }
    }

    async fn run(&self, id: &str) -> Value {
        let (status, body) = self.get(&format!("/api/runs/{id}")).await;
        assert_eq!(status, 200, "run {id}: {body}");
        body
    }

    /// Every page of a run listing (`path` carries the filters, without `limit`/`cursor`).
    async fn try_list(&self, path: &str) -> Option<Vec<Value>> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut url = format!("{path}{sep}limit=100");
            if let Some(c) = &cursor {
                url.push_str("&cursor=");
                url.push_str(&encode(c));
            }
            let (status, page) = self.try_send(Method::GET, &url, None).await?;
            if status != 200 {
                return None;
            }
            out.extend(page["runs"].as_array().cloned().unwrap_or_default());
            match page["next_cursor"].as_str() {
                Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
                _ => return Some(out),
            }
            assert!(out.len() < 100_000, "the cursor never ends");
        }
    }

    /// The schedule's runs, oldest scheduled first (unscheduled ones by creation).
    async fn try_runs(&self, schedule: &str) -> Option<Vec<Value>> {
        let mut runs = self
            .try_list(&format!("/api/schedules/{schedule}/runs"))
            .await?;
        runs.sort_by_key(|r| {
            (
                ms_opt(&r["scheduled_at"]).unwrap_or(i64::MAX),
                ms(&r["created_at"]),
            )
        });
        Some(runs)
    }

    async fn runs(&self, schedule: &str) -> Vec<Value> {
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
    async fn wait_run(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        until(what, WAIT, async || {
            self.try_run(id).await.filter(|r| done(r))
        })
        .await
    }

    /// Waits for a run to be terminal.
    async fn finished(&self, id: &str) -> Value {
        self.wait_run(id, &format!("run {id} to end"), terminal)
            .await
    }

    /// Waits until the schedule's runs satisfy `done`, and returns them.
    async fn wait_runs(
        &self,
        schedule: &str,
        what: &str,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        until(what, WAIT, async || {
            self.try_runs(schedule).await.filter(|r| done(r))
        })
        .await
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
fn ms(v: &Value) -> i64 {
    ms_opt(v).unwrap_or_else(|| panic!("not an RFC 3339 instant: {v}"))
}

fn ms_opt(v: &Value) -> Option<i64> {
    v.as_str()?
        .parse::<Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
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

fn terminal(run: &Value) -> bool {
    matches!(
        run["status"].as_str(),
        Some("completed" | "failed" | "timed_out" | "cancelled" | "skipped")
    )
}

fn running(run: &Value) -> bool {
    run["status"] == "running" && !run["dispatched_at"].is_null()
}

fn is(run: &Value, status: &str, reason: &str) -> bool {
    run["status"] == status && run["reason"] == reason
}

/// A command schedule.
fn command(name: &str, trigger: Value, executable: &str, args: &[&str]) -> Value {
    json!({
        "name": name,
        "trigger": trigger,
        "action": {"kind": "command", "executable": executable, "args": args},
    })
}

/// A `sh -c <script>` schedule.
fn sh(name: &str, trigger: Value, script: &str) -> Value {
    command(name, trigger, "sh", &["-c", script])
}

fn every(interval: &str) -> Value {
    json!({ "every": interval })
}

fn with_policies(mut spec: Value, policies: Value) -> Value {
    spec["policies"] = policies;
    spec
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
fn overlapping(a: &Value, b: &Value) -> bool {
    let (a0, a1) = (ms(&a["dispatched_at"]), ms(&a["finished_at"]));
    let (b0, b1) = (ms(&b["dispatched_at"]), ms(&b["finished_at"]));
    a0 < b1 && b0 < a1
}
