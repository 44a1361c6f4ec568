//! `studio retention`'s tests: the policy built from flags or a file, what is refused
//! before anything is sent, studiod's refusals in one line, and `show`'s and `run`'s
//! text for a state and a pass.

use std::collections::BTreeMap;

use clap::Parser;

use super::*;
use crate::{
    cli::{Cli, Command},
    testdir::TestDir,
};

fn set_args(args: &[&str]) -> RetentionSetArgs {
    let cli =
        Cli::try_parse_from(["studio", "retention", "set"].iter().chain(args)).expect("parses");
    let Command::Retention {
        command: RetentionCommand::Set(args),
    } = cli.command
    else {
        panic!("not retention set")
    };
    *args
}

fn usage(r: Result<(RetentionPolicy, Given), Error>) -> String {
    match r {
        Err(e @ Error::Usage(_)) => {
            assert_eq!(e.exit_code(), 2);
            let text = e.to_string();
            assert!(!text.contains('\n'), "{text}");
            text
        }
        other => panic!("not a usage error: {other:?}"),
    }
}

#[test]
fn the_flags_build_the_whole_policy() {
    let (policy, given) = policy_of(&set_args(&[
        "--runs-max-age",
        "30d",
        "--runs-keep-last",
        "5",
        "--logs-max-bytes",
        "1073741824",
        "--notifications-dead",
        "30d",
        "--archive-dir",
        "/srv/archives",
        "--interval",
        "6h",
    ]))
    .expect("a policy");
    assert_eq!(given, Given::Flags);
    assert_eq!(
        serde_json::to_value(&policy).expect("json"),
        serde_json::json!({
            "runs": {"max_age": "30d", "keep_last": 5},
            "logs": {"max_bytes": 1073741824_u64},
            "notifications": {"dead": "30d"},
            "archive_dir": "/srv/archives",
            "interval": "6h",
        })
    );
    // What is not given is left out: it keeps everything.
    let (policy, _) = policy_of(&set_args(&["--runs-keep-last", "3"])).expect("a policy");
    assert_eq!(
        serde_json::to_string(&policy).expect("json"),
        r#"{"runs":{"keep_last":3}}"#
    );
}

#[test]
fn a_relative_archive_dir_is_made_absolute_from_here() {
    let here = std::env::current_dir().expect("cwd");
    let (policy, _) =
        policy_of(&set_args(&["--archive-dir", "archives/studio"])).expect("a policy");
    assert_eq!(
        policy.archive_dir.as_deref().map(Path::new),
        Some(here.join("archives/studio").as_path())
    );
    assert_eq!(
        absolute(Path::new("x")).expect("absolute"),
        here.join("x").to_str().expect("utf-8")
    );
}

#[test]
fn flags_and_a_file_are_exclusive_and_one_is_needed() {
    let why = usage(policy_of(&set_args(&[
        "--file",
        "p.json",
        "--interval",
        "1h",
    ])));
    assert!(
        why.starts_with("--file and the policy flags are exclusive"),
        "{why}"
    );
    let why = usage(policy_of(&set_args(&[])));
    assert!(why.starts_with("no policy given"), "{why}");
    let why = usage(policy_of(&set_args(&["--json"])));
    assert!(why.starts_with("no policy given"), "{why}");
}

#[test]
fn bad_flags_are_refused_here_naming_the_flag() {
    let refused = |args: &[&str]| usage(policy_of(&set_args(args)));
    assert_eq!(
        refused(&["--interval", "3x"]),
        r#"--interval "3x": unexpected 'x': use s, m, h or d units, like 90s or 1h30m"#
    );
    assert_eq!(
        refused(&["--interval", "30s"]),
        r#"--interval "30s": must be from 1m to 7d"#
    );
    assert_eq!(
        refused(&["--runs-keep-last", "0"]),
        "--runs-keep-last 0: must be at least 1 (leave it out to keep runs by age only)"
    );
    assert_eq!(
        refused(&["--logs-max-bytes", "1000", "--notifications-delivered", "7"]),
        r#"--notifications-delivered "7": "7" has no unit: write 7s, 7m, 7h or 7d; --logs-max-bytes 1000: must be at least 1048576 (1 MiB)"#
    );
    // Clap's own refusals exit 2 too.
    for bad in [
        &["--runs-keep-last", "-1"][..],
        &["--logs-max-bytes", "1G"],
        &["--archive-dir"],
        &["--keep", "3"],
    ] {
        let err = Cli::try_parse_from(["studio", "retention", "set"].iter().chain(bad))
            .expect_err("refused");
        assert_eq!(err.exit_code(), 2, "{bad:?}");
    }
}

#[test]
fn a_file_holds_the_policy_as_json() {
    let dir = TestDir::new("retention");
    let file = dir.path().join("policy.json");
    std::fs::write(&file, r#"{"runs": {"max_age": "90d"}, "interval": "15m"}"#).expect("write");
    let shown = file.display().to_string();
    let (policy, given) = policy_of(&set_args(&["--file", &shown])).expect("a policy");
    assert_eq!(given, Given::File(shown.clone()));
    assert_eq!(policy.runs.and_then(|r| r.max_age).as_deref(), Some("90d"));
    assert_eq!(policy.interval.as_deref(), Some("15m"));

    std::fs::write(&file, "runs: 30d").expect("write");
    let why = usage(policy_of(&set_args(&["--file", &shown])));
    assert!(
        why.starts_with(&format!("--file {shown}: not a retention policy as JSON: ")),
        "{why}"
    );
    std::fs::write(&file, r#"{"runs": {"max_age": "30d"}, "keep": 3}"#).expect("write");
    let why = usage(policy_of(&set_args(&["--file", &shown])));
    assert!(why.contains("unknown field `keep`"), "{why}");
    std::fs::write(&file, r#"{"archive_dir": "rel", "interval": "9d"}"#).expect("write");
    assert_eq!(
        usage(policy_of(&set_args(&["--file", &shown]))),
        format!(
            r#"{shown}: interval "9d": must be from 1m to 7d; {shown}: archive_dir "rel": must be an absolute directory"#
        )
    );
    let absent = dir.path().join("absent.json");
    let why = usage(policy_of(&set_args(&[
        "--file",
        &absent.display().to_string(),
    ])));
    assert!(why.starts_with("--file "), "{why}");
}

#[test]
fn studiods_refusal_names_the_flags_or_the_file() {
    let policy = RetentionPolicy {
        runs: Some(RunsRetention {
            max_age: Some("400d".into()),
            keep_last: None,
        }),
        ..RetentionPolicy::default()
    };
    let errors = [FieldError::new("runs.max_age", "must be at most 366d")];
    assert_eq!(
        refusal(&errors, "invalid", &policy, &Given::Flags),
        r#"--runs-max-age "400d": must be at most 366d"#
    );
    assert_eq!(
        refusal(&errors, "invalid", &policy, &Given::File("stdin".into())),
        r#"stdin: runs.max_age "400d": must be at most 366d"#
    );
    assert_eq!(
        refusal(&[], "the body is wrong", &policy, &Given::Flags),
        "the body is wrong"
    );
}

#[test]
fn a_refused_pass_blames_the_flag_only_when_it_was_given() {
    let body = ErrorBody {
        code: Code::ValidationFailed,
        message: "archive_dir cannot make the directory: Permission denied (os error 13)".into(),
        errors: Vec::new(),
        name: None,
        plan: None,
    };
    let given = run_refusal(&body, Some("/root/a"));
    assert_eq!(given.exit_code(), 2);
    assert_eq!(
        given.to_string(),
        r#"--archive-dir "/root/a": cannot make the directory: Permission denied (os error 13)"#
    );
    let policy = run_refusal(&body, None);
    assert_eq!(policy.exit_code(), 1);
    assert!(
        policy
            .to_string()
            .starts_with("the policy's archive directory: cannot make")
    );
}

fn sample_pass(id: i64, outcome: &str) -> RetentionPass {
    RetentionPass {
        id,
        trigger: "clock".into(),
        started_at: "2025-12-31T23:00:00Z".into(),
        finished_at: Some("2025-12-31T23:02:05Z".into()),
        outcome: outcome.into(),
        error: None,
        archive_dir: Some("/srv/archives".into()),
        pruned: BTreeMap::from([
            ("log_bytes".to_owned(), 3 << 20),
            ("log_dirs".to_owned(), 240),
            ("run_transitions".to_owned(), 480),
            ("runs".to_owned(), 240),
        ]),
        archives: 3,
        chunks: 3,
        longest_chunk_ms: 12.46,
        checkpoint: Some(WalCheckpoint {
            at: "2025-12-31T23:02:05Z".into(),
            busy: false,
            log_frames: 1024,
            checkpointed_frames: 1024,
            wal_bytes_before: 4 << 20,
            wal_bytes_after: 0,
            took_ms: 3.2,
        }),
    }
}

#[test]
fn show_reads_the_policy_its_source_and_the_passes() {
    let now = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    let mut failed = sample_pass(11, "failed");
    failed.trigger = "request".into();
    failed.error = Some("cannot archive a chunk: no space left on device".into());
    failed.pruned = BTreeMap::new();
    failed.archives = 0;
    failed.chunks = 0;
    failed.checkpoint = None;
    let state = RetentionState {
        policy: RetentionPolicy {
            runs: Some(RunsRetention {
                max_age: Some("30d".into()),
                keep_last: Some(5),
            }),
            logs: Some(LogsRetention {
                max_bytes: Some(1 << 30),
            }),
            notifications: Some(NotificationsRetention {
                delivered: Some("7d".into()),
                dead: None,
            }),
            archive_dir: Some("/srv/archives".into()),
            interval: None,
        },
        source: "api".into(),
        updated_at: Some("2025-12-31T22:00:00Z".into()),
        updated_by: Some("daemon".into()),
        next_pass_at: Some("2026-01-01T00:57:00Z".into()),
        passes: vec![sample_pass(12, "completed"), failed],
    };
    assert_eq!(
        render_state(&state, now, Style::plain()),
        "runs           max age 30d, but keep the last 5 per schedule\n\
         logs           at most 1.0 GiB (1073741824 bytes)\n\
         notifications  delivered 7d, dead keep everything\n\
         archive dir    /srv/archives\n\
         interval       1h (the default)\n\
         source         api, set 2025-12-31T22:00:00Z (2h ago) by daemon\n\
         next pass      2026-01-01T00:57:00Z (in 57m)\n\
         \n\
         ID  TRIGGER  STARTED  OUTCOME    PRUNED RUNS  ARCHIVES  CHUNKS  LONGEST CHUNK  CHECKPOINT\n\
         12  clock    1h ago   completed  240          3         3       12.5 ms        ok 4.0 MiB→0 B\n\
         11  request  1h ago   failed     0            0         0       -              -\n\
         pass 11 failed: cannot archive a chunk: no space left on device\n"
    );
    let never = RetentionState {
        policy: RetentionPolicy::default(),
        source: "default".into(),
        updated_at: None,
        updated_by: None,
        next_pass_at: None,
        passes: Vec::new(),
    };
    assert_eq!(
        render_state(&never, now, Style::plain()),
        "runs           keep everything\n\
         logs           keep everything\n\
         notifications  keep everything\n\
         archive dir    none (passes that run on their own delete without archiving)\n\
         interval       1h (the default)\n\
         source         default (never set)\n\
         next pass      not scheduled\n\
         \n\
         no passes yet\n"
    );
}

#[test]
fn run_prints_a_line_per_table_then_the_outcome() {
    assert_eq!(
        render_pass(&sample_pass(13, "completed")),
        "log_bytes 3.0 MiB\n\
         log_dirs 240\n\
         run_transitions 480\n\
         runs 240\n\
         archives 3 in /srv/archives\n\
         chunks 3, the longest held the writer 12.5 ms\n\
         checkpoint ok: WAL 4.0 MiB→0 B, 1024 of 1024 frames moved in 3.2 ms\n\
         pass 13 (clock) completed in 2m\n"
    );
    let mut empty = sample_pass(14, "completed");
    empty.trigger = "request".into();
    empty.pruned = BTreeMap::new();
    empty.archive_dir = None;
    empty.archives = 0;
    empty.chunks = 0;
    empty.finished_at = None;
    if let Some(c) = empty.checkpoint.as_mut() {
        c.busy = true;
        c.wal_bytes_after = c.wal_bytes_before;
        c.checkpointed_frames = 10;
    }
    assert_eq!(
        render_pass(&empty),
        "nothing to prune\n\
         archives 0 (no archive directory)\n\
         chunks 0\n\
         checkpoint busy: WAL 4.0 MiB→4.0 MiB, 10 of 1024 frames moved in 3.2 ms \
         (a reader kept it from finishing: the WAL is not truncated)\n\
         pass 14 (request) completed\n"
    );
}
