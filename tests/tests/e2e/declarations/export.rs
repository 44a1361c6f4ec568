//! `export` round trips, relative `cwd` in a repository layout, and the client's
//! errors (token, reachability, API codes).

use super::*;

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
        let reply = api
            .post("/api/schedules", &command(name, "1h", "true"))
            .await;
        assert_eq!(reply.status, 201, "{reply}");
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
        let now = api.must(&old.name).await;
        assert_eq!(now.spec, old.spec);
        assert_eq!(now.revision, old.revision, "revision moved: {now:?}");
        assert_eq!(now.updated_at, old.updated_at, "updated_at moved: {now:?}");
        assert_eq!(
            now.next_fire_at, old.next_fire_at,
            "next_fire_at moved: {now:?}"
        );
        assert_eq!(now.enabled, old.enabled, "enabled moved: {now:?}");
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
    let cwd = build.spec.cwd.as_deref().expect("cwd stored");
    assert!(Path::new(cwd).is_absolute(), "{build:?}");
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
