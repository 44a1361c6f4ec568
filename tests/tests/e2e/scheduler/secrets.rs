//! Secrets in real processes (docs/OPERATIONS.md, "Secrets" and "Redaction"): a value
//! set from stdin reaches exactly the job that names it, locally and on a remote worker;
//! its output shows `[redacted:NAME]` where the job printed the value, a split value, its
//! base64 or a token shape; and no log, database file, export or answer holds it.

use std::{io::Write, process::Stdio};

use studio_api::{SecretList, TaskDetail, TaskStatus};

use super::*;

const VALUE: &str = "gh-s3cret-Value-0123456789";

/// `studio secret set NAME` with `value` on its stdin, as a user would.
fn set_secret(studio: &Studio, name: &str, value: &str) {
    let mut child = studio_tests::studio_cmd(
        &[
            "secret",
            "set",
            name,
            "--home",
            &studio.home_path().display().to_string(),
        ],
        &[],
        None,
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("studio secret set");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{value}\n").as_bytes())
        .expect("write the value");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{out:?}");
}

/// Every byte of the files under `dir`.
fn bytes_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.push((path, bytes));
            }
        }
    }
    out
}

fn holds(bytes: &[u8], needle: &str) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Prints the value whole, in two writes half a second apart, base64-encoded inside a
/// Basic credential, and a GitHub token shape; and writes it (as received) to `got`.
fn script(variable: &str, got: &Path) -> String {
    format!(
        "printf '%s' \"${variable}\" > '{got}'; \
         echo \"whole: ${variable}\"; \
         printf 'split: %s' \"$(printf '%s' \"${variable}\" | cut -c1-9)\"; sleep 0.5; \
         printf '%s\\n' \"$(printf '%s' \"${variable}\" | cut -c10-)\"; \
         echo \"basic: $(printf 'user:%s' \"${variable}\" | base64 | tr -d '\\n')\"; \
         echo 'shape: ghp_abcdefghijklmnopqrstuvwxyz0123456789'",
        got = got.display()
    )
}

fn assert_redacted(log: &str, name: &str) {
    assert!(!log.contains(VALUE), "the value in the log: {log}");
    assert!(
        !log.contains("ghp_abcdefghij"),
        "a token shape in the log: {log}"
    );
    for line in ["whole: ", "split: ", "basic: "] {
        let shown = log
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no {line:?} line: {log}"));
        assert!(
            shown.contains(&format!("[redacted:{name}]")),
            "{line}: {shown}"
        );
    }
    assert!(log.contains("shape: [redacted]"), "{log}");
}

/// Nothing the home keeps (logs, `state.db`, `app.db`, run folders) holds the value,
/// but the key file names no value either; and the export and the API show names only.
async fn assert_nowhere(studio: &Studio, api: &Api) {
    for (path, bytes) in bytes_under(studio.home_path()) {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        // The job's own copy, which the test asked for.
        if name.as_deref() == Some("got") || name.as_deref() == Some("got-remote") {
            continue;
        }
        assert!(!holds(&bytes, VALUE), "{} holds the value", path.display());
    }
    let export = text(&studio.cli(&["schedule", "export"]));
    assert!(!export.contains(VALUE), "{export}");
    let secrets: SecretList = api.get("/api/secrets").await.expect(200);
    assert!(!format!("{secrets:?}").contains(VALUE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_only_its_job_and_never_its_output() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    set_secret(&studio, "github", VALUE);
    let got = marker(&studio, "got");
    let mut spec = sh("uses-secret", every("1h"), &script("GH_TOKEN", &got));
    spec.secrets = [("GH_TOKEN".to_owned(), "github".to_owned())].into();
    let (_, run) = api.create_and_trigger(&spec).await;
    let done = api.finished(&run).await;
    assert_eq!(done.run.core.status, RunStatus::Completed, "{done:?}");
    assert_eq!(
        std::fs::read_to_string(&got).expect("the job wrote what it got"),
        VALUE,
        "the job received the value"
    );
    let log = text(&studio.cli(&["run", "logs", &run]));
    assert_redacted(&log, "github");
    // The tail kept with the run is redacted too.
    assert!(!format!("{done:?}").contains(VALUE));

    // A job that does not name it gets nothing.
    let other = marker(&studio, "other");
    let spec = sh(
        "no-secret",
        every("1h"),
        &format!("env > '{}'", other.display()),
    );
    let (_, run) = api.create_and_trigger(&spec).await;
    api.finished(&run).await;
    let env = std::fs::read_to_string(&other).expect("env");
    assert!(!env.contains(VALUE) && !env.contains("GH_TOKEN"), "{env}");
    // A task naming a secret nobody set: one line saying so, exit 2, nothing queued.
    let home = studio.home_path().display().to_string();
    let refused = studio_tests::studio_cmd(
        &[
            "--home", &home, "task", "submit", "--secret", "T=nope", "--", "true",
        ],
        &[],
        None,
    )
    .output()
    .expect("studio task submit");
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(text(&refused).contains("secrets.T"), "{}", text(&refused));
    // The export names the secret, as the spec does.
    let export = text(&studio.cli(&["schedule", "export"]));
    assert!(
        export.contains("GH_TOKEN") && export.contains("github"),
        "{export}"
    );
    assert_nowhere(&studio, &api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_job_receives_its_secret_for_its_lease_and_its_output_is_redacted() {
    let studio = start(&[("STUDIO_WORKER_ADDR", "127.0.0.1:0")]);
    let api = Api::new(&studio);
    set_secret(&studio, "github", VALUE);
    let created: studio_api::JoinTokenCreated = api
        .post(
            "/api/workers/tokens",
            &serde_json::json!({"labels": ["gpu"], "ttl": "10m"}),
        )
        .await
        .expect(201);
    let home = studio_tests::join_worker(&created.server, &created.token, "w", &["sh"]);
    let log = std::fs::File::create(home.path().join("worker.log")).expect("log");
    let worker = studio_tests::studio_cmd(
        &["worker", "--home", &home.path().display().to_string()],
        &[],
        None,
    )
    .env_remove("STUDIO_HOME")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(log)
    .spawn()
    .expect("studio worker");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    studio.remember(worker.id());
    let _worker = Kill(worker);
    let got = home.path().join("got-remote");
    let task: studio_api::Task = api
        .post(
            "/api/tasks",
            &serde_json::json!({
                "action": {"kind": "command", "executable": "sh",
                           "args": ["-c", script("GH_TOKEN", &got)]},
                "labels": ["gpu"],
                "secrets": {"GH_TOKEN": "github"},
            }),
        )
        .await
        .expect(201);
    let t = until("the remote task to end", WAIT, async || {
        let t: TaskDetail = api
            .get(&format!("/api/tasks/{}", task.id))
            .await
            .expect(200);
        t.task.status.is_terminal().then_some(t)
    })
    .await;
    assert_eq!(t.task.status, TaskStatus::Completed, "{t:?}");
    assert_eq!(
        std::fs::read_to_string(&got).expect("the remote job wrote what it got"),
        VALUE
    );
    let log = text(&studio.cli(&["task", "logs", &task.id]));
    assert_redacted(&log, "github");
    // The worker's home keeps no value: not its lease, not its logs.
    for (path, bytes) in bytes_under(home.path()) {
        if path != got {
            assert!(!holds(&bytes, VALUE), "{} holds the value", path.display());
        }
    }
    assert_nowhere(&studio, &api).await;
}
