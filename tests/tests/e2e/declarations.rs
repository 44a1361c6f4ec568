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

// ---------------------------------------------------------------------------------------
// validate: local only.

const BAD: &str = r#"apiVersion: studio/v1
kind: ScheduleSet
metadata: {name: nightly, project: demo}
schedules:
  reindex:
    trigger: {cron: {expression: "0 0 31 2 *"}}
    action: {kind: command, executable: "true"}
  report:
    name: demo/report
    trigger: {every: 5 minutes}
    action: {kind: command, executable: "true"}
    policies: {bogus: 1}
"#;

const GOOD: &str = r#"apiVersion: studio/v1
kind: ScheduleSet
metadata: {name: nightly, project: other}
schedules:
  a:
    trigger: {every: 1h}
    action: {kind: command, executable: rm}
"#;

const DUP: &str = r#"{"apiVersion": "studio/v1", "kind": "ScheduleSet",
 "metadata": {"name": "weekly", "project": "other"},
 "schedules": {
   "a": {"trigger": {"at": "2099-01-01T00:00:00Z"}, "action": {"kind": "command", "executable": "true"}}}}
"#;

const TOML: &str = r#"apiVersion = "studio/v1"
kind = "ScheduleSet"

[metadata]
name = "tomly"
project = "third"

[schedules.t.trigger]
every = "15m"

[schedules.t.action]
kind = "command"
executable = "true"
"#;

#[test]
fn declarations_validate_is_local_exact_and_writes_nothing() {
    let tmp = TempDir::new("decl-val");
    let docs = tmp.path().join("docs");
    let home = tmp.path().join("home");
    let fake_user = tmp.path().join("user");
    for d in [&home, &fake_user] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    write(&docs, "bad.yaml", BAD);
    write(&docs, "good.yaml", GOOD);
    write(&docs, "dup.json", DUP);
    write(&docs, "ok.toml", TOML);
    let docs_before = tree(&docs);
    // A listener that would see any connection: validate must make none.
    let trap = TcpListener::bind("127.0.0.1:0").expect("bind");
    trap.set_nonblocking(true).expect("nonblocking");
    let trap_url = format!("http://{}", trap.local_addr().expect("addr"));
    let home_s = home.display().to_string();
    let user_s = fake_user.display().to_string();
    let validate = |files: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["schedule", "validate"];
        args.extend_from_slice(files);
        let mut all = vec![
            ("STUDIO_COMMAND_ALLOWLIST", "true,sh"),
            ("STUDIO_SCHEDULER_TZ", "UTC"),
            ("STUDIO_DAEMON_URL", trap_url.as_str()),
            ("HOME", user_s.as_str()),
        ];
        all.extend_from_slice(env);
        Ran::of(
            studio_cmd(&args, &all, Some(&docs))
                .env_remove("XDG_STATE_HOME")
                .stdin(Stdio::null())
                .output()
                .expect("run studio"),
        )
    };

    // Every problem at once, each at the line and column of the offending value.
    let ran = validate(&["bad.yaml"], &[("STUDIO_HOME", &home_s)]).exits(2);
    assert_eq!(ran.stdout, "");
    let lines: Vec<&str> = ran.stderr.lines().collect();
    assert_eq!(
        lines,
        [
            r#"bad.yaml:6:34: schedules.reindex.trigger.cron.expression: "0 0 31 2 *" can never fire (no such date)"#,
            "bad.yaml:9:5: schedules.report.name: a member may not set name: its stored name is <project>/<member key>",
            "bad.yaml:10:22: schedules.report.trigger.every: unexpected ' ': use s, m, h or d units, like 90s or 1h30m",
            "bad.yaml:12:16: schedules.report.policies.bogus: unknown field `bogus`, expected one of `missed_fire`, `overlap`, `max_runs`, `deadline`, `budget_usd`, `rate_limit`",
        ],
        "{ran:?}"
    );

    // A name declared twice across files is an error at its second place; an
    // executable off the allow-list only a warning.
    let ran = validate(&["good.yaml", "dup.json", "ok.toml"], &[]).exits(2);
    assert_eq!(
        ran.stderr.lines().collect::<Vec<_>>(),
        [
            "dup.json:4:4: schedules.a: schedule other/a is also declared at good.yaml:5:3",
            r#"good.yaml:7:41: warning: schedules.a.action.executable: "rm" is not on the command allow-list (STUDIO_COMMAND_ALLOWLIST); the daemon's list decides"#,
        ],
        "{ran:?}"
    );
    let ran = validate(&["good.yaml", "ok.toml"], &[("STUDIO_HOME", &home_s)]).exits(0);
    assert_eq!(ran.stderr.lines().count(), 1, "only the warning: {ran:?}");
    let ran = validate(&["ok.toml"], &[]).exits(0);
    assert_eq!((ran.stdout.as_str(), ran.stderr.as_str()), ("", ""));

    // --home naming a directory that does not exist: it is not created either.
    let missing = tmp.path().join("no-such-home");
    let missing_s = missing.display().to_string();
    validate(&["ok.toml", "--home", &missing_s], &[]).exits(0);
    // A missing file is a diagnostic, not a crash.
    let ran = validate(&["nope.yaml"], &[]).exits(2);
    assert!(ran.stderr.starts_with("nope.yaml:1:1: "), "{ran:?}");

    assert!(tree(&home).is_empty(), "validate wrote {:?}", tree(&home));
    assert!(
        tree(&fake_user).is_empty(),
        "the default home was touched: {:?}",
        tree(&fake_user)
    );
    assert!(!missing.exists(), "--home was created");
    assert_eq!(
        tree(&docs),
        docs_before,
        "validate wrote beside the documents"
    );
    assert!(
        matches!(trap.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "validate connected to STUDIO_DAEMON_URL"
    );
}

// ---------------------------------------------------------------------------------------
// plan and apply.

const THREE: &str = r#"  a:
    trigger: {every: 1h}
    action: {kind: command, executable: "true"}
  b:
    trigger: {cron: {expression: "0 2 * * *", timezone: Europe/Berlin}}
    action: {kind: command, executable: sh, args: ["-c", "echo b"]}
  c:
    trigger: {at: "2099-01-01T00:00:00Z"}
    action: {kind: command, executable: "true"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarations_plan_apply_reapply_update_and_prune() {
    let studio = start();
    let api = Api::new(&studio);
    let dir = TempDir::new("decl-apply");
    let file = write(dir.path(), "jobs.yaml", &doc("demo", "nightly", THREE));
    let f = file.to_str().expect("utf-8 path");

    let ran = cli(&studio, dir.path(), &["schedule", "plan", f]).exits(1);
    assert_eq!(
        ran.stdout,
        "+ create demo/a\n+ create demo/b\n+ create demo/c\nplan: 3 to create, 0 unchanged\n"
    );
    assert!(api.named("demo/a").await.is_none(), "plan wrote");

    // No terminal and no --yes: refused, with the hint, and nothing written.
    let ran = cli(&studio, dir.path(), &["schedule", "apply", f]).exits(2);
    assert!(ran.stderr.contains("pass --yes"), "{ran:?}");
    assert!(api.named("demo/a").await.is_none(), "applied unasked");

    let ran = cli(&studio, dir.path(), &["schedule", "apply", f, "--yes"]).exits(0);
    assert!(
        ran.stdout.ends_with("applied: 3 created, 0 unchanged\n"),
        "{ran:?}"
    );
    let before: Vec<Value> = vec![
        api.must("demo/a").await,
        api.must("demo/b").await,
        api.must("demo/c").await,
    ];

    // Re-applying changes nothing, not even updated_at.
    let ran = cli(&studio, dir.path(), &["schedule", "plan", f]).exits(0);
    assert!(
        ran.stdout.ends_with("nothing to do (3 unchanged)\n"),
        "{ran:?}"
    );
    cli(&studio, dir.path(), &["schedule", "apply", f, "--yes"]).exits(0);
    for old in &before {
        let now = api.must(old["name"].as_str().expect("name")).await;
        for key in ["revision", "updated_at", "next_fire_at"] {
            assert_eq!(now[key], old[key], "{key} moved on a no-op apply: {now}");
        }
    }

    // An update shows its fields and recomputes the next fire.
    let changed = THREE.replace("every: 1h", "every: 3h");
    write(dir.path(), "jobs.yaml", &doc("demo", "nightly", &changed));
    let ran = cli(&studio, dir.path(), &["schedule", "plan", f]).exits(1);
    assert_eq!(
        ran.stdout,
        "~ update demo/a\n    trigger.every: 1h → 3h\n= unchanged demo/b\n= unchanged demo/c\nplan: 1 to update, 2 unchanged\n"
    );
    let applied_at = Timestamp::now().as_millisecond();
    let ran = cli(&studio, dir.path(), &["schedule", "apply", f, "--yes"]).exits(0);
    assert!(
        ran.stdout.ends_with("applied: 1 updated, 2 unchanged\n"),
        "{ran:?}"
    );
    let a = api.must("demo/a").await;
    let next = ms(&a["next_fire_at"]);
    assert!(
        (applied_at + 3 * 3_600_000 - 5_000..=applied_at + 3 * 3_600_000 + 60_000).contains(&next),
        "a new 3h timeline starts at the update: {a}"
    );
    assert!(
        a["revision"].as_i64() > before[0]["revision"].as_i64(),
        "{a}"
    );

    // A member that left the document is disabled; with --prune, deleted.
    let without_c = THREE.split("  c:\n").next().expect("split").to_owned();
    write(dir.path(), "jobs.yaml", &doc("demo", "nightly", &without_c));
    let ran = cli(&studio, dir.path(), &["schedule", "plan", f]).exits(1);
    assert!(ran.stdout.contains("- disable demo/c\n"), "{ran:?}");
    cli(&studio, dir.path(), &["schedule", "apply", f, "--yes"]).exits(0);
    assert_eq!(api.must("demo/c").await["enabled"], false);
    let ran = cli(&studio, dir.path(), &["schedule", "plan", f, "--prune"]).exits(1);
    assert!(ran.stdout.contains("x delete demo/c\n"), "{ran:?}");
    cli(
        &studio,
        dir.path(),
        &["schedule", "apply", f, "--prune", "--yes"],
    )
    .exits(0);
    assert!(api.named("demo/c").await.is_none(), "pruned");
    assert!(api.named("demo/a").await.is_some());

    // Invalid content stops before the daemon: exit 2 with the position.
    write(
        dir.path(),
        "broken.yaml",
        &doc(
            "demo",
            "nightly",
            "  x:\n    trigger: {every: 0s}\n    action: {kind: command, executable: \"true\"}\n",
        ),
    );
    let ran = cli(
        &studio,
        dir.path(),
        &["schedule", "apply", "broken.yaml", "--yes"],
    )
    .exits(2);
    assert!(ran.stderr.starts_with("broken.yaml:6:"), "{ran:?}");
    assert!(api.named("demo/x").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarations_refuse_adopting_a_hand_made_schedule_and_a_concurrent_edit() {
    let studio = start();
    let api = Api::new(&studio);
    let dir = TempDir::new("decl-conflict");

    // A hand-made schedule whose name a document claims: an error, nothing written.
    let (status, body) = api
        .send(
            Method::POST,
            "/api/schedules",
            Some(json!({"name": "demo/manual", "trigger": {"every": "1h"},
                        "action": {"kind": "command", "executable": "true"}})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let members = "  manual:\n    trigger: {every: 2h}\n    action: {kind: command, executable: \"true\"}\n  fresh:\n    trigger: {every: 1h}\n    action: {kind: command, executable: \"true\"}\n";
    write(dir.path(), "claim.yaml", &doc("demo", "claim", members));
    let ran = cli(&studio, dir.path(), &["schedule", "plan", "claim.yaml"]).exits(2);
    assert!(
        ran.stdout
            .lines()
            .any(|l| l.starts_with("! error demo/manual: ")),
        "{ran:?}"
    );
    let ran = cli(
        &studio,
        dir.path(),
        &["schedule", "apply", "claim.yaml", "--yes"],
    )
    .exits(2);
    assert!(ran.stderr.contains("nothing applied"), "{ran:?}");
    assert!(api.named("demo/fresh").await.is_none(), "half-applied");
    assert_eq!(
        api.must("demo/manual").await["spec"]["trigger"]["every"],
        "1h"
    );

    // Plan, then someone edits the row, then apply: refused, naming the row.
    write(
        dir.path(),
        "team.yaml",
        &doc(
            "team",
            "t",
            "  job:\n    trigger: {every: 1h}\n    action: {kind: command, executable: \"true\"}\n",
        ),
    );
    cli(
        &studio,
        dir.path(),
        &["schedule", "apply", "team.yaml", "--yes"],
    )
    .exits(0);
    write(
        dir.path(),
        "team.yaml",
        &doc(
            "team",
            "t",
            "  job:\n    trigger: {every: 2h}\n    action: {kind: command, executable: \"true\"}\n",
        ),
    );
    let job = api.must("team/job").await;
    let id = job["id"].as_str().expect("id").to_owned();
    let mut apply = Prompted::spawn(&studio, dir.path(), &["schedule", "apply", "team.yaml"]);
    apply.wait_for_prompt();
    assert!(
        apply.stdout().contains("~ update team/job"),
        "{}",
        apply.stdout()
    );
    let (status, body) = api
        .send(
            Method::PATCH,
            &format!("/api/schedules/{id}"),
            Some(json!({"description": "edited by hand"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let ran = apply.answer("y\n");
    assert_eq!(ran.code, 1, "{ran:?}");
    // The prompt's line ends with the answer echoed on the terminal, not on stderr.
    let line = ran.stderr.lines().last().unwrap_or_default();
    assert!(
        line.ends_with("re-run `studio schedule plan` and apply again")
            && line.contains("studio: conflict: ")
            && line.contains("team/job"),
        "{ran:?}"
    );
    let now = api.must("team/job").await;
    assert_eq!(
        now["spec"]["trigger"]["every"], "1h",
        "nothing applied: {now}"
    );
    assert_eq!(now["spec"]["description"], "edited by hand");

    // Declining at the prompt applies nothing; accepting applies.
    let mut apply = Prompted::spawn(&studio, dir.path(), &["schedule", "apply", "team.yaml"]);
    apply.wait_for_prompt();
    let ran = apply.answer("n\n");
    assert_eq!(ran.code, 1, "{ran:?}");
    assert_eq!(api.must("team/job").await["spec"]["trigger"]["every"], "1h");
    let mut apply = Prompted::spawn(&studio, dir.path(), &["schedule", "apply", "team.yaml"]);
    apply.wait_for_prompt();
    let ran = apply.answer("y\n");
    assert_eq!(ran.code, 0, "{ran:?}");
    let now = api.must("team/job").await;
    assert_eq!(now["spec"]["trigger"]["every"], "2h", "{now}");
}

/// `studio schedule apply` on a pseudo-terminal, so it asks; stdout and stderr piped.
struct Prompted {
    child: std::process::Child,
    master: std::fs::File,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Prompted {
    fn spawn(studio: &Studio, dir: &Path, args: &[&str]) -> Self {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        let name = ptsname(&master, Vec::new()).expect("ptsname");
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().expect("pts name"))
            .expect("open the pts");
        let mut full: Vec<&str> = args.to_vec();
        let home = studio.home_path().display().to_string();
        full.extend(["--home", home.as_str()]);
        let mut child = studio_cmd(
            &full,
            &[
                ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
                ("STUDIO_SCHEDULER_TZ", "UTC"),
            ],
            Some(dir),
        )
        .stdin(Stdio::from(slave))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn studio");
        let mut readers = Vec::new();
        let mut pipe = |src: Box<dyn Read + Send>| {
            let buf = Arc::new(Mutex::new(Vec::new()));
            let sink = buf.clone();
            readers.push(std::thread::spawn(move || {
                let mut src = src;
                let mut chunk = [0u8; 4096];
                while let Ok(n) = src.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    sink.lock().expect("lock").extend_from_slice(&chunk[..n]);
                }
            }));
            buf
        };
        let stdout = pipe(Box::new(child.stdout.take().expect("stdout")));
        let stderr = pipe(Box::new(child.stderr.take().expect("stderr")));
        Self {
            child,
            master: std::fs::File::from(master),
            stdout,
            stderr,
            readers,
        }
    }

    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().expect("lock")).into_owned()
    }

    fn wait_for_prompt(&mut self) {
        let asked = wait_for(Duration::from_secs(20), || {
            let err = String::from_utf8_lossy(&self.stderr.lock().expect("lock")).into_owned();
            err.contains("[y/N]").then_some(())
        });
        if asked.is_none() {
            let _ = self.child.kill();
            panic!(
                "no prompt: stdout {:?} stderr {:?}",
                self.stdout(),
                String::from_utf8_lossy(&self.stderr.lock().expect("lock"))
            );
        }
    }

    fn answer(mut self, text: &str) -> Ran {
        self.master.write_all(text.as_bytes()).expect("answer");
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("apply did not finish after the answer");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        Ran {
            code: status.code().unwrap_or(-1),
            stdout: self.stdout(),
            stderr: String::from_utf8_lossy(&self.stderr.lock().expect("lock")).into_owned(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// export, layout, tokens.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarations_export_then_apply_is_a_no_op() {
    let studio = start();
    let api = Api::new(&studio);
    let dir = TempDir::new("decl-export");
    std::fs::create_dir_all(dir.path().join("work")).expect("mkdir");
    let members = r#"  cron-berlin:
    description: nightly in Berlin
    trigger: {cron: {expression: "0 2 * * *", timezone: Europe/Berlin}}
    action: {kind: command, executable: sh, args: ["-c", "echo one", "x y"]}
    policies: {missed_fire: run_once, overlap: skip, deadline: 3600}
  cron-default:
    trigger: {cron: {expression: "*/15 9-17 * * 1-5"}}
    action: {kind: command, executable: "true"}
    env: {GREETING: "hello: world", EMPTY: ""}
  cron-seconds:
    enabled: false
    trigger: {cron: {expression: "30 0 0 1 * *", timezone: America/New_York}}
    action: {kind: command, executable: "true"}
  every-short:
    trigger: {every: 90s}
    action: {kind: command, executable: sleep, args: ["1"]}
    cwd: work
    policies: {max_runs: 5, budget_usd: 2.5, rate_limit: {max_fires: 3, window_seconds: 60}}
  every-long:
    trigger: {every: 1h30m}
    action: {kind: agent, prompt: "summarise: the day", model: small}
    on_success:
      action: {kind: command, executable: "true"}
      on_fail: {action: {kind: command, executable: sh, args: ["-c", "exit 1"]}}
  at-new-year:
    trigger: {at: "2099-01-01T00:00:00+01:00"}
    action: {kind: command, executable: "true"}
  at-utc:
    trigger: {at: "2098-06-30T12:34:56Z"}
    action: {kind: command, executable: "true"}
    policies: {overlap: replace}
"#;
    write(dir.path(), "all.yaml", &doc("demo", "everything", members));
    cli(
        &studio,
        dir.path(),
        &["schedule", "apply", "all.yaml", "--yes"],
    )
    .exits(0);
    // A hand-made schedule elsewhere, and one no document can hold.
    for name in ["loose", "x/y/z"] {
        let (status, body) = api
            .send(
                Method::POST,
                "/api/schedules",
                Some(json!({"name": name, "trigger": {"every": "1h"},
                            "action": {"kind": "command", "executable": "true"}})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let mut before = Vec::new();
    for m in [
        "cron-berlin",
        "cron-default",
        "cron-seconds",
        "every-short",
        "every-long",
        "at-new-year",
        "at-utc",
    ] {
        before.push(api.must(&format!("demo/{m}")).await);
    }

    let ran = cli(
        &studio,
        dir.path(),
        &["schedule", "export", "--out", "exported"],
    )
    .exits(0);
    assert!(
        ran.stderr.lines().any(|l| l.starts_with("BLOCKED x/y/z: ")),
        "{ran:?}"
    );
    let mut files = tree(&dir.path().join("exported"));
    files.sort();
    assert_eq!(files, ["default.yaml", "demo.yaml"]);
    let yaml = std::fs::read_to_string(dir.path().join("exported/demo.yaml")).expect("read");
    assert!(yaml.contains("name: everything"), "{yaml}");
    // Without --out, the same document on stdout.
    let ran = cli(
        &studio,
        dir.path(),
        &["schedule", "export", "--project", "demo"],
    )
    .exits(0);
    assert_eq!(ran.stdout, yaml);

    let ran = cli(
        &studio,
        dir.path(),
        &["schedule", "plan", "exported/demo.yaml"],
    )
    .exits(0);
    assert!(
        ran.stdout.ends_with("nothing to do (7 unchanged)\n"),
        "{ran:?}"
    );
    cli(
        &studio,
        dir.path(),
        &["schedule", "apply", "exported/demo.yaml", "--yes"],
    )
    .exits(0);
    for old in &before {
        let now = api.must(old["name"].as_str().expect("name")).await;
        assert_eq!(now["spec"], old["spec"]);
        for key in ["revision", "updated_at", "next_fire_at", "enabled"] {
            assert_eq!(now[key], old[key], "{key} moved: {now}");
        }
    }
    // The export also validates locally as it is.
    cli(
        &studio,
        dir.path(),
        &["schedule", "validate", "exported/demo.yaml"],
    )
    .exits(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarations_relative_cwd_resolves_against_the_document() {
    let studio = start();
    let api = Api::new(&studio);
    let dir = TempDir::new("decl-git");
    std::fs::create_dir_all(dir.path().join("repo/scripts")).expect("mkdir");
    write(
        dir.path(),
        "repo/schedules/team/nightly.yaml",
        &doc(
            "team",
            "nightly",
            "  build:\n    trigger: {every: 1h}\n    action: {kind: command, executable: \"true\"}\n    cwd: ../../scripts\n",
        ),
    );
    // Run from elsewhere, naming the file relatively: the document's folder anchors cwd.
    cli(
        &studio,
        dir.path(),
        &[
            "schedule",
            "apply",
            "repo/schedules/team/nightly.yaml",
            "--yes",
        ],
    )
    .exits(0);
    let build = api.must("team/build").await;
    let cwd = build["spec"]["cwd"].as_str().expect("cwd stored");
    assert!(Path::new(cwd).is_absolute(), "{build}");
    let expected = dir
        .path()
        .join("repo/scripts")
        .canonicalize()
        .expect("canon");
    assert_eq!(
        Path::new(cwd)
            .canonicalize()
            .expect("the stored cwd exists"),
        expected,
        "{cwd}"
    );
    // From inside the repository, the same document plans as unchanged.
    let ran = cli(
        &studio,
        &dir.path().join("repo/schedules"),
        &["schedule", "plan", "team/nightly.yaml"],
    );
    assert_eq!(ran.code, 0, "cwd {cwd}: {ran:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarations_cli_errors_say_how_to_fix_them() {
    let studio = start();
    let dir = TempDir::new("decl-tok");
    let daemon = studio.daemon_url("");
    let run = |args: &[&str], env: &[(&str, &str)]| {
        Ran::of(
            studio_cmd(args, env, Some(dir.path()))
                .stdin(Stdio::null())
                .output()
                .expect("run studio"),
        )
    };
    let home = studio.home_path().display().to_string();

    // The right home finds its daemon by itself (the supervisor knows the port).
    run(&["schedule", "list", "--home", &home], &[]).exits(0);

    let ran = run(
        &["schedule", "list", "--home", &home],
        &[("STUDIO_TOKEN", "wrong")],
    )
    .exits(1);
    assert_eq!(
        ran.stderr.trim_end(),
        "studio: the daemon refused the token (401 unauthorized): check STUDIO_TOKEN, or unset it to use the home's run/token"
    );
    // A home without a token: one line saying what to do.
    let empty = dir.path().join("empty-home");
    let empty_s = empty.display().to_string();
    let ran = run(
        &["schedule", "list", "--home", &empty_s, "--daemon", &daemon],
        &[],
    )
    .exits(1);
    assert!(
        ran.stderr.starts_with(
            "studio: no token: set STUDIO_TOKEN or run on the machine where `studio up` runs"
        ) && ran.stderr.lines().count() == 1,
        "{ran:?}"
    );
    assert!(!empty.exists(), "a client command created the home");
    // Another home's token file for this daemon: refused, naming the file.
    let other = dir.path().join("other-home");
    std::fs::create_dir_all(other.join("run")).expect("mkdir");
    std::fs::write(other.join("run/token"), "not-it").expect("token");
    std::fs::set_permissions(
        other.join("run/token"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    let other_s = other.display().to_string();
    let ran = run(
        &["runs", "--home", &other_s],
        &[("STUDIO_DAEMON_URL", &daemon)],
    )
    .exits(1);
    assert!(
        ran.stderr
            .starts_with("studio: the daemon refused the token (401 unauthorized): ")
            && ran.stderr.contains("run/token"),
        "{ran:?}"
    );
    // Nothing listening: start it.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let ran = run(
        &["schedule", "list", "--daemon", &closed],
        &[("STUDIO_TOKEN", "t")],
    )
    .exits(1);
    assert!(
        ran.stderr
            .starts_with(&format!("studio: studiod is not reachable at {closed} "))
            && ran.stderr.contains("start it with `studio up`")
            && ran.stderr.lines().count() == 1,
        "{ran:?}"
    );
    // A URL that is not an origin is a usage error.
    let ran = run(
        &["runs", "--daemon", "http://127.0.0.1:1/api"],
        &[("STUDIO_TOKEN", "t")],
    )
    .exits(2);
    assert!(ran.stderr.contains("--daemon"), "{ran:?}");
    // The API's own errors read `code: message`.
    let ran = run(&["run", "show", "nope", "--home", &home], &[]).exits(1);
    assert!(ran.stderr.starts_with("studio: run_not_found: "), "{ran:?}");
    let ran = run(&["schedule", "show", "no/such", "--home", &home], &[]).exits(1);
    assert!(
        ran.stderr.contains("no schedule named \"no/such\""),
        "{ran:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Everyday verbs, as scripts use them.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarations_everyday_verbs_with_json() {
    let studio = start();
    let dir = TempDir::new("decl-verbs");
    let members = "  hello:\n    trigger: {every: 1h}\n    action: {kind: command, executable: sh, args: [\"-c\", \"echo hello; echo oops >&2\"]}\n  slow:\n    trigger: {every: 1h}\n    action: {kind: command, executable: sleep, args: [\"30\"]}\n";
    write(dir.path(), "verbs.yaml", &doc("ops", "verbs", members));
    cli(
        &studio,
        dir.path(),
        &["schedule", "apply", "verbs.yaml", "--yes"],
    )
    .exits(0);
    let c = |args: &[&str]| cli(&studio, dir.path(), args);

    let list = c(&["schedule", "list", "--json"]).exits(0).json();
    let names: Vec<&str> = list["schedules"]
        .as_array()
        .expect("schedules")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["ops/hello", "ops/slow"]);
    let table = c(&["schedule", "list"]).exits(0).stdout;
    assert!(table.starts_with("NAME "), "{table}");
    assert!(table.contains("ops/hello  enabled"), "{table}");
    assert!(
        !table.contains('\x1b'),
        "no colour off a terminal: {table:?}"
    );

    let hello = c(&["schedule", "show", "ops/hello", "--json"])
        .exits(0)
        .json();
    let id = hello["id"].as_str().expect("id").to_owned();
    let by_id = c(&["schedule", "show", &id, "--json"]).exits(0).json();
    assert_eq!(by_id["name"], "ops/hello");

    assert_eq!(
        c(&["schedule", "disable", "ops/hello", "--json"])
            .exits(0)
            .json()["enabled"],
        false
    );
    assert_eq!(
        c(&["schedule", "enable", &id, "--json"]).exits(0).json()["enabled"],
        true
    );

    let run = c(&["schedule", "trigger", "ops/hello", "--json"])
        .exits(0)
        .json();
    assert_eq!(run["kind"], "manual");
    let run_id = run["id"].as_str().expect("run id").to_owned();
    // Follows the log until the run ends.
    let ran = c(&["run", "logs", &run_id, "-f"]).exits(0);
    assert_eq!(ran.stdout, "hello\n");
    let ran = c(&["run", "logs", &run_id, "--stderr"]).exits(0);
    assert_eq!(ran.stdout, "oops\n");
    let shown = c(&["run", "show", &run_id, "--json"]).exits(0).json();
    assert_eq!(shown["status"], "completed", "{shown}");
    assert!(
        shown["transitions"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );
    let human = c(&["run", "show", &run_id]).exits(0).stdout;
    assert!(human.contains("schedule:   ops/hello"), "{human}");

    let runs = c(&["runs", "--schedule", "ops/hello", "--json"])
        .exits(0)
        .json();
    assert!(
        runs["runs"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["id"] == run_id.as_str())),
        "{runs}"
    );
    let table = c(&["runs", "--status", "completed"]).exits(0).stdout;
    assert!(
        table.contains(&run_id) && table.contains("ops/hello"),
        "{table}"
    );
    c(&["runs", "--status", "bogus"]).exits(1);

    // `runs -f --json` prints run changes as they happen, one JSON object a line.
    let mut follow = studio_cmd(
        &[
            "runs",
            "-f",
            "--json",
            "--schedule",
            "ops/slow",
            "--home",
            &studio.home_path().display().to_string(),
        ],
        &[],
        Some(dir.path()),
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .expect("spawn runs -f");
    let out = follow.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    // Give the follower time to subscribe before the run starts.
    std::thread::sleep(Duration::from_millis(1_000));
    let slow = c(&["schedule", "trigger", "ops/slow", "--json"])
        .exits(0)
        .json();
    let slow_id = slow["id"].as_str().expect("id").to_owned();
    let cancelled = c(&["run", "cancel", &slow_id, "--json"]).exits(0).json();
    assert_eq!(cancelled["id"], slow_id.as_str());
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(v) = rx.recv_timeout(Duration::from_millis(200)) {
            let done = v["id"] == slow_id.as_str() && v["status"] == "cancelled";
            seen.push(v);
            if done {
                break;
            }
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    let _ = reader.join();
    assert!(
        seen.iter()
            .any(|v| v["id"] == slow_id.as_str() && v["status"] == "cancelled"),
        "runs -f saw {seen:?}"
    );
    assert!(
        seen.iter().all(|v| v["schedule_id"] != id.as_str()),
        "filtered: {seen:?}"
    );
    let ran = c(&["run", "cancel", &slow_id]).exits(1);
    assert!(
        ran.stderr.starts_with("studio: run_not_active: "),
        "{ran:?}"
    );

    let deleted = c(&["schedule", "delete", "ops/hello", "--json"])
        .exits(0)
        .json();
    assert_eq!(deleted["deleted"], true);
    c(&["schedule", "show", "ops/hello"]).exits(1);
    // Its runs stay, detached.
    c(&["run", "show", &run_id, "--json"]).exits(0);
}
