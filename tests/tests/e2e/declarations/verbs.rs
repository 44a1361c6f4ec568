//! Everyday verbs (`schedule list|show|enable|disable|trigger|delete`, `runs`, `run
//! show|logs|cancel`) as scripts use them, with `--json`.

use studio_api::{Deleted, Run, RunDetail, RunEvent, RunKind, RunPage, RunStatus};

use super::*;

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

    let list: SchedulePage = c(&["schedule", "list", "--json"]).exits(0).json();
    let names: Vec<&str> = list.schedules.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["ops/hello", "ops/slow"]);
    let table = c(&["schedule", "list"]).exits(0).stdout;
    assert!(table.starts_with("NAME "), "{table}");
    assert!(table.contains("ops/hello  enabled"), "{table}");
    assert!(
        !table.contains('\x1b'),
        "no colour off a terminal: {table:?}"
    );

    let hello: Schedule = c(&["schedule", "show", "ops/hello", "--json"])
        .exits(0)
        .json();
    let id = hello.id;
    let by_id: Schedule = c(&["schedule", "show", &id, "--json"]).exits(0).json();
    assert_eq!(by_id.name, "ops/hello");

    let disabled: Schedule = c(&["schedule", "disable", "ops/hello", "--json"])
        .exits(0)
        .json();
    assert!(!disabled.enabled);
    let enabled: Schedule = c(&["schedule", "enable", &id, "--json"]).exits(0).json();
    assert!(enabled.enabled);

    let run: Run = c(&["schedule", "trigger", "ops/hello", "--json"])
        .exits(0)
        .json();
    assert_eq!(run.core.kind, RunKind::Manual);
    let run_id = run.core.id;
    // Follows the log until the run ends.
    let ran = c(&["run", "logs", &run_id, "-f"]).exits(0);
    assert_eq!(ran.stdout, "hello\n");
    let ran = c(&["run", "logs", &run_id, "--stderr"]).exits(0);
    assert_eq!(ran.stdout, "oops\n");
    let shown: RunDetail = c(&["run", "show", &run_id, "--json"]).exits(0).json();
    assert_eq!(shown.run.core.status, RunStatus::Completed, "{shown:?}");
    assert!(!shown.transitions.is_empty());
    let human = c(&["run", "show", &run_id]).exits(0).stdout;
    assert!(human.contains("schedule:   ops/hello"), "{human}");

    let runs: RunPage = c(&["runs", "--schedule", "ops/hello", "--json"])
        .exits(0)
        .json();
    assert!(runs.runs.iter().any(|r| r.core.id == run_id), "{runs:?}");
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
    let (tx, rx) = std::sync::mpsc::channel::<RunEvent>();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<RunEvent>(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    // Give the follower time to subscribe before the run starts.
    std::thread::sleep(Duration::from_millis(1_000));
    let slow: Run = c(&["schedule", "trigger", "ops/slow", "--json"])
        .exits(0)
        .json();
    let slow_id = slow.core.id;
    let cancelled: Run = c(&["run", "cancel", &slow_id, "--json"]).exits(0).json();
    assert_eq!(cancelled.core.id, slow_id);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(v) = rx.recv_timeout(Duration::from_millis(200)) {
            let done = v.id == slow_id && v.status == RunStatus::Cancelled;
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
            .any(|v| v.id == slow_id && v.status == RunStatus::Cancelled),
        "runs -f saw {seen:?}"
    );
    assert!(
        seen.iter().all(|v| v.schedule_id.as_ref() != Some(&id)),
        "filtered: {seen:?}"
    );
    let ran = c(&["run", "cancel", &slow_id]).exits(1);
    assert!(
        ran.stderr.starts_with("studio: run_not_active: "),
        "{ran:?}"
    );

    let deleted: Deleted = c(&["schedule", "delete", "ops/hello", "--json"])
        .exits(0)
        .json();
    assert!(deleted.deleted);
    c(&["schedule", "show", "ops/hello"]).exits(1);
    // Its runs stay, detached.
    c(&["run", "show", &run_id, "--json"]).exits(0);
}
