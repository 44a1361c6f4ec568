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
use tokio::{sync::mpsc, task::JoinHandle};
use tokio_stream::StreamExt;

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
        Self {
            client: studio_tests::http(),
            base: studio.daemon_url(""),
            token: studio.token(),
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

// ---------------------------------------------------------------------------------------
// Firing, output and the API.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_every_second_fires_on_time_and_captures_output() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let schedule = api
        .create(&sh("hello", every("1s"), "echo hello; echo oops >&2"))
        .await;
    let id = schedule["id"].as_str().expect("id").to_owned();
    let created = ms(&schedule["created_at"]);

    let runs = api
        .wait_runs(&id, "a completed run", |runs| {
            runs.first().is_some_and(terminal)
        })
        .await;
    api.disable(&id).await;
    let first = &runs[0];
    let fired_after = ms(&first["created_at"]) - created;
    assert!(
        fired_after <= 3_000,
        "the first run came {fired_after} ms after creation: {first}"
    );
    let late = ms(&first["created_at"]) - ms(&first["scheduled_at"]);
    assert!(late < 2_000, "fired {late} ms after its instant: {first}");
    assert_eq!(first["kind"], "scheduled", "{first}");
    assert_eq!(first["schedule_id"], id.as_str());

    let run_id = first["id"].as_str().expect("run id");
    let run = api.run(run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["exit_code"], 0, "{run}");
    assert_eq!(run["stdout_tail"], "hello\n", "{run}");
    assert_eq!(run["stderr_tail"], "oops\n", "{run}");
    assert_eq!(run["stdout_bytes"], 6, "{run}");
    assert_eq!(run["stderr_bytes"], 5, "{run}");
    assert!(
        run["transitions"].as_array().is_some_and(|t| !t.is_empty()),
        "a run carries its transitions: {run}"
    );

    let (status, size, bytes) = api.log(run_id, "stream=stdout").await;
    assert_eq!(
        (status, size, bytes.as_slice()),
        (200, Some(6), &b"hello\n"[..])
    );
    let (status, _, bytes) = api.log(run_id, "stream=stdout&offset=2").await;
    assert_eq!((status, bytes.as_slice()), (200, &b"llo\n"[..]));
    let (status, _, bytes) = api.log(run_id, "stream=stdout&offset=1&limit=3").await;
    assert_eq!((status, bytes.as_slice()), (200, &b"ell"[..]));
    let (status, size, bytes) = api.log(run_id, "stream=stderr").await;
    assert_eq!(
        (status, size, bytes.as_slice()),
        (200, Some(5), &b"oops\n"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_api_creates_validates_patches_and_deletes() {
    let studio = start(&[]);
    let api = Api::new(&studio);

    let mut spec = command("api/one", every("1h"), "true", &[]);
    spec["description"] = json!("first");
    spec["cwd"] = json!("/");
    spec["policies"] = json!({"max_runs": 5});
    let before = now_ms();
    let created = api.create(&spec).await;
    let id = created["id"].as_str().expect("id").to_owned();
    assert_eq!(created["name"], "api/one");
    assert_eq!(created["enabled"], true);
    let next = ms(&created["next_fire_at"]);
    assert!(
        (before + 3_590_000..=now_ms() + 3_610_000).contains(&next),
        "every 1h fires an hour after creation: {created}"
    );
    assert_eq!(created["spec"]["cwd"], "/", "{created}");

    // Validation: 400 validation_failed, each problem with its field path.
    let api_ref = &api;
    let invalid = |spec: Value| async move {
        let api = api_ref;
        let (status, body) = api.post("/api/schedules", &spec).await;
        assert_eq!(status, 400, "{spec}: {body}");
        assert_eq!(body["code"], "validation_failed", "{body}");
        assert!(body["message"].is_string(), "{body}");
        body["errors"]
            .as_array()
            .unwrap_or_else(|| panic!("no errors[]: {body}"))
            .clone()
    };
    let errors = invalid(command(
        "api/never",
        json!({"cron": {"expression": "0 0 31 2 *"}}),
        "true",
        &[],
    ))
    .await;
    assert!(
        errors
            .iter()
            .any(|e| e["path"] == "trigger.cron.expression"),
        "{errors:?}"
    );
    let mut unknown = command("api/unknown", every("1h"), "true", &[]);
    unknown["policies"] = json!({"bogus": 1});
    let errors = invalid(unknown).await;
    assert!(
        errors.iter().any(|e| e["path"]
            .as_str()
            .is_some_and(|p| p.starts_with("policies"))
            && e["reason"].as_str().is_some_and(|r| r.contains("bogus"))),
        "the unknown field is named: {errors:?}"
    );
    let errors = invalid(command("api/rm", every("1h"), "rm", &["-rf", "/"])).await;
    assert!(
        errors.iter().any(|e| e["path"] == "action.executable"),
        "{errors:?}"
    );

    // Names are unique.
    let (status, body) = api.post("/api/schedules", &spec).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("name_taken")),
        "{body}"
    );

    let (status, got) = api.get(&format!("/api/schedules/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(got["id"], id.as_str());
    let (status, list) = api.get("/api/schedules?q=api/one").await;
    assert_eq!(status, 200, "{list}");
    assert!(
        list["schedules"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["id"] == id.as_str())),
        "{list}"
    );

    // PATCH: absent fields untouched, null clears an optional one.
    let (status, patched) = api
        .send(
            Method::PATCH,
            &format!("/api/schedules/{id}"),
            Some(&json!({"cwd": null})),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert!(
        patched["spec"].get("cwd").is_none_or(Value::is_null),
        "{patched}"
    );
    assert_eq!(patched["spec"]["description"], "first", "{patched}");
    assert_eq!(patched["spec"]["policies"]["max_runs"], 5, "{patched}");
    assert_eq!(
        patched["spec"]["trigger"],
        json!({"every": "1h"}),
        "{patched}"
    );
    let (status, patched) = api
        .send(
            Method::PATCH,
            &format!("/api/schedules/{id}"),
            Some(&json!({"description": "second"})),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["spec"]["description"], "second", "{patched}");
    assert!(
        patched["spec"].get("cwd").is_none_or(Value::is_null),
        "{patched}"
    );
    assert_eq!(patched["spec"]["policies"]["max_runs"], 5, "{patched}");
    let (status, body) = api
        .send(
            Method::PATCH,
            &format!("/api/schedules/{id}"),
            Some(&json!({"trigger": {"every": "soon"}})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "validation_failed", "{body}");

    // Preview on the daemon agrees with the DST rules.
    let (status, preview) = api
        .post(
            "/api/schedules/preview",
            &json!({
                "trigger": {"cron": {"expression": "30 2 * * *", "timezone": "America/New_York"}},
                "count": 3,
                "from": "2026-03-07T12:00:00Z",
            }),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["timezone"], "America/New_York", "{preview}");
    let fires: Vec<i64> = preview["fires"]
        .as_array()
        .unwrap_or_else(|| panic!("no fires: {preview}"))
        .iter()
        .map(ms)
        .collect();
    let want: Vec<i64> = [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]
    .iter()
    .map(|s| ms(&json!(s)))
    .collect();
    assert_eq!(fires, want, "{preview}");

    // Missing ids.
    let (status, body) = api
        .get("/api/schedules/0190f0f0-0000-7000-8000-000000000000")
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("schedule_not_found")),
        "{body}"
    );
    let (status, body) = api
        .get("/api/runs/0190f0f0-0000-7000-8000-000000000000")
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("run_not_found")),
        "{body}"
    );
    let (status, body) = api
        .post(
            "/api/schedules/0190f0f0-0000-7000-8000-000000000000/trigger",
            &json!({}),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("schedule_not_found")),
        "{body}"
    );

    // DELETE.
    let (status, body) = api
        .send(Method::DELETE, &format!("/api/schedules/{id}"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"deleted": true, "id": id}));
    let (status, body) = api.get(&format!("/api/schedules/{id}")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("schedule_not_found")),
        "{body}"
    );
    // The name is free again.
    api.create(&spec).await;
}

// ---------------------------------------------------------------------------------------
// Gates.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_max_runs_holds_under_50_concurrent_triggers() {
    let studio = start(&[]);
    let api = std::sync::Arc::new(Api::new(&studio));
    let spec = with_policies(
        command("capped", every("1d"), "true", &[]),
        json!({"max_runs": 3, "overlap": "allow"}),
    );
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();

    let mut set = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let api = api.clone();
        let id = id.clone();
        set.spawn(async move {
            api.post(&format!("/api/schedules/{id}/trigger"), &json!({}))
                .await
        });
    }
    let answers = set.join_all().await;
    let accepted = answers.iter().filter(|(s, _)| *s == 202).count();
    let refused = answers
        .iter()
        .filter(|(s, b)| *s == 409 && b["code"] == "max_runs_reached")
        .count();
    assert_eq!(
        (accepted, refused),
        (3, 47),
        "every answer: {:?}",
        answers
            .iter()
            .map(|(s, b)| (s, &b["code"]))
            .collect::<Vec<_>>()
    );

    let runs = api
        .wait_runs(&id, "three finished runs", |runs| {
            runs.len() >= 3 && runs.iter().all(terminal)
        })
        .await;
    assert_eq!(runs.len(), 3, "{runs:?}");
    let schedule = api.schedule(&id).await;
    assert_eq!(schedule["runs_counted"], 3, "{schedule}");
    assert!(
        schedule["next_fire_at"].is_null(),
        "a schedule at max_runs is disarmed: {schedule}"
    );
    let (status, body) = api
        .post(&format!("/api/schedules/{id}/trigger"), &json!({}))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("max_runs_reached"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_overlap_skip_records_skipped_runs_while_one_runs() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let spec = with_policies(
        command("overlap/skip", every("1s"), "sleep", &["3"]),
        json!({"overlap": "skip"}),
    );
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    api.wait_runs(&id, "a finished run and overlap skips", |runs| {
        runs.iter().any(|r| r["status"] == "completed")
            && runs.iter().any(|r| is(r, "skipped", "overlap"))
    })
    .await;
    api.disable(&id).await;
    let runs = api
        .wait_runs(&id, "every run to end", |runs| runs.iter().all(terminal))
        .await;
    let ran: Vec<&Value> = runs.iter().filter(|r| r["status"] != "skipped").collect();
    for (i, a) in ran.iter().enumerate() {
        for b in &ran[i + 1..] {
            assert!(
                !overlapping(a, b),
                "two runs overlapped under skip: {a} {b}"
            );
        }
    }
    for skipped in runs.iter().filter(|r| r["status"] == "skipped") {
        assert_eq!(skipped["reason"], "overlap", "{skipped}");
        assert!(
            skipped["dispatched_at"].is_null(),
            "a skipped run never ran: {skipped}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_overlap_allow_runs_concurrently() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let spec = with_policies(
        command("overlap/allow", every("1s"), "sleep", &["3"]),
        json!({"overlap": "allow"}),
    );
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let runs = api
        .wait_runs(&id, "two completed runs", |runs| {
            runs.iter().filter(|r| r["status"] == "completed").count() >= 2
        })
        .await;
    api.disable(&id).await;
    let done: Vec<&Value> = runs.iter().filter(|r| r["status"] == "completed").collect();
    assert!(
        overlapping(done[0], done[1]),
        "allow lets the next fire run beside the first: {} {}",
        done[0],
        done[1]
    );
    assert!(
        !runs.iter().any(|r| r["status"] == "skipped"),
        "nothing skipped under allow: {runs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_overlap_replace_cancels_the_running_one() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let spec = with_policies(
        command("overlap/replace", every("2s"), "sleep", &["300"]),
        json!({"overlap": "replace"}),
    );
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let runs = api
        .wait_runs(&id, "a replaced run and its successor running", |runs| {
            runs.iter().any(|r| is(r, "cancelled", "replaced")) && runs.last().is_some_and(running)
        })
        .await;
    api.disable(&id).await;
    let replaced = runs
        .iter()
        .find(|r| is(r, "cancelled", "replaced"))
        .expect("a replaced run");
    let successor = runs.last().expect("a successor");
    assert!(
        ms(&successor["dispatched_at"]) >= ms(&replaced["finished_at"]),
        "replace cancels first, then fires: {replaced} {successor}"
    );
    let (status, _) = api
        .post(
            &format!("/api/runs/{}/cancel", successor["id"].as_str().expect("id")),
            &json!({}),
        )
        .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_global_cap_queues_and_loses_nothing() {
    let studio = start(&[("STUDIO_MAX_CONCURRENT_RUNS", "1")]);
    let api = Api::new(&studio);
    let a = api
        .create(&command("cap/a", every("1d"), "sleep", &["2"]))
        .await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let b = api
        .create(&command("cap/b", every("1d"), "sleep", &["2"]))
        .await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (ra, rb) = tokio::join!(api.trigger(&a), api.trigger(&b));
    let ids = [
        ra["id"].as_str().expect("id").to_owned(),
        rb["id"].as_str().expect("id").to_owned(),
    ];
    let mut saw_queued = false;
    let mut max_active = 0;
    let runs = until("both runs to end", WAIT, async || {
        let mut runs = Vec::new();
        for id in &ids {
            runs.push(api.try_run(id).await?);
        }
        saw_queued |= runs.iter().any(|r| r["status"] == "queued");
        max_active = max_active.max(runs.iter().filter(|r| r["status"] == "running").count());
        runs.iter().all(terminal).then_some(runs)
    })
    .await;
    assert!(saw_queued, "one of the two waited as queued");
    assert_eq!(max_active, 1, "never two running with a cap of 1");
    for r in &runs {
        assert_eq!(r["status"], "completed", "{r}");
    }
    assert!(
        runs.iter().any(|r| r["transitions"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t.to_string().contains("\"queued\"")))),
        "the queued run's transitions show it: {runs:?}"
    );
    assert!(
        !overlapping(&runs[0], &runs[1]),
        "the cap kept them apart: {runs:?}"
    );
}

// ---------------------------------------------------------------------------------------
// The runner through the daemon.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_200_mb_of_stdout_keeps_the_daemon_small() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let daemon = studio.child_pid("daemon");
    let id = api
        .create(&sh("loud", every("1d"), "head -c 200000000 /dev/zero"))
        .await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let run_id = api.trigger(&id).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let mut peak_kib = 0;
    let run = until(
        "the 200 MB run to end",
        Duration::from_secs(120),
        async || {
            peak_kib = peak_kib.max(vm_rss_kib(daemon));
            api.try_run(&run_id).await.filter(terminal)
        },
    )
    .await;
    assert_eq!(run["status"], "completed", "{}", short(&run));
    assert_eq!(run["exit_code"], 0);
    assert_eq!(run["stdout_bytes"], 200_000_000u64);
    assert!(
        peak_kib < 150 * 1024,
        "the daemon's RSS reached {peak_kib} KiB while the job wrote 200 MB"
    );
    let tail = run["stdout_tail"].as_str().unwrap_or_default();
    assert!(
        tail.len() <= 64 * 1024,
        "the tail is at most 64 KiB: {}",
        tail.len()
    );
    let (status, size, _) = api.log(&run_id, "stream=stdout&offset=0&limit=16").await;
    assert_eq!(status, 200);
    assert_eq!(
        size,
        Some(64 * 1024 * 1024),
        "the log file stops at the 64 MiB cap"
    );
}

/// The run without its (possibly huge) tails, for messages.
fn short(run: &Value) -> Value {
    let mut run = run.clone();
    for k in ["stdout_tail", "stderr_tail"] {
        run[k] = json!("…");
    }
    run
}

fn vm_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_deadline_times_out_and_leaves_no_term_ignoring_grandchild() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let pidfile = marker(&studio, "grandchild.pid");
    let script = format!(
        "trap '' TERM; (trap '' TERM; sleep 300) & echo $! > '{}'; sleep 300",
        pidfile.display()
    );
    let spec = with_policies(sh("deadline", every("1d"), &script), json!({"deadline": 1}));
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let run_id = api.trigger(&id).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let run = api.finished(&run_id).await;
    assert_eq!(run["status"], "timed_out", "{run}");
    let took = ms(&run["finished_at"]) - ms(&run["dispatched_at"]);
    assert!(
        (1_000..15_000).contains(&took),
        "deadline 1 s plus a 5 s grace, took {took} ms: {run}"
    );
    let grandchild: u32 = std::fs::read_to_string(&pidfile)
        .expect("the job wrote its grandchild's pid")
        .trim()
        .parse()
        .expect("a pid");
    let gone = until(
        "the grandchild to be gone",
        Duration::from_secs(5),
        async || (!alive(grandchild)).then_some(()),
    )
    .await;
    assert_eq!(gone, ());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_cancel_ends_a_running_job_once() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let id = api
        .create(&command("cancel", every("1d"), "sleep", &["300"]))
        .await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let run_id = api.trigger(&id).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    api.wait_run(&run_id, "the run to be running", running)
        .await;
    let (status, body) = api
        .post(&format!("/api/runs/{run_id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["id"],
        run_id.as_str(),
        "cancel answers the run: {body}"
    );
    let run = api.finished(&run_id).await;
    assert_eq!(run["status"], "cancelled", "{run}");
    let took = ms(&run["finished_at"]) - ms(&run["dispatched_at"]);
    assert!(took < 10_000, "sleep dies on TERM at once; took {took} ms");
    let (status, body) = api
        .post(&format!("/api/runs/{run_id}/cancel"), &json!({}))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("run_not_active")),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_chains_follow_the_parent_and_do_not_count() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let log = marker(&studio, "chain.log");
    let append = |word: &str| {
        json!({"action": {"kind": "command", "executable": "sh",
                          "args": ["-c", format!("echo {word} >> '{}'", log.display())]}})
    };
    let mut ok = with_policies(
        command("chain/ok", every("1d"), "true", &[]),
        json!({"max_runs": 2}),
    );
    ok["on_success"] = append("ok-success");
    ok["on_fail"] = append("ok-fail");
    let mut bad = with_policies(
        sh("chain/bad", every("1d"), "exit 3"),
        json!({"max_runs": 2}),
    );
    bad["on_success"] = append("bad-success");
    bad["on_fail"] = append("bad-fail");
    let ok_id = api.create(&ok).await["id"].as_str().expect("id").to_owned();
    let bad_id = api.create(&bad).await["id"]
        .as_str()
        .expect("id")
        .to_owned();

    for (schedule, want_parent, want_line) in [
        (&ok_id, "completed", "ok-success"),
        (&bad_id, "failed", "bad-fail"),
    ] {
        let parent = api.trigger(schedule).await;
        let parent_id = parent["id"].as_str().expect("id").to_owned();
        let parent = api.finished(&parent_id).await;
        assert_eq!(parent["status"], want_parent, "{parent}");
        let child = until("the chain child to end", WAIT, async || {
            api.try_list("/api/runs")
                .await?
                .into_iter()
                .find(|r| r["chain_parent_id"] == parent_id.as_str() && terminal(r))
        })
        .await;
        assert_eq!(child["kind"], "chain", "{child}");
        assert_eq!(child["chain_depth"], 1, "{child}");
        assert_eq!(child["status"], "completed", "{child}");
        assert!(
            ms(&child["created_at"]) >= ms(&parent["finished_at"]),
            "the child starts after the parent is terminal: {parent} {child}"
        );
        assert!(
            lines_of(&log).contains(&want_line.to_owned()),
            "{:?}",
            lines_of(&log)
        );

        // Children do not count: a second manual run fits under max_runs 2, a third not.
        let schedule_row = api.schedule(schedule).await;
        assert_eq!(schedule_row["runs_counted"], 1, "{schedule_row}");
        let second = api.trigger(schedule).await;
        api.finished(second["id"].as_str().expect("id")).await;
        let (status, body) = api
            .post(&format!("/api/schedules/{schedule}/trigger"), &json!({}))
            .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (409, Some("max_runs_reached")),
            "{body}"
        );
    }
    // Let the second parents' children finish, then check nothing ran on the wrong branch.
    until("four chain lines", WAIT, async || {
        (lines_of(&log).len() == 4).then_some(())
    })
    .await;
    let mut lines = lines_of(&log);
    lines.sort();
    assert_eq!(lines, ["bad-fail", "bad-fail", "ok-success", "ok-success"]);
}

/// A fake agent runner in `dir`: reports a spend and echoes its arguments, one a line.
fn fake_agent(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("fake-agent");
    std::fs::write(
        &path,
        "#!/bin/sh\nfor a in \"$@\"; do echo \"arg:$a\"; done\n\
         printf '{\"cost_usd\": 0.5, \"tokens\": 10}' > \"$STUDIO_RESULT_FILE\"\n",
    )
    .expect("write the fake agent");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// Starts Studio whose agent runner is the fake one, kept in the test's home.
fn start_with_fake_agent() -> Studio {
    let home = TempDir::new("home");
    let agent = fake_agent(home.path());
    let agent = agent.to_string_lossy().into_owned();
    Studio::start_in(
        home,
        &[
            ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
            ("STUDIO_SCHEDULER_TZ", "UTC"),
            ("STUDIO_AGENT_COMMAND", agent.as_str()),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_agent_runner_gets_flags_then_the_prompt_and_reports_spend() {
    let studio = start_with_fake_agent();
    let api = Api::new(&studio);
    let spec = json!({
        "name": "agent/once",
        "trigger": {"every": "1d"},
        "action": {"kind": "agent", "prompt": "--not-a-flag say hi", "model": "m1"},
    });
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let run_id = api.trigger(&id).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let run = api.finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["cost_usd"], 0.5, "{run}");
    assert_eq!(run["tokens"], 10, "{run}");
    let args: Vec<&str> = run["stdout_tail"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .collect();
    let dashdash = args
        .iter()
        .position(|a| *a == "arg:--")
        .unwrap_or_else(|| panic!("no -- in {args:?}"));
    assert_eq!(
        &args[dashdash..],
        ["arg:--", "arg:--not-a-flag say hi"],
        "the prompt is one argument after --"
    );
    let model = args.iter().position(|a| *a == "arg:--model");
    assert!(
        model.is_some_and(|m| m < dashdash && args[m + 1] == "arg:m1"),
        "--model m1 comes before --: {args:?}"
    );
    let schedule = api.schedule(&id).await;
    assert_eq!(schedule["spend_usd"], 0.5, "{schedule}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_budget_exhausted_skips_the_next_fire() {
    let studio = start_with_fake_agent();
    let api = Api::new(&studio);
    let spec = json!({
        "name": "agent/budget",
        "trigger": {"every": "2s"},
        "action": {"kind": "agent", "prompt": "spend"},
        "policies": {"budget_usd": 0.4},
    });
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let runs = api
        .wait_runs(&id, "a budget skip after the first run", |runs| {
            runs.iter().any(|r| is(r, "skipped", "budget_exhausted"))
        })
        .await;
    api.disable(&id).await;
    let ran: Vec<&Value> = runs.iter().filter(|r| r["status"] != "skipped").collect();
    assert_eq!(ran.len(), 1, "only the first fire ran: {runs:?}");
    assert_eq!(ran[0]["status"], "completed", "{}", ran[0]);
    assert_eq!(ran[0]["cost_usd"], 0.5);
    let skip = runs
        .iter()
        .find(|r| is(r, "skipped", "budget_exhausted"))
        .expect("a skip");
    assert!(ms(&skip["scheduled_at"]) > ms(&ran[0]["scheduled_at"]));
}

// ---------------------------------------------------------------------------------------
// Restarts, missed fires and crashes.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_missed_fires_fold_into_one_decision_after_downtime() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let once = with_policies(
        command("missed/run-once", every("2s"), "true", &[]),
        json!({"missed_fire": "run_once"}),
    );
    let skip = with_policies(
        command("missed/skip", every("2s"), "true", &[]),
        json!({"missed_fire": "skip"}),
    );
    let once_id = api.create(&once).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let skip_id = api.create(&skip).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    for id in [&once_id, &skip_id] {
        api.wait_runs(id, "a first completed run", |runs| {
            runs.iter().any(|r| r["status"] == "completed")
        })
        .await;
    }
    drop(api);
    let home = studio.stop_keep_home(Duration::from_secs(20));
    let stopped = now_ms();
    // A fire is late only when reached more than 60 s after its instant: stay down long
    // enough that the first missed instant (at most 2 s after the stop) is late.
    tokio::time::sleep(Duration::from_secs(64)).await;
    let restarted = now_ms();
    let studio = Studio::start_in(
        home,
        &[
            ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
            ("STUDIO_SCHEDULER_TZ", "UTC"),
        ],
    );
    let api = Api::new(&studio);
    let mut after = Vec::new();
    for id in [&once_id, &skip_id] {
        let runs = api
            .wait_runs(id, "two on-time fires after the restart", |runs| {
                runs.iter()
                    .filter(|r| r["kind"] == "scheduled" && ms(&r["scheduled_at"]) > restarted)
                    .count()
                    >= 2
            })
            .await;
        after.push(runs);
    }
    api.disable(&once_id).await;
    api.disable(&skip_id).await;

    let made_after = |runs: &[Value]| -> Vec<Value> {
        runs.iter()
            .filter(|r| ms(&r["created_at"]) >= restarted)
            .cloned()
            .collect()
    };
    let replayed = |runs: &[Value]| -> Vec<Value> {
        runs.iter()
            .filter(|r| {
                r["kind"] == "scheduled"
                    && !is(r, "skipped", "missed")
                    && r["scheduled_at"].as_str().is_some()
                    && (stopped..restarted).contains(&ms(&r["scheduled_at"]))
            })
            .cloned()
            .collect()
    };

    let once_new = made_after(&after[0]);
    let recovery: Vec<&Value> = once_new
        .iter()
        .filter(|r| r["kind"] == "recovery")
        .collect();
    assert_eq!(
        recovery.len(),
        1,
        "run_once fires exactly one recovery run: {once_new:?}"
    );
    assert!(
        !once_new.iter().any(|r| r["status"] == "skipped"),
        "run_once skips nothing: {once_new:?}"
    );
    assert_eq!(
        replayed(&after[0]),
        Vec::<Value>::new(),
        "no missed instant replayed"
    );
    let recovery = api.finished(recovery[0]["id"].as_str().expect("id")).await;
    assert_eq!(recovery["status"], "completed", "{recovery}");

    let skip_new = made_after(&after[1]);
    let skipped: Vec<&Value> = skip_new
        .iter()
        .filter(|r| is(r, "skipped", "missed"))
        .collect();
    assert_eq!(
        skipped.len(),
        1,
        "skip records exactly one skipped run: {skip_new:?}"
    );
    assert!(
        !skip_new.iter().any(|r| r["kind"] == "recovery"),
        "skip fires no recovery run: {skip_new:?}"
    );
    assert_eq!(
        replayed(&after[1]),
        Vec::<Value>::new(),
        "no missed instant replayed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_allowlist_revoked_before_the_fire_spawns_nothing() {
    let studio = Studio::start_with(&[
        ("STUDIO_COMMAND_ALLOWLIST", "sh"),
        ("STUDIO_SCHEDULER_TZ", "UTC"),
    ]);
    let api = Api::new(&studio);
    let touched = marker(&studio, "spawned");
    let spec = sh(
        "revoked",
        json!({ "at": in_secs(8) }),
        &format!("touch '{}'", touched.display()),
    );
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    drop(api);
    let home = studio.stop_keep_home(Duration::from_secs(20));
    let studio = Studio::start_in(
        home,
        &[
            ("STUDIO_COMMAND_ALLOWLIST", "true"),
            ("STUDIO_SCHEDULER_TZ", "UTC"),
        ],
    );
    let api = Api::new(&studio);
    let runs = api
        .wait_runs(&id, "the fire to end", |runs| runs.iter().any(terminal))
        .await;
    let run = &runs[0];
    assert_eq!(run["status"], "failed", "{run}");
    let reason = format!("{} {}", run["reason"], run["stderr_tail"]).to_lowercase();
    assert!(
        reason.contains("allow"),
        "the failure names the allow-list: {run}"
    );
    assert!(
        run["exit_code"].is_null(),
        "nothing exited, nothing ran: {run}"
    );
    assert!(
        run["dispatched_at"].is_null(),
        "nothing was launched: {run}"
    );
    assert!(!touched.exists(), "the revoked command was spawned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_app_crash_does_not_disturb_firing() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let daemon = studio.child_pid("daemon");
    let id = api
        .create(&command("steady", every("1s"), "true", &[]))
        .await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    api.wait_runs(&id, "three runs", |runs| runs.len() >= 3)
        .await;
    let app = studio.child_pid("app");
    signal(app, Signal::KILL);
    let killed = now_ms();
    let new_app = studio.wait_running("app", Some(app), Duration::from_secs(20));
    assert_ne!(new_app, app);
    api.wait_runs(&id, "four more seconds of fires", |runs| {
        runs.iter()
            .filter(|r| ms(&r["scheduled_at"]) > killed + 4_000)
            .count()
            >= 1
    })
    .await;
    api.disable(&id).await;
    assert_eq!(
        studio.child_pid("daemon"),
        daemon,
        "the daemon was untouched"
    );
    let runs = api.runs(&id).await;
    let instants: Vec<i64> = runs
        .iter()
        .filter(|r| r["kind"] == "scheduled")
        .map(|r| ms(&r["scheduled_at"]))
        .collect();
    for pair in instants.windows(2) {
        assert!(
            pair[1] - pair[0] <= 2_000,
            "a gap of {} ms between fires around the app crash",
            pair[1] - pair[0]
        );
    }
    for r in &runs {
        let lag = ms(&r["created_at"]) - ms(&r["scheduled_at"]);
        assert!(lag < 2_000, "fired {lag} ms late: {r}");
    }
}

/// One crash point: a one-shot schedule appends its run id to a marker; the daemon
/// aborts at `point` of that fire, the supervisor restarts it; returns the runs of the
/// occurrence, settled, and the marker's lines.
async fn crash_at(point: &str) -> (Vec<Value>, Vec<String>) {
    let studio = start(&[("STUDIO_TEST_CRASH_AT", point)]);
    let api = Api::new(&studio);
    let daemon = studio.child_pid("daemon");
    let marker = marker(&studio, "ran");
    let spec = sh(
        &format!("crash/{point}"),
        json!({ "at": in_secs(3) }),
        &format!("echo \"$STUDIO_RUN_ID\" >> '{}'", marker.display()),
    );
    let id = api.create(&spec).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let restarted = studio.wait_running("daemon", Some(daemon), Duration::from_secs(30));
    assert_ne!(restarted, daemon, "the daemon crashed at {point}");
    // Settled: every run of the occurrence ended, and a few quiet seconds changed nothing.
    let runs = api
        .wait_runs(&id, "every run to end after the crash", |runs| {
            !runs.is_empty() && runs.iter().all(terminal)
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let settled = api.runs(&id).await;
    assert_eq!(
        settled.iter().map(|r| &r["id"]).collect::<Vec<_>>(),
        runs.iter().map(|r| &r["id"]).collect::<Vec<_>>(),
        "no run appeared after the occurrence settled"
    );
    assert!(settled.iter().all(terminal), "{settled:?}");
    assert_eq!(
        studio.child_pid("daemon"),
        restarted,
        "the restarted daemon did not crash again"
    );
    // No occurrence twice among the runs that were not tombstoned.
    let mut keys = HashSet::new();
    for r in settled
        .iter()
        .filter(|r| matches!(r["kind"].as_str(), Some("scheduled" | "recovery")))
        .filter(|r| !is(r, "failed", "never_dispatched"))
    {
        assert!(
            keys.insert(r["scheduled_at"].to_string()),
            "occurrence {} appears twice: {settled:?}",
            r["scheduled_at"]
        );
    }
    let lines = lines_of(&marker);
    (settled, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_crash_after_claim_tombstones_and_replaces_once() {
    let (runs, lines) = crash_at("after_claim").await;
    let tomb: Vec<&Value> = runs
        .iter()
        .filter(|r| is(r, "failed", "never_dispatched"))
        .collect();
    assert_eq!(tomb.len(), 1, "{runs:?}");
    assert!(tomb[0]["dispatched_at"].is_null(), "{}", tomb[0]);
    let replacement: Vec<&Value> = runs
        .iter()
        .filter(|r| r["replaces_run_id"] == tomb[0]["id"])
        .collect();
    assert_eq!(replacement.len(), 1, "one replacement: {runs:?}");
    let replacement = replacement[0];
    assert_eq!(replacement["status"], "completed", "{replacement}");
    assert_eq!(
        replacement["scheduled_at"], tomb[0]["scheduled_at"],
        "same occurrence"
    );
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(
        lines,
        [replacement["id"].as_str().expect("id")],
        "the occurrence ran exactly once, as the replacement"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_crash_after_spawn_runs_at_least_once_at_most_twice() {
    let (runs, lines) = crash_at("after_spawn").await;
    assert!(
        (1..=2).contains(&lines.len()),
        "before a confirmed launch: at least once, here at most twice: {lines:?} {runs:?}"
    );
    let ended_ok = runs.iter().filter(|r| r["status"] == "completed").count();
    assert_eq!(ended_ok, 1, "one run of the occurrence completed: {runs:?}");
    for r in runs.iter().filter(|r| r["status"] != "completed") {
        assert!(
            is(r, "failed", "never_dispatched"),
            "the crashed launch was tombstoned: {r}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_crash_after_dispatch_is_daemon_lost_and_never_rerun() {
    let (runs, lines) = crash_at("after_dispatch").await;
    assert_eq!(runs.len(), 1, "never re-fired: {runs:?}");
    assert!(is(&runs[0], "failed", "daemon_lost"), "{}", runs[0]);
    assert!(!runs[0]["dispatched_at"].is_null(), "{}", runs[0]);
    assert!(lines.len() <= 1, "at most once after launch: {lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_crash_before_finish_is_daemon_lost_and_never_rerun() {
    let (runs, lines) = crash_at("before_finish").await;
    assert_eq!(runs.len(), 1, "never re-fired: {runs:?}");
    assert!(is(&runs[0], "failed", "daemon_lost"), "{}", runs[0]);
    assert_eq!(
        lines,
        [runs[0]["id"].as_str().expect("id")],
        "the job had ended once before the crash"
    );
}

// ---------------------------------------------------------------------------------------
// The event stream.

#[derive(Debug, Clone)]
struct Event {
    id: u64,
    kind: String,
    data: String,
}

impl Event {
    fn mentions(&self, run_id: &str) -> bool {
        self.data.contains(run_id)
    }
}

/// Opens `GET /api/events` (resuming after `last` when given) and, once the headers are
/// in, reads it in a task that sends each event on the returned channel.
async fn events(
    studio: &Studio,
    last: Option<u64>,
) -> (JoinHandle<()>, mpsc::UnboundedReceiver<Event>) {
    // No overall timeout: the body never ends.
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let mut req = client
        .get(studio.daemon_url("/api/events"))
        .bearer_auth(studio.token());
    if let Some(last) = last {
        req = req.header("last-event-id", last.to_string());
    }
    let resp = req.send().await.expect("events request");
    assert_eq!(resp.status(), 200);
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut body = resp.bytes_stream();
        let mut buf = Vec::new();
        let (mut id, mut kind, mut data) = (None, String::new(), Vec::<String>::new());
        while let Some(Ok(chunk)) = body.next().await {
            buf.extend_from_slice(&chunk);
            while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let line = String::from_utf8_lossy(&line);
                let line = line.trim_end_matches(['\n', '\r']);
                if line.is_empty() {
                    if !data.is_empty() {
                        let event = Event {
                            id: id.unwrap_or(0),
                            kind: std::mem::take(&mut kind),
                            data: data.join("\n"),
                        };
                        if tx.send(event).is_err() {
                            return;
                        }
                    }
                    data.clear();
                    kind.clear();
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "id" => id = value.parse().ok(),
                    "event" => kind = value.to_owned(),
                    "data" => data.push(value.to_owned()),
                    _ => {}
                }
            }
        }
    });
    (task, rx)
}

/// Receives into `seen` until `done(seen)`.
async fn receive(
    rx: &mut mpsc::UnboundedReceiver<Event>,
    seen: &mut Vec<Event>,
    what: &str,
    done: impl Fn(&[Event]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done(seen) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(e)) => seen.push(e),
            Ok(None) => panic!("the event stream ended while waiting for {what}"),
            Err(_) => panic!("no {what} within {WAIT:?}; got {seen:?}"),
        }
    }
}

fn saw_end(events: &[Event], run_id: &str) -> bool {
    events
        .iter()
        .any(|e| e.kind == "run" && e.mentions(run_id) && e.data.contains("\"completed\""))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_events_stream_runs_and_resumes_after_last_event_id() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let id = api
        .create(&with_policies(
            command("events", every("1d"), "true", &[]),
            json!({"overlap": "allow"}),
        ))
        .await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (witness_task, mut witness_rx) = events(&studio, None).await;
    let mut witness = Vec::new();

    let (first_task, mut first_rx) = events(&studio, None).await;
    let mut first = Vec::new();
    let run1 = api.trigger(&id).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    receive(&mut first_rx, &mut first, "run 1's completion", |e| {
        saw_end(e, &run1)
    })
    .await;
    let last = first.last().expect("an event").id;
    assert!(last > 0, "events carry ids: {first:?}");
    first_task.abort();
    drop(first_rx);

    let run2 = api.trigger(&id).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let run3 = api.trigger(&id).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    receive(&mut witness_rx, &mut witness, "runs 2 and 3 ending", |e| {
        saw_end(e, &run2) && saw_end(e, &run3)
    })
    .await;
    let upto = witness.last().expect("an event").id;

    let (resumed_task, mut resumed_rx) = events(&studio, Some(last)).await;
    let mut resumed = Vec::new();
    receive(
        &mut resumed_rx,
        &mut resumed,
        "the resumed stream to catch up",
        |e| e.last().is_some_and(|e| e.id >= upto),
    )
    .await;
    resumed_task.abort();
    witness_task.abort();

    let ids: Vec<u64> = resumed.iter().map(|e| e.id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids strictly increase, no duplicates: {ids:?}"
    );
    assert!(
        ids.iter().all(|i| *i > last),
        "nothing at or before {last}: {ids:?}"
    );
    let want: Vec<u64> = witness
        .iter()
        .map(|e| e.id)
        .filter(|i| *i > last && *i <= upto)
        .collect();
    let got: Vec<u64> = ids.iter().copied().filter(|i| *i <= upto).collect();
    assert_eq!(got, want, "exactly the events after {last}");
    assert!(saw_end(&resumed, &run2) && saw_end(&resumed, &run3));
    assert!(
        !resumed.iter().any(|e| e.mentions(&run1)),
        "nothing about run 1 again: {resumed:?}"
    );
    let first_ids: Vec<u64> = first.iter().map(|e| e.id).collect();
    assert!(first_ids.windows(2).all(|w| w[0] < w[1]), "{first_ids:?}");
}
