//! `plan` and `apply`: changes, no-ops, updates, prune, refusals, the terminal prompt.

use studio_api::schedule::Trigger;

use super::*;

/// The interval of an `every` trigger.
fn every_of(s: &Schedule) -> Option<&str> {
    match &s.spec.trigger {
        Trigger::Every(e) => Some(e),
        _ => None,
    }
}

const THREE: &str = r#"  a:
    trigger: {every: 1h}
    action: {kind: command, executable: "true"}
  b:
    trigger: {cron: {expression: "0 2 * * *", timezone: Europe/Berlin}}
    action: {kind: command, executable: sh, args: ["-c", "echo b"]}
  c:
    trigger: {at: "2099-01-01T00:00:00Z"}
    action: {kind: command, executable: "true"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarations_plan_apply_reapply_update_and_prune() {
    let studio = start();
    let api = Api::new(&studio);
    let dir = TempDir::new("decl-apply");
    let file = write(dir.path(), "jobs.yaml", &doc("demo", "nightly", THREE));
    let f = file.to_str().expect("utf-8 path");

    let ran = cli(&studio, dir.path(), &["schedule", "plan", f]).exits(1);
    assert_eq!(
        ran.stdout,
        "+ create demo/a\n+ create demo/b\n+ create demo/c\nplan: 3 to create, 0 unchanged\n"
    );
    assert!(api.named("demo/a").await.is_none(), "plan wrote");

    // No terminal and no --yes: refused, with the hint, and nothing written.
    let ran = cli(&studio, dir.path(), &["schedule", "apply", f]).exits(2);
    assert!(ran.stderr.contains("pass --yes"), "{ran:?}");
    assert!(api.named("demo/a").await.is_none(), "applied unasked");

    let ran = cli(&studio, dir.path(), &["schedule", "apply", f, "--yes"]).exits(0);
    assert!(
        ran.stdout.ends_with("applied: 3 created, 0 unchanged\n"),
        "{ran:?}"
    );
    let before: Vec<Schedule> = vec![
        api.must("demo/a").await,
        api.must("demo/b").await,
        api.must("demo/c").await,
    ];

    // Re-applying changes nothing, not even updated_at.
    let ran = cli(&studio, dir.path(), &["schedule", "plan", f]).exits(0);
    assert!(
        ran.stdout.ends_with("nothing to do (3 unchanged)\n"),
        "{ran:?}"
    );
    cli(&studio, dir.path(), &["schedule", "apply", f, "--yes"]).exits(0);
    for old in &before {
        let now = api.must(&old.name).await;
        assert_eq!(
            now.revision, old.revision,
            "revision moved on a no-op apply: {now:?}"
        );
        assert_eq!(
            now.updated_at, old.updated_at,
            "updated_at moved on a no-op apply: {now:?}"
        );
        assert_eq!(
            now.next_fire_at, old.next_fire_at,
            "next_fire_at moved on a no-op apply: {now:?}"
        );
    }

    // An update shows its fields and recomputes the next fire.
    let changed = THREE.replace("every: 1h", "every: 3h");
    write(dir.path(), "jobs.yaml", &doc("demo", "nightly", &changed));
    let ran = cli(&studio, dir.path(), &["schedule", "plan", f]).exits(1);
    assert_eq!(
        ran.stdout,
        "~ update demo/a\n    trigger.every: 1h → 3h\n= unchanged demo/b\n= unchanged demo/c\nplan: 1 to update, 2 unchanged\n"
    );
    let applied_at = Timestamp::now().as_millisecond();
    let ran = cli(&studio, dir.path(), &["schedule", "apply", f, "--yes"]).exits(0);
    assert!(
        ran.stdout.ends_with("applied: 1 updated, 2 unchanged\n"),
        "{ran:?}"
    );
    let a = api.must("demo/a").await;
    let next = ms(a.next_fire_at.as_deref().expect("next_fire_at"));
    assert!(
        (applied_at + 3 * 3_600_000 - 5_000..=applied_at + 3 * 3_600_000 + 60_000).contains(&next),
        "a new 3h timeline starts at the update: {a:?}"
    );
    assert!(a.revision > before[0].revision, "{a:?}");

    // A member that left the document is disabled; with --prune, deleted.
    let without_c = THREE.split("  c:\n").next().expect("split").to_owned();
    write(dir.path(), "jobs.yaml", &doc("demo", "nightly", &without_c));
    let ran = cli(&studio, dir.path(), &["schedule", "plan", f]).exits(1);
    assert!(ran.stdout.contains("- disable demo/c\n"), "{ran:?}");
    cli(&studio, dir.path(), &["schedule", "apply", f, "--yes"]).exits(0);
    assert!(!api.must("demo/c").await.enabled);
    let ran = cli(&studio, dir.path(), &["schedule", "plan", f, "--prune"]).exits(1);
    assert!(ran.stdout.contains("x delete demo/c\n"), "{ran:?}");
    cli(
        &studio,
        dir.path(),
        &["schedule", "apply", f, "--prune", "--yes"],
    )
    .exits(0);
    assert!(api.named("demo/c").await.is_none(), "pruned");
    assert!(api.named("demo/a").await.is_some());

    // Invalid content stops before the daemon: exit 2 with the position.
    write(
        dir.path(),
        "broken.yaml",
        &doc(
            "demo",
            "nightly",
            "  x:\n    trigger: {every: 0s}\n    action: {kind: command, executable: \"true\"}\n",
        ),
    );
    let ran = cli(
        &studio,
        dir.path(),
        &["schedule", "apply", "broken.yaml", "--yes"],
    )
    .exits(2);
    assert!(ran.stderr.starts_with("broken.yaml:6:"), "{ran:?}");
    assert!(api.named("demo/x").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarations_refuse_adopting_a_hand_made_schedule_and_a_concurrent_edit() {
    let studio = start();
    let api = Api::new(&studio);
    let dir = TempDir::new("decl-conflict");

    // A hand-made schedule whose name a document claims: an error, nothing written.
    let reply = api
        .post("/api/schedules", &command("demo/manual", "1h", "true"))
        .await;
    assert_eq!(reply.status, 201, "{reply}");
    let members = "  manual:\n    trigger: {every: 2h}\n    action: {kind: command, executable: \"true\"}\n  fresh:\n    trigger: {every: 1h}\n    action: {kind: command, executable: \"true\"}\n";
    write(dir.path(), "claim.yaml", &doc("demo", "claim", members));
    let ran = cli(&studio, dir.path(), &["schedule", "plan", "claim.yaml"]).exits(2);
    assert!(
        ran.stdout
            .lines()
            .any(|l| l.starts_with("! error demo/manual: ")),
        "{ran:?}"
    );
    let ran = cli(
        &studio,
        dir.path(),
        &["schedule", "apply", "claim.yaml", "--yes"],
    )
    .exits(2);
    assert!(ran.stderr.contains("nothing applied"), "{ran:?}");
    assert!(api.named("demo/fresh").await.is_none(), "half-applied");
    assert_eq!(every_of(&api.must("demo/manual").await), Some("1h"));

    // Plan, then someone edits the row, then apply: refused, naming the row.
    write(
        dir.path(),
        "team.yaml",
        &doc(
            "team",
            "t",
            "  job:\n    trigger: {every: 1h}\n    action: {kind: command, executable: \"true\"}\n",
        ),
    );
    cli(
        &studio,
        dir.path(),
        &["schedule", "apply", "team.yaml", "--yes"],
    )
    .exits(0);
    write(
        dir.path(),
        "team.yaml",
        &doc(
            "team",
            "t",
            "  job:\n    trigger: {every: 2h}\n    action: {kind: command, executable: \"true\"}\n",
        ),
    );
    let job = api.must("team/job").await;
    let id = job.id;
    let mut apply = Prompted::spawn(&studio, dir.path(), &["schedule", "apply", "team.yaml"]);
    apply.wait_for_prompt();
    assert!(
        apply.stdout().contains("~ update team/job"),
        "{}",
        apply.stdout()
    );
    // A merge patch is partial JSON, which no API type spells.
    let reply = api
        .send(
            Method::PATCH,
            &format!("/api/schedules/{id}"),
            Some(serde_json::json!({"description": "edited by hand"}).to_string()),
        )
        .await;
    assert_eq!(reply.status, 200, "{reply}");
    let ran = apply.answer("y\n");
    assert_eq!(ran.code, 1, "{ran:?}");
    // The prompt's line ends with the answer echoed on the terminal, not on stderr.
    let line = ran.stderr.lines().last().unwrap_or_default();
    assert!(
        line.ends_with("re-run `studio schedule plan` and apply again")
            && line.contains("studio: conflict: ")
            && line.contains("team/job"),
        "{ran:?}"
    );
    let now = api.must("team/job").await;
    assert_eq!(every_of(&now), Some("1h"), "nothing applied: {now:?}");
    assert_eq!(now.spec.description, "edited by hand");

    // Declining at the prompt applies nothing; accepting applies.
    let mut apply = Prompted::spawn(&studio, dir.path(), &["schedule", "apply", "team.yaml"]);
    apply.wait_for_prompt();
    let ran = apply.answer("n\n");
    assert_eq!(ran.code, 1, "{ran:?}");
    assert_eq!(every_of(&api.must("team/job").await), Some("1h"));
    let mut apply = Prompted::spawn(&studio, dir.path(), &["schedule", "apply", "team.yaml"]);
    apply.wait_for_prompt();
    let ran = apply.answer("y\n");
    assert_eq!(ran.code, 0, "{ran:?}");
    let now = api.must("team/job").await;
    assert_eq!(every_of(&now), Some("2h"), "{now:?}");
}

/// `studio schedule apply` on a pseudo-terminal, so it asks; stdout and stderr piped.
struct Prompted {
    child: std::process::Child,
    master: std::fs::File,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Prompted {
    fn spawn(studio: &Studio, dir: &Path, args: &[&str]) -> Self {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        let name = ptsname(&master, Vec::new()).expect("ptsname");
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().expect("pts name"))
            .expect("open the pts");
        let mut full: Vec<&str> = args.to_vec();
        let home = studio.home_path().display().to_string();
        full.extend(["--home", home.as_str()]);
        let mut child = studio_cmd(
            &full,
            &[
                ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
                ("STUDIO_SCHEDULER_TZ", "UTC"),
            ],
            Some(dir),
        )
        .stdin(Stdio::from(slave))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn studio");
        let mut readers = Vec::new();
        let mut pipe = |src: Box<dyn Read + Send>| {
            let buf = Arc::new(Mutex::new(Vec::new()));
            let sink = buf.clone();
            readers.push(std::thread::spawn(move || {
                let mut src = src;
                let mut chunk = [0u8; 4096];
                while let Ok(n) = src.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    sink.lock().expect("lock").extend_from_slice(&chunk[..n]);
                }
            }));
            buf
        };
        let stdout = pipe(Box::new(child.stdout.take().expect("stdout")));
        let stderr = pipe(Box::new(child.stderr.take().expect("stderr")));
        Self {
            child,
            master: std::fs::File::from(master),
            stdout,
            stderr,
            readers,
        }
    }

    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().expect("lock")).into_owned()
    }

    fn wait_for_prompt(&mut self) {
        let asked = wait_for(Duration::from_secs(20), || {
            let err = String::from_utf8_lossy(&self.stderr.lock().expect("lock")).into_owned();
            err.contains("[y/N]").then_some(())
        });
        if asked.is_none() {
            let _ = self.child.kill();
            panic!(
                "no prompt: stdout {:?} stderr {:?}",
                self.stdout(),
                String::from_utf8_lossy(&self.stderr.lock().expect("lock"))
            );
        }
    }

    fn answer(mut self, text: &str) -> Ran {
        self.master.write_all(text.as_bytes()).expect("answer");
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("apply did not finish after the answer");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        Ran {
            code: status.code().unwrap_or(-1),
            stdout: self.stdout(),
            stderr: String::from_utf8_lossy(&self.stderr.lock().expect("lock")).into_owned(),
        }
    }
}
