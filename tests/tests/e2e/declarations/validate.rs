//! `studio schedule validate`: local only, exact positions, nothing written.

use super::*;

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
        // Only seeds a new state.db: local validation does not read it (the allow-list
        // is studiod's, checked by `plan`).
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
            "bad.yaml:12:16: schedules.report.policies.bogus: unknown field `bogus`, expected one of `missed_fire`, `overlap`, `max_runs`, `deadline`, `budget_usd`, `rate_limit`, `on_daemon_loss`, `approval`, `retry`",
        ],
        "{ran:?}"
    );

    // A name declared twice across files is an error at its second place; an
    // executable is not judged locally (`rm` is on no list here).
    let ran = validate(&["good.yaml", "dup.json", "ok.toml"], &[]).exits(2);
    assert_eq!(
        ran.stderr.lines().collect::<Vec<_>>(),
        ["dup.json:4:4: schedules.a: schedule other/a is also declared at good.yaml:5:3"],
        "{ran:?}"
    );
    let ran = validate(&["good.yaml", "ok.toml"], &[("STUDIO_HOME", &home_s)]).exits(0);
    assert_eq!(ran.stderr, "", "{ran:?}");
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
