//! The command allow-list as an attacker who may create schedules would try it, and as
//! the machine's owner changes it: every escape of issue "the allow-list can be escaped"
//! reproduced and refused, the resolved program recorded, changes only with the daemon
//! token and at once, the seed only at the first start.

use std::os::unix::fs::PermissionsExt;

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

fn echo(name: &str) -> Value {
    command(name, every("1h"), "echo", &["hello"])
}

/// `field` of each object in the array `items`.
fn field_of_each<'a>(items: &'a Value, field: &str) -> Vec<&'a str> {
    items
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|item| item[field].as_str())
        .collect()
}

/// The field paths of a `400 validation_failed`.
fn refused_paths(status: u16, body: &Value) -> Vec<String> {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "validation_failed", "{body}");
    field_of_each(&body["errors"], "path")
        .into_iter()
        .map(str::to_owned)
        .collect()
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
    let attempts: Vec<(Value, &str)> = vec![
        (json!({"env": {"PATH": evil_s}}), "env.PATH"),
        (json!({"env": {"PATH": "."}, "cwd": evil_s}), "env.PATH"),
        (json!({"env": {"LD_PRELOAD": so}}), "env.LD_PRELOAD"),
        (json!({"env": {"LD_AUDIT": so}}), "env.LD_AUDIT"),
        (
            json!({"env": {"LD_LIBRARY_PATH": evil_s}}),
            "env.LD_LIBRARY_PATH",
        ),
        (json!({"env": {"GCONV_PATH": evil_s}}), "env.GCONV_PATH"),
        (json!({"env": {"BASH_ENV": so}}), "env.BASH_ENV"),
        (json!({"env": {"HOME": evil_s}}), "env.HOME"),
        (json!({"cwd": "evil"}), "cwd"),
    ];
    for (i, (extra, path)) in attempts.iter().enumerate() {
        let mut spec = echo(&format!("escape-{i}"));
        for (k, v) in extra.as_object().expect("object") {
            spec[k] = v.clone();
        }
        let (status, body) = api.post("/api/schedules", &spec).await;
        assert_eq!(refused_paths(status, &body), [*path], "{spec}");
    }
    // The executable itself: relative to a cwd, or a path nobody allowed.
    let relative = json!({"cwd": evil_s});
    let mut spec = command("escape-rel", every("1h"), "./echo", &[]);
    spec["cwd"] = relative["cwd"].clone();
    let (status, body) = api.post("/api/schedules", &spec).await;
    assert_eq!(refused_paths(status, &body), ["action.executable"]);
    let fake = format!("{evil_s}/echo");
    let spec = command("escape-abs", every("1h"), &fake, &[]);
    let (status, body) = api.post("/api/schedules", &spec).await;
    assert_eq!(refused_paths(status, &body), ["action.executable"]);
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("studio allow add {fake}"))),
        "the refusal says how to allow it: {body}"
    );
    // A follow-up is checked like the action.
    let mut spec = echo("escape-chain");
    spec["on_fail"] = json!({"action": {"kind": "command", "executable": fake}});
    let (status, body) = api.post("/api/schedules", &spec).await;
    assert_eq!(refused_paths(status, &body), ["on_fail.action.executable"]);

    // A stored, valid schedule cannot be patched into an escape either; it stays as it was.
    let good = api.create(&echo("good")).await;
    let id = good["id"].as_str().expect("id");
    let (status, body) = api
        .send(
            Method::PATCH,
            &format!("/api/schedules/{id}"),
            Some(&json!({"env": {"PATH": evil_s}})),
        )
        .await;
    assert_eq!(refused_paths(status, &body), ["env.PATH"]);
    let after = api.schedule(id).await;
    assert_eq!(after["spec"], good["spec"]);
    assert_eq!(after["revision"], good["revision"]);
    // So are declaration documents.
    let doc = json!({"documents": [{"source": "evil.yaml", "document": {
        "apiVersion": "studio/v1", "kind": "ScheduleSet",
        "metadata": {"name": "evil", "project": "evil"},
        "schedules": {"x": {"trigger": {"every": "1h"},
            "action": {"kind": "command", "executable": "echo"},
            "env": {"LD_PRELOAD": so}}}
    }}]});
    let (_, plan) = api.post("/api/declarations/apply", &doc).await;
    assert!(
        plan.to_string().contains("schedules.x.env.LD_PRELOAD"),
        "{plan}"
    );

    // Nothing but the good schedule was stored, and the attacker's echo never ran.
    let (_, list) = api.get("/api/schedules").await;
    assert_eq!(field_of_each(&list["schedules"], "name"), ["good"]);
    let run = api.trigger(id).await;
    let run = api.finished(run["id"].as_str().expect("run id")).await;
    assert_eq!(run["status"], "completed", "{run}");
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
    let run = api.trigger(writer["id"].as_str().expect("id")).await;
    let run = api.finished(run["id"].as_str().expect("run id")).await;
    assert_eq!(run["status"], "completed", "{run}");
    let log = studio
        .home_path()
        .join("runs")
        .join(run["id"].as_str().expect("run id"))
        .join("stdout.log");
    assert!(log.exists(), "the payload is on disk: {}", log.display());
    // The second asks the loader to map it: refused before anything is stored or run.
    for var in ["LD_PRELOAD", "LD_AUDIT"] {
        let mut spec = echo(&format!("loader-{var}"));
        spec["env"] = json!({ var: log.display().to_string() });
        let (status, body) = api.post("/api/schedules", &spec).await;
        assert_eq!(refused_paths(status, &body), [format!("env.{var}")]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlist_names_run_what_studiods_path_finds_and_the_run_records_it() {
    let studio = start_echo();
    let api = Api::new(&studio);
    let (status, list) = api.get("/api/admin/allowlist").await;
    assert_eq!(status, 200, "{list}");
    let entry = &list["entries"][0];
    assert_eq!(entry["executable"], "echo", "{list}");
    assert_eq!(entry["added_by"], "seed", "{list}");
    let resolved = entry["resolved"]
        .as_str()
        .expect("echo is on studiod's PATH");
    assert!(
        resolved.starts_with('/') && resolved.ends_with("/echo"),
        "{resolved}"
    );

    let s = api.create(&echo("named")).await;
    let run = api.trigger(s["id"].as_str().expect("id")).await;
    let run = api.finished(run["id"].as_str().expect("run id")).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["program"], resolved, "the run records what ran: {run}");

    // An absolute path is allowed only as that path; a name only as that name.
    let out = studio.cli(&["allow", "add", "/bin/sh"]);
    assert!(out.status.success(), "{out:?}");
    let (status, body) = api
        .post(
            "/api/schedules",
            &command("by-path", every("1h"), "/bin/sh", &["-c", "true"]),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = api
        .post(
            "/api/schedules",
            &command("by-name", every("1h"), "sh", &["-c", "true"]),
        )
        .await;
    assert_eq!(refused_paths(status, &body), ["action.executable"]);
    let (status, body) = api
        .post(
            "/api/schedules",
            &command("echo-path", every("1h"), resolved, &[]),
        )
        .await;
    assert_eq!(refused_paths(status, &body), ["action.executable"]);
}

/// Redeems a fresh code straight at studiod, as the app would for a browser: the
/// admission token itself.
async fn admission_token(studio: &Studio) -> String {
    let resp = studio_tests::http()
        .post(studio.daemon_url("/api/studio/pair"))
        .header("origin", studio.app_origin())
        .json(&json!({ "code": studio.pair_code() }))
        .send()
        .await
        .expect("pair");
    let (status, body) = crate::json_of(resp).await;
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().expect("token").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlist_changes_at_once_with_the_daemon_token_only() {
    let studio = Studio::start_with(&[("STUDIO_SCHEDULER_TZ", "UTC")]);
    let api = Api::new(&studio);
    let (status, body) = api.post("/api/schedules", &echo("hello")).await;
    assert_eq!(refused_paths(status, &body), ["action.executable"]);
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("studio allow add echo")),
        "{body}"
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
    let (status, listed) =
        crate::json_of(crate::get_with_cookie(&studio, "/api/admin/allowlist", &cookie).await)
            .await;
    assert_eq!(status, 200, "{listed}");
    let page = crate::get_with_cookie(&studio, "/commands", &cookie).await;
    let html = page.text().await.expect("page");
    assert!(html.contains("<code>echo</code>") && html.contains("studio allow add NAME"));
    let change = json!({"add": ["sh"], "remove": ["echo"]});
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
        let (status, body) = crate::json_of(resp).await;
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["code"], "daemon_token_required", "{body}");
    }
    let (_, after) = api.get("/api/admin/allowlist").await;
    assert_eq!(
        after["entries"], listed["entries"],
        "a refused change wrote nothing"
    );

    // The environment variable only seeds a new home: a restart keeps the owner's list.
    drop(api);
    let home = studio.stop_keep_home(Duration::from_secs(20));
    let studio = Studio::start_in(home, &[("STUDIO_COMMAND_ALLOWLIST", "true,sh")]);
    let out = studio.cli(&["allow", "list", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let list: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(field_of_each(&list["entries"], "executable"), ["echo"]);
}
