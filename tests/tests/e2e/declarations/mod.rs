//! Schedules as code from outside (docs/DECLARATIONS.md): the real `studio` CLI's
//! validate, plan, apply, export and everyday verbs against a real studiod.

use std::{
    io::{Read, Write},
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Output, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use jiff::Timestamp;
use reqwest::Method;
use serde::{Serialize, de::DeserializeOwned};
use studio_api::{Schedule, SchedulePage, schedule::ScheduleSpec};
use studio_tests::{
    Reply, Studio, TempDir,
    api::{command_spec, every},
    free_port, studio_cmd, wait_for,
};

mod apply;
mod export;
mod validate;
mod verbs;

/// Executables the documents run.
const ALLOW: &str = "true,sh,sleep";

fn start() -> Studio {
    Studio::start_with(&[
        ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
        ("STUDIO_SCHEDULER_TZ", "UTC"),
    ])
}

/// What one CLI run left behind.
#[derive(Debug)]
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn of(out: Output) -> Self {
        Self {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Its stdout, as the API type `--json` prints.
    fn json<T: DeserializeOwned>(&self) -> T {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not a body ({e}): {self:?}"))
    }

    /// Asserts the exit status and returns self.
    fn exits(self, code: i32) -> Self {
        assert_eq!(self.code, code, "{self:?}");
        self
    }
}

/// `studio <args> --home <home>` in `dir`, with the tests' allow-list and zone.
fn cli(studio: &Studio, dir: &Path, args: &[&str]) -> Ran {
    Ran::of(studio.cli_env(
        args,
        &[
            ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
            ("STUDIO_SCHEDULER_TZ", "UTC"),
        ],
        Some(dir),
    ))
}

/// A ScheduleSet in YAML; `members` is the indented body of `schedules:`.
fn doc(project: &str, name: &str, members: &str) -> String {
    format!(
        "apiVersion: studio/v1\nkind: ScheduleSet\nmetadata: {{name: {name}, project: {project}}}\nschedules:\n{members}"
    )
}

fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(&path, text).expect("write fixture");
    path
}

/// Every path under `dir`, relative and sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            out.push(
                path.strip_prefix(dir)
                    .expect("under dir")
                    .display()
                    .to_string(),
            );
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

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

    /// One request with `body` as its JSON text (none for a route that takes none).
    async fn send(&self, method: Method, path: &str, body: Option<String>) -> Reply {
        let mut req = self
            .client
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if method != Method::GET {
            req = req.header("content-type", "application/json");
        }
        if let Some(body) = body {
            req = req.body(body);
        }
        Reply::of(req.send().await.expect("request")).await
    }

    async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: &impl Serialize) -> Reply {
        let body = serde_json::to_string(body).expect("a request body");
        self.send(Method::POST, path, Some(body)).await
    }

    /// The schedule named `name`, if any.
    async fn named(&self, name: &str) -> Option<Schedule> {
        let list: SchedulePage = self
            .get(&format!("/api/schedules?q={name}&limit=500"))
            .await
            .expect(200);
        list.schedules.into_iter().find(|s| s.name == name)
    }

    async fn must(&self, name: &str) -> Schedule {
        self.named(name)
            .await
            .unwrap_or_else(|| panic!("no schedule {name}"))
    }
}

/// A hand-made command schedule, as the API takes it.
fn command(name: &str, interval: &str, executable: &str) -> ScheduleSpec {
    command_spec(name, every(interval), executable, &[])
}

fn ms(v: &str) -> i64 {
    v.parse::<Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
        .unwrap_or_else(|| panic!("not an instant: {v}"))
}
