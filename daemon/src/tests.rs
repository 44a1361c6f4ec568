//! A whole daemon in-process: build, serve, the control socket, a clean stop.

use std::{os::unix::fs::PermissionsExt, time::Duration};

use studio_contract::control::{self, DaemonReply, DaemonRequest};
use tokio::sync::oneshot;

use super::*;
use crate::testing::TempDir;

async fn pair_over_control(home: &Home) -> DaemonReply {
    let socket = home.daemon_socket();
    tokio::task::spawn_blocking(move || {
        control::request(
            &socket,
            &DaemonRequest::Pair { role: None },
            Duration::from_secs(5),
        )
    })
    .await
    .expect("join")
    .expect("control reply")
}

#[tokio::test]
async fn serves_then_stops_cleanly_recording_the_epoch() {
    let dir = TempDir::new("daemon");
    let config = Config::for_home(dir.path());
    let home = config.home.clone();
    let daemon = Daemon::build(config).await.expect("build");
    let epoch = daemon.epoch().to_owned();
    assert_eq!(epoch.len(), 32);
    assert!(daemon.addr().port() != 0);
    let token_mode = std::fs::metadata(home.token_file())
        .expect("token")
        .permissions()
        .mode();
    assert_eq!(token_mode & 0o777, 0o600);

    let (stop, stopped) = oneshot::channel::<()>();
    let (ready_tx, ready_rx) = oneshot::channel();
    let running = tokio::spawn(daemon.run_until(
        async move {
            let _ = stopped.await;
        },
        move |ready| {
            let _ = ready_tx.send(ready.clone());
        },
    ));
    let ready = ready_rx.await.expect("ready");
    assert_eq!(ready.epoch.as_deref(), Some(epoch.as_str()));
    assert_eq!(ready.origin, None);

    let DaemonReply::Pair(code) = pair_over_control(&home).await else {
        panic!("expected a pairing code");
    };
    assert_eq!(code.epoch, epoch);
    assert!(code.code.starts_with(&epoch[..8]));
    assert_eq!(code.code.len(), 40);

    stop.send(()).expect("stop");
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("stops in time")
        .expect("join")
        .expect("clean stop");
    assert!(!home.verifier_socket().exists());
    assert!(!home.daemon_socket().exists());

    let store = Store::open(&home.state_db()).await.expect("reopen");
    assert!(store.epoch_stopped_at(&epoch).await.expect("row").is_some());
    let kinds: Vec<String> = store
        .events_of_epoch(&epoch)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["epoch_started", "pairing_minted", "epoch_stopped"]);
    let events = store.events_of_epoch(&epoch).await.expect("events");
    assert!(
        events.iter().all(|e| !e.detail.contains(&code.code)),
        "codes never reach the audit trail"
    );
    store.close().await;

    // A restart keeps the token but starts a new epoch.
    let token = Home::read_secret(&home.token_file()).expect("token");
    let again = Daemon::build(Config::for_home(dir.path()))
        .await
        .expect("rebuild");
    assert_ne!(again.epoch(), epoch);
    assert_eq!(Home::read_secret(&home.token_file()).expect("token"), token);
}

#[tokio::test]
async fn token_sources() {
    let dir = TempDir::new("token");
    let mut config = Config::for_home(dir.path());
    config.token = Some("from-env".into());
    config.home.prepare().expect("prepare");
    assert_eq!(daemon_token(&config).expect("env"), "from-env");
    assert!(
        !config.home.token_file().exists(),
        "an env token is not written"
    );

    config.token = None;
    Home::write_secret(&config.home.token_file(), "from-file\n").expect("write");
    assert_eq!(daemon_token(&config).expect("file"), "from-file");
    std::fs::set_permissions(
        config.home.token_file(),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    assert!(daemon_token(&config).expect_err("too open").is_config());
}

#[tokio::test]
async fn a_second_daemon_on_the_home_waits_for_the_first_to_finish() {
    let dir = TempDir::new("two");
    let first = Daemon::build(Config::for_home(dir.path()))
        .await
        .expect("first");
    let home = Home::new(dir.path());

    let mut impatient = Config::for_home(dir.path());
    impatient.lock_wait = Duration::from_millis(200);
    let err = Daemon::build(impatient).await.err().expect("held");
    assert!(err.is_config(), "exit 64: {err}");
    let line = chain(&err);
    assert!(
        line.contains(&format!("pid {}", std::process::id())),
        "{line}"
    );
    assert!(line.contains(&dir.path().display().to_string()), "{line}");
    // The refused one bound nothing: the first one's sockets are untouched.
    assert!(home.daemon_socket().exists() && home.verifier_socket().exists());

    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(first.run_until(
        async move {
            let _ = stopped.await;
        },
        |_| {},
    ));
    let second = tokio::spawn(Daemon::build(Config::for_home(dir.path())));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "it waits while the first one runs");
    stop.send(()).expect("stop");
    running.await.expect("join").expect("clean stop");
    let second = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("in time")
        .expect("join")
        .expect("second builds once the first is gone");
    // The first one's stop removed only its own files; these are the second's.
    assert!(home.daemon_socket().exists() && home.verifier_socket().exists());
    let epoch = second.epoch().to_owned();
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(second.run_until(
        async move {
            let _ = stopped.await;
        },
        |_| {},
    ));
    let DaemonReply::Pair(code) = pair_over_control(&home).await else {
        panic!("expected a pairing code");
    };
    assert_eq!(code.epoch, epoch);
    stop.send(()).expect("stop");
    running.await.expect("join").expect("clean stop");
}
