//! `studio app token|list|revoke|join` (docs/FLEETS.md, "Split hosts"), the real binary
//! on both sides: a token minted against a running Studio with an apps listener, spent
//! by `studio app join` in a second, separate home (the app's host), which keeps a key
//! that never leaves it; tokens are used once, bad input exits 2 in one line, the app is
//! listed and revoked; and a studiod without an apps listener says so.

use std::{
    os::unix::fs::PermissionsExt,
    path::Path,
    process::{Output, Stdio},
};

use studio_api::AppList;
use studio_tests::{Studio, TempDir, studio_cmd};

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `studio <args>` on the app's host: its own home, nothing of the test's environment.
fn on_app_host(home: &Path, args: &[&str]) -> Output {
    let home = home.display().to_string();
    studio_cmd(args, &[("STUDIO_HOME", home.as_str())], None)
        .stdin(Stdio::null())
        .output()
        .expect("run studio")
}

/// Asserts `out` failed with `code` and said why on exactly one line of stderr, and
/// returns that line.
fn refused(out: &Output, code: i32) -> String {
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    let err = stderr(out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "not one line: {err:?}");
    lines[0].to_owned()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn apps(studio: &Studio) -> AppList {
    let out = studio.cli(&["app", "list", "--json"]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("studio app list --json is an AppList")
}

#[test]
fn an_app_joins_once_with_its_token_and_is_listed_and_revoked() {
    let studio = Studio::start_with(&[("STUDIO_APPS_ADDR", "127.0.0.1:0")]);

    // The token alone on stdout; its expiry and the command to run on stderr.
    let minted = studio.cli(&["app", "token", "--ttl", "10m"]);
    assert!(minted.status.success(), "{minted:?}");
    let token = stdout(&minted).trim().to_owned();
    assert!(
        token.starts_with("studio-join.") && !token.contains(char::is_whitespace),
        "stdout is not one token: {:?}",
        stdout(&minted)
    );
    let notes = stderr(&minted);
    assert!(notes.contains("expires"), "{notes}");
    let command = notes
        .lines()
        .find_map(|l| l.split_once("studio app join ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no join command in {notes:?}"));
    let words: Vec<&str> = command.split_whitespace().collect();
    let [flag, server, "--token", shown] = words[..] else {
        panic!("not `--server S --token T`: {command:?}")
    };
    assert_eq!((flag, shown), ("--server", token.as_str()));

    // Bad input: one line naming the flag, exit 2, and nothing dialled or written.
    let app_host = TempDir::new("app-host");
    let untouched = app_host.path().join("untouched");
    let bad_token = on_app_host(
        &untouched,
        &[
            "app",
            "join",
            "--server",
            server,
            "--token",
            "studio-join.nope",
        ],
    );
    assert!(refused(&bad_token, 2).contains("--token"), "{bad_token:?}");
    let bad_server = on_app_host(
        &untouched,
        &["app", "join", "--server", "127.0.0.1", "--token", &token],
    );
    assert!(
        refused(&bad_server, 2).contains("--server"),
        "{bad_server:?}"
    );
    assert!(!untouched.exists(), "a refused join touched its home");
    let long = studio.cli(&["app", "token", "--ttl", "8d"]);
    assert!(refused(&long, 2).contains("--ttl"), "{long:?}");

    // The join, in the app host's own home.
    let home = app_host.path().join("home");
    let joined = on_app_host(
        &home,
        &[
            "app", "join", "--server", server, "--token", &token, "--name", "edge-1",
        ],
    );
    assert!(joined.status.success(), "{joined:?}");
    let said = stdout(&joined);
    let id = said
        .trim()
        .strip_prefix("joined as app ")
        .and_then(|rest| rest.split_once(';'))
        .map(|(id, _)| id.to_owned())
        .unwrap_or_else(|| panic!("no app id in {said:?}"));
    assert_eq!(
        said.trim(),
        format!("joined as app {id}; start studio-app with --studiod {server}")
    );
    let dir = home.join("run/app");
    assert_eq!(mode(&dir), 0o700);
    for file in ["key.pem", "cert.pem", "ca.pem", "id"] {
        assert_eq!(mode(&dir.join(file)), 0o600, "run/app/{file}");
    }
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).expect("enrolment file");
    assert_eq!(read("id").trim(), id);
    // studiod's authority is the one the token pins.
    let ca = studio_pki::first_cert_der(&read("ca.pem")).expect("ca.pem holds a certificate");
    assert!(token.ends_with(&format!(".{}", studio_pki::fingerprint_der(&ca))));
    studio_pki::first_cert_der(&read("cert.pem")).expect("cert.pem holds a certificate");

    // The key stays in its file: not in what the join printed, nor in either log.
    let key = read("key.pem");
    let body: Vec<&str> = key
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 16)
        .collect();
    assert!(!body.is_empty(), "key.pem is not PEM: {key:?}");
    let printed = format!("{}{}", stdout(&joined), stderr(&joined));
    for (what, text) in [
        ("the join's output", printed),
        ("the daemon's log", studio.log("daemon")),
        ("the app's log", studio.log("app")),
    ] {
        assert!(
            !body.iter().any(|line| text.contains(line)),
            "the app's key is in {what}"
        );
    }

    // A token is spent once: another home's join is refused by studiod.
    let again_home = app_host.path().join("again");
    let again = on_app_host(
        &again_home,
        &["app", "join", "--server", server, "--token", &token],
    );
    let why = refused(&again, 1);
    assert!(why.contains("already used"), "{why}");
    assert!(!again_home.join("run/app/id").exists());

    // Listed, active; revoked by a prefix of its id.
    let listed = apps(&studio);
    let [app] = &listed.apps[..] else {
        panic!("not one app: {listed:?}")
    };
    assert_eq!(
        (app.id.as_str(), app.name.as_str()),
        (id.as_str(), "edge-1")
    );
    assert_eq!(app.revoked_at, None);
    let table = studio.cli(&["app", "list"]);
    let shown = stdout(&table);
    assert!(
        shown.contains("edge-1") && shown.contains("active"),
        "{shown}"
    );

    let revoked = studio.cli(&["app", "revoke", &id[..8]]);
    assert!(revoked.status.success(), "{revoked:?}");
    assert!(
        stdout(&revoked).contains(&format!("{id} (edge-1) is revoked")),
        "{revoked:?}"
    );
    let listed = apps(&studio);
    assert!(listed.apps[0].revoked_at.is_some(), "{listed:?}");
    assert!(stdout(&studio.cli(&["app", "list"])).contains("revoked"));
    let unknown = studio.cli(&["app", "revoke", "no-such-app"]);
    assert!(
        refused(&unknown, 1).contains("app_not_found"),
        "{unknown:?}"
    );

    // `--out`: the token in a private file, nothing on stdout; it joins by `--token-file`
    // (in a second home).
    let handed = app_host.path().join("app.token");
    let minted = studio.cli(&["app", "token", "--out", &handed.to_string_lossy()]);
    assert!(minted.status.success(), "{minted:?}");
    assert_eq!(stdout(&minted), "");
    assert_eq!(mode(&handed), 0o600);
    let other = app_host.path().join("other-home");
    let joined = on_app_host(
        &other,
        &[
            "app",
            "join",
            "--server",
            server,
            "--token-file",
            &handed.to_string_lossy(),
        ],
    );
    assert!(joined.status.success(), "{joined:?}");
    assert_eq!(mode(&other.join("run/app/key.pem")), 0o600);
}

#[test]
fn a_studiod_without_an_apps_listener_makes_no_app_token() {
    let studio = Studio::start();
    let out = studio.cli(&["app", "token"]);
    let why = refused(&out, 1);
    assert!(
        why.contains("apps listener") && why.contains("STUDIO_APPS_ADDR"),
        "{why}"
    );
    assert!(stdout(&out).is_empty(), "{out:?}");
    // `studio app` with flags is still studio-app's own.
    let help = studio_cmd(&["app", "--help"], &[], None)
        .output()
        .expect("run studio app --help");
    assert!(help.status.success(), "{help:?}");
    assert!(stdout(&help).contains("--daemon-addr"), "{help:?}");
}
