//! The runner against real processes.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use studio_runner::{Ending, JobSpec, env::job_env, spawn};

fn run_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("studio-runner-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn sh(tag: &str, script: &str) -> JobSpec {
    let dir = run_dir(tag);
    JobSpec {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        cwd: Some(std::env::temp_dir()),
        env: job_env(
            std::env::vars(),
            &BTreeMap::new(),
            &[(
                "STUDIO_RESULT_FILE",
                dir.join("result.json").display().to_string(),
            )],
        ),
        run_dir: dir,
        log_cap: 1 << 20,
        deadline: None,
        grace: Duration::from_millis(500),
        die_with_parent: true,
        redact: Vec::new(),
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X")
    })
}

fn read_pid(dir: &std::path::Path) -> u32 {
    std::fs::read_to_string(dir.join("gc.pid"))
        .expect("grandchild pid file")
        .trim()
        .parse()
        .expect("pid")
}

#[tokio::test]
async fn captures_output_exit_code_and_report() {
    let spec = sh(
        "basic",
        r#"echo out; echo err >&2; printf '{"cost_usd":0.25,"tokens":42}' > "$STUDIO_RESULT_FILE"; exit 3"#,
    );
    let dir = spec.run_dir.clone();
    let outcome = spawn(spec).expect("spawn").wait().await;
    assert_eq!(outcome.ending, Ending::Exited);
    assert_eq!((outcome.exit_code, outcome.signal), (Some(3), None));
    assert_eq!(outcome.stdout.tail, "out\n");
    assert_eq!(outcome.stderr.tail, "err\n");
    assert_eq!(
        std::fs::read_to_string(dir.join("stdout.log")).expect("log"),
        "out\n"
    );
    assert!(!outcome.succeeded());
    let report = outcome.report.expect("report");
    assert_eq!((report.cost_usd, report.tokens), (Some(0.25), Some(42)));
}

#[tokio::test]
async fn the_environment_is_cleared_and_stdin_is_empty() {
    let mut spec = sh("env", "env | sort; cat; echo end");
    spec.env.retain(|(k, _)| k == "PATH");
    spec.env.push(("ONLY".into(), "this".into()));
    let outcome = spawn(spec).expect("spawn").wait().await;
    let lines: Vec<&str> = outcome.stdout.tail.lines().collect();
    assert!(lines.contains(&"ONLY=this"), "{lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| !l.starts_with("HOME=") && !l.starts_with("STUDIO_")),
        "{lines:?}"
    );
    assert_eq!(
        lines.last(),
        Some(&"end"),
        "cat read /dev/null and returned"
    );
}

#[tokio::test]
async fn a_deadline_kills_the_whole_group_including_a_term_ignoring_grandchild() {
    let mut spec = sh(
        "deadline",
        r#"trap '' TERM; (trap '' TERM; exec sleep 300) & echo $! > "$0"; sleep 300"#,
    );
    let dir = spec.run_dir.clone();
    std::fs::create_dir_all(&dir).expect("dir");
    spec.args.push(dir.join("gc.pid").display().to_string());
    spec.deadline = Some(Duration::from_millis(500));
    let started = std::time::Instant::now();
    let outcome = spawn(spec).expect("spawn").wait().await;
    assert_eq!(outcome.ending, Ending::Deadline);
    assert_eq!(
        outcome.signal,
        Some(9),
        "the TERM-ignoring leader was killed"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let grandchild = read_pid(&dir);
    assert!(
        !alive(grandchild),
        "grandchild {grandchild} survived the deadline"
    );
}

#[tokio::test]
async fn cancel_uses_the_same_path() {
    let spec = sh("cancel", "exec sleep 300");
    let job = spawn(spec).expect("spawn");
    let pid = job.pid();
    let canceller = job.canceller();
    tokio::time::sleep(Duration::from_millis(100)).await;
    canceller.cancel();
    let outcome = job.wait().await;
    assert_eq!(outcome.ending, Ending::Cancelled);
    assert_eq!(outcome.signal, Some(15));
    assert!(!alive(pid));
}

#[tokio::test]
async fn nothing_outlives_a_job_that_exited() {
    let mut spec = sh(
        "straggler",
        r#"(trap '' TERM; exec sleep 300) & echo $! > "$0"; echo done"#,
    );
    let dir = spec.run_dir.clone();
    std::fs::create_dir_all(&dir).expect("dir");
    spec.args.push(dir.join("gc.pid").display().to_string());
    let outcome = spawn(spec).expect("spawn").wait().await;
    assert_eq!(
        (outcome.ending, outcome.exit_code),
        (Ending::Exited, Some(0))
    );
    assert_eq!(outcome.stdout.tail, "done\n");
    assert!(!alive(read_pid(&dir)));
}

#[tokio::test]
async fn a_flood_of_output_is_capped_on_disk_and_bounded_in_memory() {
    let mut spec = sh(
        "flood",
        "head -c 50000000 /dev/zero | tr '\\0' 'x'; printf 'é-end'",
    );
    spec.log_cap = 1_000_000;
    let dir = spec.run_dir.clone();
    let outcome = spawn(spec).expect("spawn").wait().await;
    assert_eq!(outcome.stdout.bytes, 50_000_000 + "é-end".len() as u64);
    assert_eq!(outcome.stdout.logged, 1_000_000);
    assert_eq!(
        std::fs::metadata(dir.join("stdout.log"))
            .expect("log")
            .len(),
        1_000_000
    );
    assert_eq!(outcome.stdout.tail.len(), 64 * 1024);
    assert!(outcome.stdout.tail.ends_with("é-end"));
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error_and_a_bad_report_is_explained() {
    let mut spec = sh("missing", "true");
    spec.program = "/nonexistent/studio-no-such-program".into();
    let err = spawn(spec).expect_err("cannot exec");
    assert!(err.to_string().contains("studio-no-such-program"));

    let spec = sh("badreport", r#"echo 'not json' > "$STUDIO_RESULT_FILE""#);
    let outcome = spawn(spec).expect("spawn").wait().await;
    assert!(outcome.report.is_none());
    assert!(outcome.report_error.is_some_and(|e| e.contains("JSON")));
}

/// Not a check: what one launch costs (`--release -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn measure_launch_cost() {
    let n = 200u32;
    let (mut spawn_us, mut wait_us) = (0u128, 0u128);
    for i in 0..n {
        let mut spec = sh(&format!("cost{i}"), "");
        spec.program = "/bin/true".into();
        spec.args.clear();
        let t = std::time::Instant::now();
        let job = spawn(spec).expect("spawn");
        spawn_us += t.elapsed().as_micros();
        let t = std::time::Instant::now();
        job.wait().await;
        wait_us += t.elapsed().as_micros();
    }
    println!(
        "per job µs: spawn {}, wait {}",
        spawn_us / u128::from(n),
        wait_us / u128::from(n)
    );
}
