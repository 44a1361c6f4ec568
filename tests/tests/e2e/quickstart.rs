//! A new user's first minute, followed step by step from `README.md` itself: the `studio`
//! executable alone in an empty directory (all that `cargo run --release --bin studio`
//! builds) runs `studio up` to readiness with no `STUDIO_DAEMON_BIN` or `STUDIO_APP_BIN`,
//! the printed link pairs a browser, and the quick start's commands allow the example's
//! program, apply the example schedule and run it.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::Duration,
};

use studio_api::{RunPage, RunStatus};
use studio_tests::{Studio, TempDir, bins, wait_for};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace")
        .to_path_buf()
}

/// The commands of the `sh` block in the README's "Quick start" section.
fn quick_start_commands(readme: &str) -> Vec<String> {
    let section = readme
        .split("\n## Quick start\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the README has a Quick start section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the quick start has an sh block");
    block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Runs `exe` with `args` in the workspace root (the README's paths are relative to it),
/// on `home`, with none of the caller's Studio variables.
fn run(exe: &Path, args: &[&str], home: &Path) -> Output {
    Command::new(exe)
        .args(args)
        .current_dir(workspace_root())
        .env("STUDIO_HOME", home)
        .env_remove("STUDIO_TOKEN")
        .env_remove("STUDIO_DAEMON_URL")
        .env_remove("STUDIO_DAEMON_BIN")
        .env_remove("STUDIO_APP_BIN")
        .stdin(Stdio::null())
        .output()
        .expect("run the copied studio")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_quick_start_from_a_lone_studio_executable() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README");
    assert!(
        readme.contains("cargo run --release --bin studio -- up"),
        "the run command this test stands for"
    );
    let steps = quick_start_commands(&readme);
    assert!(
        steps.len() >= 4 && steps[0].starts_with("studio allow add "),
        "{steps:?}"
    );

    let lone = TempDir::new("lone");
    let exe = lone.path().join("studio");
    std::fs::copy(&bins().studio, &exe).expect("copy studio");
    let files = std::fs::read_dir(lone.path()).expect("dir").count();
    assert_eq!(files, 1, "nothing but the one executable");
    let studio = Studio::start_exe(&exe, TempDir::new("qs"), &[]);
    let home = studio.home_path().to_path_buf();

    // Both children are that very file, as `studio daemon` and `studio app`.
    for child in ["daemon", "app"] {
        let pid = studio.child_pid(child);
        let image = std::fs::read_link(format!("/proc/{pid}/exe")).expect("child exe");
        assert_eq!(image, exe, "{child} runs the copied studio");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        assert_eq!(args.get(1).copied(), Some(child.as_bytes()), "{child}");
    }

    // Step 1: the printed link pairs a browser.
    let resp = crate::pair(&studio, &studio.first_code()).await;
    assert_eq!(resp.status(), 200);
    let cookie = studio_tests::admission_cookie(&resp).expect("admission cookie");

    // Step 2: each command as the README prints it.
    for line in &steps {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[0], "studio", "{line}");
        let out = run(&exe, &words[1..], &home);
        assert!(
            out.status.success(),
            "`{line}` failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The run completes and says hello; the cockpit lists it under Runs.
    let run_id = wait_for(Duration::from_secs(30), || {
        let out = run(&exe, &["runs", "--schedule", "demo/hello", "--json"], &home);
        let page: RunPage = serde_json::from_slice(&out.stdout).ok()?;
        page.runs
            .into_iter()
            .find(|r| r.core.status == RunStatus::Completed)
            .map(|r| r.core.id)
    })
    .expect("the example's run completed");
    let logs = run(&exe, &["run", "logs", &run_id], &home);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("hello from Studio"),
        "{logs:?}"
    );
    let page = crate::get_with_cookie(&studio, "/runs", &cookie).await;
    assert_eq!(page.status(), 200);
    let html = page.text().await.expect("runs page");
    assert!(html.contains("demo/hello"), "the cockpit shows the run");
}
