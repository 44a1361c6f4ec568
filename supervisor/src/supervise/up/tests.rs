//! `up` end to end with fake children: shell scripts that read the key, announce
//! readiness and sleep. The test itself plays studiod's control socket.

use std::{
    fs,
    io::{BufRead, BufReader, Write},
    os::unix::{fs::PermissionsExt, net::UnixListener},
    path::Path,
    time::Instant,
};

use super::*;
use crate::testdir::TestDir;

const FAKE_DAEMON: &str = r#"#!/bin/sh
read key
dir=$(dirname "$0")
echo "$key" >> "$dir/keys"
echo "$*" > "$dir/daemon-args"
echo "token=${STUDIO_TOKEN:-unset}" >&2
echo "STUDIO_READY {\"pid\":$$,\"addr\":\"127.0.0.1:7001\",\"epoch\":\"ep$$\"}"
exec sleep 300
"#;

const FAKE_APP: &str = r#"#!/bin/sh
read key
dir=$(dirname "$0")
echo "$key" >> "$dir/keys"
echo "$*" > "$dir/app-args"
echo "STUDIO_READY {\"pid\":$$,\"addr\":\"127.0.0.1:7000\",\"origin\":\"http://127.0.0.1:7000\"}"
exec sleep 300
"#;

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, body).expect("write script");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn config(dir: &TestDir, daemon: &str, app: &str) -> UpConfig {
    let bin = dir.path().join("bin");
    fs::create_dir_all(&bin).expect("bin");
    UpConfig {
        home: Home::new(dir.path().join("home")),
        app_addr: "127.0.0.1:7000".parse().expect("addr"),
        daemon_addr: "127.0.0.1:7001".parse().expect("addr"),
        open: false,
        daemon_bin: Some(script(&bin, "studiod", daemon)),
        app_bin: Some(script(&bin, "studio-app", app)),
        public_origin: None,
        token_from_env: false,
        stop_grace: Duration::from_secs(2),
        ready_timeout: Duration::from_secs(10),
        daemon_lock_wait: Duration::from_secs(1),
        log_max_bytes: 1024 * 1024,
        log_keep: 2,
    }
}

/// Plays studiod's `run/daemon.sock`: answers every pair request with a fixed code.
fn fake_daemon_socket(home: &Home) {
    home.prepare().expect("prepare");
    let listener = UnixListener::bind(home.daemon_socket()).expect("bind daemon.sock");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let mut line = String::new();
            if BufReader::new(&s).read_line(&mut line).is_ok() {
                let _ = s.write_all(
                    b"{\"pair\":{\"code\":\"0123abcdCODE\",\"epoch\":\"e\",\"expires_at_ms\":42}}\n",
                );
            }
        }
    });
}

async fn ask(home: &Home, req: Request) -> Reply {
    control::request(&home.supervisor_socket(), &req, Duration::from_secs(10))
        .await
        .expect("supervisor answers")
}

async fn status(home: &Home) -> control::Status {
    match ask(home, Request::Status).await {
        Reply::Status(s) => *s,
        other => panic!("not a status: {other:?}"),
    }
}

async fn until(home: &Home, what: &str, f: impl Fn(&control::Status) -> bool) -> control::Status {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if home.supervisor_socket().exists() {
            let s = status(home).await;
            if f(&s) {
                return s;
            }
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn alive(pid: u32) -> bool {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid");
    rustix::process::test_kill_process(pid).is_ok()
}

#[tokio::test]
async fn up_supervises_both_children_and_stops_in_order() {
    let dir = TestDir::new("up");
    let cfg = config(&dir, FAKE_DAEMON, FAKE_APP);
    let home = cfg.home.clone();
    fake_daemon_socket(&home);

    let driver = async {
        let s = until(&home, "both running", |s| {
            s.children.app.state == State::Running && s.children.daemon.state == State::Running
        })
        .await;
        assert_eq!(s.supervisor.pid, std::process::id());
        assert_eq!(s.app_url, "http://127.0.0.1:7000");
        let daemon = s.children.daemon.clone();
        let app = s.children.app.clone();
        assert_eq!(daemon.epoch, daemon.pid.map(|p| format!("ep{p}")));
        assert_eq!(daemon.addr.as_deref(), Some("127.0.0.1:7001"));
        assert_eq!(app.epoch, None);

        // Flags as the launch protocol says; the token went to run/token, not the env.
        let bin = dir.path().join("bin");
        let pid = std::process::id();
        let home_s = home.root().display();
        assert_eq!(
            fs::read_to_string(bin.join("daemon-args"))
                .expect("args")
                .trim(),
            format!(
                "--home {home_s} --addr 127.0.0.1:7001 --app-origin http://127.0.0.1:7000 --app-key-stdin --supervisor-pid {pid}"
            )
        );
        assert_eq!(
            fs::read_to_string(bin.join("app-args"))
                .expect("args")
                .trim(),
            format!(
                "--home {home_s} --addr 127.0.0.1:7000 --daemon-addr 127.0.0.1:7001 --daemon-socket {home_s}/run/api.sock --app-key-stdin --supervisor-pid {pid}"
            )
        );
        let token = Home::read_secret(&home.token_file()).expect("0600 token");
        assert!(token.starts_with("stk_") && token.len() > 40);

        // The lock is held: a second supervisor would only ask for a link.
        assert!(lock(&home).expect("probe").is_none());
        assert_eq!(
            ask(&home, Request::Pair { role: None }).await,
            Reply::Pair(PairLink {
                url: "http://127.0.0.1:7000/#pair=0123abcdCODE".into(),
                expires_at_ms: 42
            })
        );

        // A second `up` in the same home starts nothing and just asks for a link.
        up(cfg.clone(), std::future::pending())
            .await
            .expect("second up");
        assert_eq!(status(&home).await.children.app.pid, app.pid);

        // Restarting the app leaves the daemon alone.
        assert_eq!(
            ask(
                &home,
                Request::Restart {
                    child: ChildName::App
                }
            )
            .await,
            Reply::Ok(true)
        );
        let s = until(&home, "app restarted", |s| {
            s.children.app.state == State::Running && s.children.app.pid != app.pid
        })
        .await;
        assert_eq!(s.children.app.restarts, 1);
        assert_eq!(s.children.daemon.pid, daemon.pid);
        assert!(!alive(app.pid.expect("pid")), "the old app is gone");

        // A daemon crash restarts the daemon only, with a new epoch.
        let app = s.children.app.clone();
        let dpid =
            rustix::process::Pid::from_raw(i32::try_from(daemon.pid.expect("pid")).expect("pid"))
                .expect("pid");
        rustix::process::kill_process(dpid, rustix::process::Signal::KILL).expect("kill");
        let s = until(&home, "daemon back", |s| {
            s.children.daemon.state == State::Running && s.children.daemon.pid != daemon.pid
        })
        .await;
        assert_ne!(s.children.daemon.epoch, daemon.epoch);
        assert_eq!(s.children.daemon.restarts, 1);
        assert_eq!(s.children.app.pid, app.pid);

        // Same key for every start, 64 hex digits.
        let keys = fs::read_to_string(bin.join("keys")).expect("keys");
        let keys: Vec<&str> = keys.lines().collect();
        assert_eq!(keys.len(), 4, "{keys:?}");
        assert!(keys.iter().all(|k| *k == keys[0] && k.len() == 64));
        let log = fs::read_to_string(home.log_file("daemon")).expect("daemon.log");
        assert!(log.contains("token=unset"), "{log}");
        assert!(log.contains("STUDIO_READY"), "{log}");
        assert!(!log.contains(keys[0]), "the key never reaches a log");

        let last = (s.children.app.pid, s.children.daemon.pid);
        assert_eq!(ask(&home, Request::Stop).await, Reply::Ok(true));
        last
    };
    let (result, (app_pid, daemon_pid)) =
        tokio::join!(up(cfg.clone(), std::future::pending()), driver);
    result.expect("up ends cleanly");
    assert!(!alive(app_pid.expect("pid")));
    assert!(!alive(daemon_pid.expect("pid")));
    assert!(!home.supervisor_socket().exists());
    assert!(lock(&home).expect("free").is_some(), "the lock is released");
    let log = fs::read_to_string(home.log_file("app")).expect("app.log");
    assert!(log.contains("app stopped"), "{log}");
}

#[tokio::test]
async fn a_child_with_bad_configuration_ends_the_launch() {
    let dir = TestDir::new("up-bad");
    let cfg = config(&dir, "#!/bin/sh\necho 'bad flag' >&2\nexit 64\n", FAKE_APP);
    let home = cfg.home.clone();
    let err = tokio::time::timeout(Duration::from_secs(20), up(cfg, std::future::pending()))
        .await
        .expect("gives up quickly")
        .expect_err("fails");
    let text = err.to_string();
    assert!(
        text.contains("daemon failed to start") && text.contains("exit status 64"),
        "{text}"
    );
    assert!(!home.supervisor_socket().exists());
    assert!(lock(&home).expect("free").is_some());
    assert!(
        fs::read_to_string(home.log_file("daemon"))
            .expect("log")
            .contains("bad flag")
    );
    assert!(
        !dir.path().join("bin/keys").exists(),
        "the app never started"
    );
}

#[tokio::test]
async fn shutdown_during_launch_stops_what_started() {
    let dir = TestDir::new("up-sig");
    // A daemon that never becomes ready and ignores TERM.
    let cfg = config(
        &dir,
        "#!/bin/sh\ntrap '' TERM\nread key\nwhile :; do sleep 1; done\n",
        FAKE_APP,
    );
    let home = cfg.home.clone();
    let shutdown = async {
        until(&home, "daemon starting", |s| {
            s.children.daemon.pid.is_some()
        })
        .await;
    };
    let started = Instant::now();
    up(cfg, shutdown).await.expect("clean stop");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!home.supervisor_socket().exists());
}
