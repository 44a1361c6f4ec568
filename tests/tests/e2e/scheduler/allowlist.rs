//! The command allow-list as an attacker who may create schedules would try it, and as
//! the machine's owner changes it: every escape of issue "the allow-list can be escaped"
//! reproduced and refused, the resolved program recorded, changes only with the daemon
//! token and at once, the seed only at the first start.

use std::{collections::BTreeMap, os::unix::fs::PermissionsExt};

use studio_tests::api::env;

use studio_api::{
    AllowChange, AllowList, Code, DeclarationRequest, PairRequest, Paired, Plan, SchedulePage,
    SourcedDocument,
    schedule::{
        FollowUp,
        declaration::{API_VERSION, KIND, Metadata, ScheduleSet},
    },
};

use super::*;

/// Studio with only `echo` allowed.
fn start_echo() -> Studio {
    Studio::start_with(&[
        ("STUDIO_COMMAND_ALLOWLIST", "echo"),
        ("STUDIO_SCHEDULER_TZ", "UTC"),
    ])
}

/// A directory of the attacker's with its own `echo`, which leaves `mark` if it ever runs.
fn attacker_dir(studio: &Studio, mark: &Path) -> PathBuf {
    let dir = studio.home_path().join("evil");
    std::fs::create_dir_all(&dir).expect("evil dir");
    let fake = dir.join("echo");
    std::fs::write(&fake, format!("#!/bin/sh\ntouch '{}'\n", mark.display())).expect("fake");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

fn echo(name: &str) -> ScheduleSpec {
    command(name, every("1h"), "echo", &["hello"])
}

/// The field paths of a `400 validation_failed`.
fn refused_paths(reply: &Reply) -> Vec<String> {
    assert_eq!(reply.code(), (400, Code::ValidationFailed), "{reply}");
    reply.error().errors.into_iter().map(|e| e.path).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlist_escapes_through_env_paths_and_cwd_are_refused() {
    let studio = start_echo();
    let api = Api::new(&studio);
    let mark = marker(&studio, "attacker-code-ran");
    let evil = attacker_dir(&studio, &mark);
    let evil_s = evil.display().to_string();
    let so = format!("{evil_s}/x.so");

    // Each way a schedule's own settings could make the allowed `echo` run other code.
    let with_env = |vars: &[(&str, &str)]| ScheduleSpec {
        target: None,
        env: env(vars),
        ..echo("escape")
    };
    let attempts: Vec<(ScheduleSpec, &str)> = vec![
        (with_env(&[("PATH", &evil_s)]), "env.PATH"),
        (
            ScheduleSpec {
                target: None,
                cwd: Some(evil_s.clone()),
                ..with_env(&[("PATH", ".")])
            },
            "env.PATH",
        ),
        (with_env(&[("LD_PRELOAD", &so)]), "env.LD_PRELOAD"),
        (with_env(&[("LD_AUDIT", &so)]), "env.LD_AUDIT"),
        (
            with_env(&[("LD_LIBRARY_PATH", &evil_s)]),
            "env.LD_LIBRARY_PATH",
        ),
        (with_env(&[("GCONV_PATH", &evil_s)]), "env.GCONV_PATH"),
        (with_env(&[("BASH_ENV", &so)]), "env.BASH_ENV"),
        (with_env(&[("HOME", &evil_s)]), "env.HOME"),
        (
            ScheduleSpec {
                target: None,
                cwd: Some("evil".into()),
                ..echo("escape")
            },
            "cwd",
        ),
    ];
    for (i, (spec, path)) in attempts.into_iter().enumerate() {
        let spec = ScheduleSpec {
            target: None,
            name: Some(format!("escape-{i}")),
            ..spec
        };
        let reply = api.post("/api/schedules", &spec).await;
        assert_eq!(refused_paths(&reply), [path], "{spec:?}");
    }
    // The executable itself: relative to a cwd, or a path nobody allowed.
    let spec = ScheduleSpec {
        target: None,
        cwd: Some(evil_s.clone()),
        ..command("escape-rel", every("1h"), "./echo", &[])
    };
    let reply = api.post("/api/schedules", &spec).await;
    assert_eq!(refused_paths(&reply), ["action.executable"]);
    let fake = format!("{evil_s}/echo");
    let spec = command("escape-abs", every("1h"), &fake, &[]);
    let reply = api.post("/api/schedules", &spec).await;
    assert_eq!(refused_paths(&reply), ["action.executable"]);
    assert!(
        reply
            .error()
            .message
            .contains(&format!("studio allow add {fake}")),
        "the refusal says how to allow it: {reply}"
    );
    // A follow-up is checked like the action.
    let spec = ScheduleSpec {
        target: None,
        on_fail: Some(Box::new(FollowUp {
            action: run_command(&fake, &[]),
            on_success: None,
            on_fail: None,
        })),
        ..echo("escape-chain")
    };
    let reply = api.post("/api/schedules", &spec).await;
    assert_eq!(refused_paths(&reply), ["on_fail.action.executable"]);

    // A stored, valid schedule cannot be patched into an escape either; it stays as it was.
    let good = api.create(&echo("good")).await;
    let id = good.id.as_str();
    // A merge patch is partial JSON, which no API type spells.
    let reply = api
        .send(
            Method::PATCH,
            &format!("/api/schedules/{id}"),
            Some(serde_json::json!({"env": {"PATH": evil_s}}).to_string()),
        )
        .await;
    assert_eq!(refused_paths(&reply), ["env.PATH"]);
    let after = api.schedule(id).await;
    assert_eq!(after.spec, good.spec);
    assert_eq!(after.revision, good.revision);
    // So are declaration documents.
    let document = ScheduleSpec {
        target: None,
        name: None,
        env: env(&[("LD_PRELOAD", &so)]),
        ..command("x", every("1h"), "echo", &[])
    };
    let set = ScheduleSet {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        metadata: Metadata {
            name: "evil".into(),
            project: "evil".into(),
        },
        schedules: [("x".to_owned(), document)].into(),
    };
    let doc = DeclarationRequest {
        documents: vec![SourcedDocument {
            source: "evil.yaml".into(),
            document: serde_json::to_value(set).expect("a document"),
        }],
        prune: false,
        adopt: false,
        expected: BTreeMap::new(),
    };
    let reply = api.post("/api/declarations/apply", &doc).await;
    let plan: Plan =
        serde_json::from_value(reply.error().plan.expect("the refused plan")).expect("a plan");
    let names_it = |s: &Option<String>| {
        s.as_deref()
            .is_some_and(|s| s.contains("schedules.x.env.LD_PRELOAD"))
    };
    assert!(
        plan.changes
            .iter()
            .any(|c| names_it(&c.path) || names_it(&c.reason)),
        "{reply}"
    );

    // Nothing but the good schedule was stored, and the attacker's echo never ran.
    let list: SchedulePage = api.get("/api/schedules").await.json();
    let names: Vec<&str> = list.schedules.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["good"]);
    let run = api.trigger(id).await;
    let run = api.finished(&run.core.id).await;
    assert_eq!(run.core().status, RunStatus::Completed, "{run:?}");
    assert!(!mark.exists(), "the attacker's echo ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlist_a_payload_one_job_wrote_cannot_be_loaded_by_the_next() {
    let studio = start_echo();
    let api = Api::new(&studio);
    // The first, allowed job writes bytes of the attacker's choosing into its own log.
    let writer = api
        .create(&command(
            "writer",
            every("1h"),
            "echo",
            &["\x7fELF payload"],
        ))
        .await;
    let run = api.trigger(&writer.id).await;
    let run = api.finished(&run.core.id).await;
    assert_eq!(run.core().status, RunStatus::Completed, "{run:?}");
    let log = studio
        .home_path()
        .join("runs")
        .join(&run.core().id)
        .join("stdout.log");
    assert!(log.exists(), "the payload is on disk: {}", log.display());
    // The second asks the loader to map it: refused before anything is stored or run.
    for var in ["LD_PRELOAD", "LD_AUDIT"] {
        let spec = ScheduleSpec {
            target: None,
            env: env(&[(var, &log.display().to_string())]),
            ..echo(&format!("loader-{var}"))
        };
        let reply = api.post("/api/schedules", &spec).await;
        assert_eq!(refused_paths(&reply), [format!("env.{var}")]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlist_names_run_what_studiods_path_finds_and_the_run_records_it() {
    let studio = start_echo();
    let api = Api::new(&studio);
    let list: AllowList = api.get("/api/admin/allowlist").await.expect(200);
    let entry = &list.entries[0];
    assert_eq!(entry.executable, "echo", "{list:?}");
    assert_eq!(entry.added_by, "seed", "{list:?}");
    let resolved = entry
        .resolved
        .as_deref()
        .expect("echo is on studiod's PATH");
    assert!(
        resolved.starts_with('/') && resolved.ends_with("/echo"),
        "{resolved}"
    );

    let s = api.create(&echo("named")).await;
    let run = api.trigger(&s.id).await;
    let run = api.finished(&run.core.id).await;
    assert_eq!(run.core().status, RunStatus::Completed, "{run:?}");
    assert_eq!(
        run.core().program.as_deref(),
        Some(resolved),
        "the run records what ran: {run:?}"
    );

    // An absolute path is allowed only as that path; a name only as that name.
    let out = studio.cli(&["allow", "add", "/bin/sh"]);
    assert!(out.status.success(), "{out:?}");
    let reply = api
        .post(
            "/api/schedules",
            &command("by-path", every("1h"), "/bin/sh", &["-c", "true"]),
        )
        .await;
    assert_eq!(reply.status, 201, "{reply}");
    let reply = api
        .post(
            "/api/schedules",
            &command("by-name", every("1h"), "sh", &["-c", "true"]),
        )
        .await;
    assert_eq!(refused_paths(&reply), ["action.executable"]);
    let reply = api
        .post(
            "/api/schedules",
            &command("echo-path", every("1h"), resolved, &[]),
        )
        .await;
    assert_eq!(refused_paths(&reply), ["action.executable"]);
}

/// Redeems a fresh code straight at studiod, as the app would for a browser: the
/// admission token itself.
async fn admission_token(studio: &Studio) -> String {
    let resp = studio_tests::http()
        .post(studio.daemon_url("/api/studio/pair"))
        .header("origin", studio.app_origin())
        .json(&PairRequest {
            code: studio.pair_code(),
        })
        .send()
        .await
        .expect("pair");
    Reply::of(resp).await.expect::<Paired>(200).token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlist_changes_at_once_with_the_daemon_token_only() {
    let studio = Studio::start_with(&[("STUDIO_SCHEDULER_TZ", "UTC")]);
    let api = Api::new(&studio);
    let reply = api.post("/api/schedules", &echo("hello")).await;
    assert_eq!(refused_paths(&reply), ["action.executable"]);
    assert!(
        reply.error().message.contains("studio allow add echo"),
        "{reply}"
    );

    // The owner allows it; the very next request is accepted, with no restart.
    let out = studio.cli(&["allow", "add", "echo"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("allowed echo → /"), "{stdout}");
    api.create(&echo("hello")).await;
    let again = studio.cli(&["allow", "add", "echo"]);
    assert!(
        String::from_utf8_lossy(&again.stdout).starts_with("echo was already allowed"),
        "{again:?}"
    );

    // Bad input: one line naming the problem, exit 2, nothing stored.
    let bad = studio.cli(&["allow", "add", "bin/echo"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("add[0]"), "{stderr}");

    // A browser may read the list (the cockpit's Commands page) but never change it:
    // not through the app with its cookie, not with its admission token straight at
    // studiod, not with the daemon token from a page (an Origin).
    let cookie = crate::paired_cookie(&studio).await;
    let listed: AllowList =
        Reply::of(crate::get_with_cookie(&studio, "/api/admin/allowlist", &cookie).await)
            .await
            .expect(200);
    let page = crate::get_with_cookie(&studio, "/commands", &cookie).await;
    let html = page.text().await.expect("page");
    assert!(html.contains("<code>echo</code>") && html.contains("studio allow add NAME"));
    let change = AllowChange {
        add: vec!["sh".into()],
        remove: vec!["echo".into()],
    };
    let http = studio_tests::http();
    let through_app = http
        .post(studio.app_url("/api/admin/allowlist"))
        .header("cookie", &cookie)
        .header("origin", studio.app_origin())
        .json(&change)
        .send()
        .await
        .expect("request");
    let token = admission_token(&studio).await;
    let with_admission = http
        .post(studio.daemon_url("/api/admin/allowlist"))
        .bearer_auth(&token)
        .json(&change)
        .send()
        .await
        .expect("request");
    let from_a_page = http
        .post(studio.daemon_url("/api/admin/allowlist"))
        .bearer_auth(studio.token())
        .header("origin", studio.app_origin())
        .json(&change)
        .send()
        .await
        .expect("request");
    for resp in [through_app, with_admission, from_a_page] {
        let reply = Reply::of(resp).await;
        assert_eq!(reply.code(), (403, Code::DaemonTokenRequired), "{reply}");
    }
    let after: AllowList = api.get("/api/admin/allowlist").await.json();
    assert_eq!(
        after.entries, listed.entries,
        "a refused change wrote nothing"
    );

    // The environment variable only seeds a new home: a restart keeps the owner's list.
    drop(api);
    let home = studio.stop_keep_home(Duration::from_secs(20));
    let studio = Studio::start_in(home, &[("STUDIO_COMMAND_ALLOWLIST", "true,sh")]);
    let out = studio.cli(&["allow", "list", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let list: AllowList = serde_json::from_slice(&out.stdout).expect("json");
    let names: Vec<&str> = list.entries.iter().map(|e| e.executable.as_str()).collect();
    assert_eq!(names, ["echo"]);
}
