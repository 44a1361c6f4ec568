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
use serde_json::{Value, json};
use studio_tests::{Studio, TempDir, free_port, studio_cmd, wait_for};

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

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
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

    async fn send(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .client
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if method != Method::GET {
            req = req
                .header("content-type", "application/json")
                .body(body.unwrap_or_else(|| json!({})).to_string());
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// The schedule named `name`, if any.
    async fn named(&self, name: &str) -> Option<Value> {
        let (status, list) = self
            .send(
                Method::GET,
                &format!("/api/schedules?q={name}&limit=500"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{list}");
        list["schedules"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == name).cloned())
    }

    async fn must(&self, name: &str) -> Value {
        self.named(name)
            .await
            .unwrap_or_else(|| panic!("no schedule {name}"))
    }
}

fn ms(v: &Value) -> i64 {
    v.as_str()
        .and_then(|s| s.parse::<Timestamp>().ok())
        .map(|t| t.as_millisecond())
        .unwrap_or_else(|| panic!("not an instant: {v}"))
}
