//! `studio schedule preview`: the real binary, no daemon, no home touched.

use std::process::{Command, Output, Stdio};

use studio_tests::{TempDir, bins};

/// Runs `studio schedule preview <args>` with STUDIO_HOME naming a path that does not exist.
fn preview(home: &std::path::Path, args: &[&str]) -> Output {
    Command::new(&bins().studio)
        .args(["schedule", "preview"])
        .args(args)
        .env("STUDIO_HOME", home)
        .env_remove("STUDIO_SCHEDULER_TZ")
        .stdin(Stdio::null())
        .output()
        .expect("run studio schedule preview")
}

fn lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn preview_follows_new_york_dst_and_creates_no_home() {
    let dir = TempDir::new("preview");
    let home = dir.path().join("never-created");

    let out = preview(
        &home,
        &[
            "--cron",
            "30 2 * * *",
            "--tz",
            "America/New_York",
            "--from",
            "2026-03-07T12:00:00Z",
            "--count",
            "3",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        lines(&out),
        [
            "2026-03-08T03:00:00-04:00",
            "2026-03-09T02:30:00-04:00",
            "2026-03-10T02:30:00-04:00"
        ],
        "the spring-forward gap runs once, at 03:00 EDT"
    );

    let out = preview(
        &home,
        &[
            "--cron",
            "30 1 * * *",
            "--tz",
            "America/New_York",
            "--from",
            "2026-10-31T12:00:00Z",
            "--count",
            "3",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let fires = lines(&out);
    assert_eq!(
        fires,
        [
            "2026-11-01T01:30:00-04:00",
            "2026-11-02T01:30:00-05:00",
            "2026-11-03T01:30:00-05:00"
        ],
        "the fall-back overlap runs once, in the first pass"
    );
    assert_eq!(
        fires.iter().filter(|f| f.starts_with("2026-11-01")).count(),
        1
    );

    // The configured zone is the default; --every is anchored at --from; 5 by default.
    let out = Command::new(&bins().studio)
        .args([
            "schedule",
            "preview",
            "--every",
            "1h30m",
            "--from",
            "2026-01-01T00:00:00Z",
        ])
        .env("STUDIO_HOME", &home)
        .env("STUDIO_SCHEDULER_TZ", "Asia/Tokyo")
        .output()
        .expect("run studio");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        lines(&out),
        [
            "2026-01-01T10:30:00+09:00",
            "2026-01-01T12:00:00+09:00",
            "2026-01-01T13:30:00+09:00",
            "2026-01-01T15:00:00+09:00",
            "2026-01-01T16:30:00+09:00"
        ]
    );

    assert!(
        !home.exists(),
        "studio schedule preview created {}",
        home.display()
    );
}

#[test]
fn preview_refuses_bad_input_with_one_line_and_status_2() {
    let dir = TempDir::new("preview-bad");
    let home = dir.path().join("never-created");
    for (args, says) in [
        (&["--cron", "0 0 31 2 *", "--tz", "UTC"][..], "never fire"),
        (
            &["--cron", "61 * * * *"][..],
            "--cron: invalid cron expression",
        ),
        (
            &["--cron", "0 * * * *", "--tz", "Mars/Olympus"][..],
            "--tz: unknown time zone",
        ),
        (&["--every", "5 minutes"][..], "--every: "),
        (&["--every", "5m", "--from", "tomorrow"][..], "--from: "),
        (&["--every", "5m", "--count", "1001"][..], "--count: "),
    ] {
        let out = preview(&home, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?} printed {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: one line, got {err:?}");
        assert!(
            err.contains(says),
            "{args:?}: {err:?} does not say {says:?}"
        );
    }
    // Neither or both triggers: clap's usage error, also status 2.
    for args in [&[][..], &["--cron", "* * * * *", "--every", "1m"][..]] {
        assert_eq!(preview(&home, args).status.code(), Some(2), "{args:?}");
    }
    assert!(!home.exists());
}
