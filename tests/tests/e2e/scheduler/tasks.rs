//! On-demand tasks in real processes: a task submitted with the CLI runs once on
//! studiod's built-in worker and its log reads back; the same key answers the same task
//! and another spec under it is refused; a task that needs a label no worker has waits,
//! shown unmatched; a concurrency key runs one at a time, caps its waiters (`429
//! queue_full` with `Retry-After`) and moves on when its holder is cancelled.

use std::process::{Command, Output};

use studio_api::{Code, Task, TaskDetail, TaskStatus};

use super::*;

/// `studio --home HOME <args>` (the home first: a task's command follows `--`).
fn cli(studio: &Studio, args: &[&str]) -> Output {
    Command::new(&studio_tests::bins().studio)
        .arg("--home")
        .arg(studio.home_path())
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run studio")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

async fn task(api: &Api, id: &str) -> TaskDetail {
    api.get(&format!("/api/tasks/{id}")).await.expect(200)
}

async fn task_until(
    api: &Api,
    id: &str,
    what: &str,
    done: impl Fn(&TaskDetail) -> bool,
) -> TaskDetail {
    until(what, WAIT, async || {
        let t = task(api, id).await;
        done(&t).then_some(t)
    })
    .await
}

fn submit_body(key: &str, command: &[&str]) -> serde_json::Value {
    serde_json::json!({
        "action": {"kind": "command", "executable": command[0], "args": &command[1..]},
        "concurrency": {"key": key, "limit": 1},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_run_once_per_key_on_the_builtin_worker_and_wait_for_labels() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let submitted = cli(
        &studio,
        &[
            "task",
            "submit",
            "--key",
            "ci-1",
            "--",
            "sh",
            "-c",
            "echo hello from a task",
        ],
    );
    assert!(submitted.status.success(), "{submitted:?}");
    let id = stdout(&submitted);
    let done = task_until(&api, &id, "the task to complete", |t| {
        t.task.status.is_terminal()
    })
    .await;
    assert_eq!(done.task.status, TaskStatus::Completed, "{done:?}");
    assert_eq!(done.attempts.len(), 1);
    let attempt = &done.attempts[0].core;
    assert_eq!(
        (
            attempt.kind,
            attempt.worker_id.as_deref(),
            attempt.task_id.as_deref()
        ),
        (RunKind::Task, Some("builtin"), Some(id.as_str()))
    );
    let logs = cli(&studio, &["task", "logs", &id]);
    assert!(stdout(&logs).contains("hello from a task"), "{logs:?}");
    let shown = stdout(&cli(&studio, &["task", "show", &id]));
    assert!(
        shown.contains("completed") && shown.contains("builtin"),
        "{shown}"
    );

    // The same key: the same task, said on stderr; another spec under it: refused.
    let again = cli(
        &studio,
        &[
            "task",
            "submit",
            "--key",
            "ci-1",
            "--",
            "sh",
            "-c",
            "echo hello from a task",
        ],
    );
    assert_eq!(stdout(&again), id);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("submitted before"),
        "{again:?}"
    );
    let other = cli(&studio, &["task", "submit", "--key", "ci-1", "--", "true"]);
    assert!(!other.status.success());
    assert!(
        String::from_utf8_lossy(&other.stderr).contains("idempotency_conflict"),
        "{other:?}"
    );
    assert_eq!(task(&api, &id).await.attempts.len(), 1, "it ran once");

    // A label no worker has: accepted, waiting, shown unmatched.
    let waiting = cli(&studio, &["task", "submit", "--label", "gpu", "--", "true"]);
    let waiting = stdout(&waiting);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = task(&api, &waiting).await;
    assert_eq!(
        (t.task.status, t.task.unmatched),
        (TaskStatus::Queued, true)
    );
    let listed = stdout(&cli(&studio, &["task", "list"]));
    assert!(listed.contains("unmatched"), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_one_concurrency_key_run_one_at_a_time_and_cap_their_waiters() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let holder: Task = api
        .post("/api/tasks", &submit_body("deploy", &["sleep", "30"]))
        .await
        .expect(201);
    task_until(&api, &holder.id, "the holder to run", |t| {
        t.task.status == TaskStatus::Running
    })
    .await;
    let mut waiters = Vec::new();
    for _ in 0..10 {
        let t: Task = api
            .post("/api/tasks", &submit_body("deploy", &["true"]))
            .await
            .expect(201);
        waiters.push(t.id);
    }
    let refused = api
        .client
        .post(format!("{}/api/tasks", api.base))
        .bearer_auth(&api.token)
        .json(&submit_body("deploy", &["true"]))
        .send()
        .await
        .expect("submit");
    assert_eq!(refused.status(), 429);
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("5")
    );
    let body: studio_api::ErrorBody = refused.json().await.expect("error body");
    assert_eq!(body.code, Code::QueueFull);
    for id in &waiters {
        assert_eq!(
            task(&api, id).await.task.status,
            TaskStatus::Queued,
            "held back"
        );
    }

    // The holder is cancelled; the waiters then run one at a time, oldest first.
    let cancelled = cli(&studio, &["task", "cancel", &holder.id]);
    assert!(stdout(&cancelled).ends_with("cancelling"), "{cancelled:?}");
    let ended = task_until(&api, &holder.id, "the holder to end", |t| {
        t.task.status.is_terminal()
    })
    .await;
    assert_eq!(ended.task.status, TaskStatus::Cancelled);
    let last = waiters.last().expect("waiters");
    task_until(&api, last, "every waiter to run", |t| {
        t.task.status.is_terminal()
    })
    .await;
    let mut spans = Vec::new();
    for id in &waiters {
        let t = task(&api, id).await;
        assert_eq!(t.task.status, TaskStatus::Completed, "{t:?}");
        spans.push(t.attempts[0].clone());
    }
    for (i, a) in spans.iter().enumerate() {
        for b in &spans[i + 1..] {
            assert!(!overlapping(a, b), "two of one key at once: {a:?} {b:?}");
        }
    }
    let first = spans
        .iter()
        .min_by_key(|r| ms_of(&r.core.dispatched_at))
        .expect("runs");
    assert_eq!(
        first.core.task_id.as_deref(),
        Some(waiters[0].as_str()),
        "oldest first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_retry_after_a_backoff_until_one_attempt_succeeds_or_none_is_left() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let flag = marker(&studio, "failed-once");
    // Fails the first time, succeeds the second.
    let flaky = serde_json::json!({
        "action": {"kind": "command", "executable": "sh", "args": ["-c",
            format!("test -f '{0}' || {{ touch '{0}'; exit 3; }}", flag.display())]},
        "retry": {"max_attempts": 3, "backoff": {"initial": "1s", "max": "1s"}},
    });
    let t: Task = api.post("/api/tasks", &flaky).await.expect(201);
    let done = task_until(&api, &t.id, "the retried task to end", |t| {
        t.task.status.is_terminal()
    })
    .await;
    assert_eq!(done.task.status, TaskStatus::Completed, "{done:?}");
    assert_eq!(done.attempts.len(), 2, "one failure, one success");
    let (first, second) = (&done.attempts[0].core, &done.attempts[1].core);
    assert_eq!(
        (first.status, first.exit_code),
        (RunStatus::Failed, Some(3))
    );
    assert_eq!((second.attempt, second.status), (2, RunStatus::Completed));
    let gap = ms_of(&second.created_at.clone().into()) - ms_of(&first.finished_at);
    assert!(
        (0..2_000).contains(&gap),
        "the wait is at most the 1 s backoff: {gap} ms"
    );

    // Always failing: three attempts, then failed; by hand, once more.
    let failing = serde_json::json!({
        "action": {"kind": "command", "executable": "sh", "args": ["-c", "exit 3"]},
        "retry": {"max_attempts": 3, "backoff": {"initial": "1s", "max": "1s"}},
    });
    let t: Task = api.post("/api/tasks", &failing).await.expect(201);
    let done = task_until(&api, &t.id, "every attempt to fail", |t| {
        t.task.status.is_terminal()
    })
    .await;
    assert_eq!(
        (done.task.status, done.task.attempts),
        (TaskStatus::Failed, 3)
    );
    let retried = cli(&studio, &["task", "retry", &t.id]);
    assert!(stdout(&retried).ends_with("queued"), "{retried:?}");
    task_until(&api, &t.id, "the fourth attempt", |t| {
        t.task.attempts == 4 && t.task.status.is_terminal()
    })
    .await;
    let again = cli(&studio, &["task", "retry", "nope"]);
    assert!(!again.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedules_failed_occurrence_is_retried_as_the_same_occurrence() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let flag = marker(&studio, "failed-once");
    let retry = studio_api::schedule::RetryPolicy {
        max_attempts: 3,
        backoff: studio_api::schedule::Backoff {
            initial: "1s".into(),
            max: "1s".into(),
            factor: 2,
        },
        on: vec![studio_api::schedule::RetryOn::Failed],
        exit_codes: vec![3],
    };
    let flaky = with_policies(
        sh(
            "retry/flaky",
            at(&in_secs(1)),
            &format!(
                "test -f '{0}' || {{ touch '{0}'; exit 3; }}",
                flag.display()
            ),
        ),
        Policies {
            retry: Some(retry.clone()),
            ..Policies::default()
        },
    );
    let id = api.create(&flaky).await.id;
    let runs = api
        .wait_runs(&id, "the retried occurrence to complete", |runs| {
            runs.iter().any(|r| r.core().status == RunStatus::Completed)
        })
        .await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    let (first, second) = (&runs[0].core, &runs[1].core);
    assert_eq!(
        (first.status, first.exit_code),
        (RunStatus::Failed, Some(3))
    );
    assert_eq!(first.retry_at, None, "taken over by its retry");
    assert_eq!(
        (second.attempt, second.replaces_run_id.as_deref()),
        (2, Some(first.id.as_str()))
    );
    assert_eq!(
        second.scheduled_at, first.scheduled_at,
        "the same occurrence"
    );
    assert_eq!(api.schedule(&id).await.runs_counted, 1, "counted once");

    // Another exit code is not retried.
    let other = with_policies(
        sh("retry/other", at(&in_secs(1)), "exit 4"),
        Policies {
            retry: Some(retry),
            ..Policies::default()
        },
    );
    let id = api.create(&other).await.id;
    let runs = api
        .wait_runs(&id, "the occurrence to fail", |runs| {
            runs.iter().all(terminal) && !runs.is_empty()
        })
        .await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let settled = api.runs(&id).await;
    assert_eq!(settled.len(), 1, "not retried: {settled:?}");
    assert_eq!(runs[0].core().retry_at, None);
}
