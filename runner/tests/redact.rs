//! Redaction of real jobs' output (docs/OPERATIONS.md, "Redaction").

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use base64::{Engine as _, engine::general_purpose::STANDARD};
use studio_runner::{Ending, JobSpec, Redaction, env::job_env, spawn};

const VALUE: &str = "hunter2-Sup3r?S3cret>>";

fn sh(tag: &str, script: &str, vars: &[(&str, String)]) -> JobSpec {
    let dir = std::env::temp_dir().join(format!("studio-redact-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let extra: Vec<(&str, String)> = vars.to_vec();
    JobSpec {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            script.into(),
            dir.join("go").display().to_string(),
        ],
        cwd: Some(std::env::temp_dir()),
        env: job_env(std::env::vars(), &BTreeMap::new(), &extra),
        run_dir: dir,
        log_cap: 1 << 20,
        deadline: Some(Duration::from_secs(30)),
        grace: Duration::from_millis(500),
        die_with_parent: true,
        redact: vec![Redaction {
            name: "API".into(),
            value: VALUE.into(),
        }],
    }
}

async fn read_until(path: &PathBuf, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains(text) {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "{text:?} never reached the log: {log:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_value_split_by_a_pause_its_base64_and_a_token_shape_never_reach_the_log() {
    let (head, rest) = VALUE.split_at(7);
    let basic = STANDARD.encode(format!("user:{VALUE}"));
    let ghp = format!("ghp_{}", "Z9y8".repeat(9));
    // The job waits for the file `$0` before its last words, so that the test sees what
    // the log shows while it is quiet.
    let script = r#"printf 'using %s' "$HEAD"; sleep 0.5; printf '%s now\n' "$REST"
printf 'Authorization: Basic %s\n' "$BASIC"; printf 'pushed with %s\n' "$GHP"
printf 'oops %s\n' "$HEAD$REST" >&2
printf 'waiting'; while [ ! -e "$0" ]; do sleep 0.05; done; echo ' done'"#;
    let spec = sh(
        "split",
        script,
        &[
            ("HEAD", head.into()),
            ("REST", rest.into()),
            ("BASIC", basic.clone()),
            ("GHP", ghp.clone()),
        ],
    );
    let dir = spec.run_dir.clone();
    let go = dir.join("go");
    let job = spawn(spec).expect("spawn");

    // A partial line is written once the job is quiet.
    let live = read_until(&dir.join("stdout.log"), "waiting").await;
    assert!(!live.contains(" done"), "{live:?}");
    std::fs::write(&go, "").expect("go");
    let outcome = job.wait().await;
    assert_eq!(
        (outcome.ending, outcome.exit_code),
        (Ending::Exited, Some(0))
    );

    // "user:" and the first bits of the value share the character before the label.
    let want = "using [redacted:API] now\nAuthorization: Basic dXNlcjp[redacted:API]\n\
                pushed with [redacted]\nwaiting done\n";
    let log = std::fs::read_to_string(dir.join("stdout.log")).expect("log");
    assert_eq!(log, want);
    assert_eq!(outcome.stdout.tail, want);
    assert_eq!(outcome.stdout.logged, want.len() as u64);
    let raw = format!(
        "using {VALUE} now\nAuthorization: Basic {basic}\npushed with {ghp}\nwaiting done\n"
    );
    assert_eq!(
        outcome.stdout.bytes,
        raw.len() as u64,
        "bytes counts what the job wrote"
    );

    let err = std::fs::read_to_string(dir.join("stderr.log")).expect("log");
    assert_eq!(err, "oops [redacted:API]\n");
    assert_eq!(outcome.stderr.tail, err);
    for text in [&log, &err, &outcome.stdout.tail, &outcome.stderr.tail] {
        assert!(!text.contains(VALUE) && !text.contains(&basic[8..]) && !text.contains(&ghp));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
