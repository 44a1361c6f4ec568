//! Running under a service manager (deploy/systemd/, docs/DEPLOY.md): the units pass
//! `systemd-analyze verify` with the real binary in place of the installed one, and
//! studiod and studio-app tell `NOTIFY_SOCKET` `READY=1` once they serve — after their
//! readiness lines, so a unit is started only when its listener answers.

use std::{
    io::{BufRead, BufReader},
    os::unix::net::UnixDatagram,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use studio_tests::{TempDir, WORKER_ADDR, bins, free_port};

fn units() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/systemd");
    let mut units: Vec<_> = std::fs::read_dir(&dir)
        .expect("deploy/systemd")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "service"))
        .collect();
    units.sort();
    units
}

#[test]
fn the_units_verify_with_the_real_binary() {
    let units = units();
    assert_eq!(units.len(), 3, "{units:?}");
    let Ok(probe) = Command::new("systemd-analyze").arg("--version").output() else {
        println!("skipped: systemd-analyze is not installed here");
        return;
    };
    assert!(probe.status.success());
    let out = TempDir::new("units");
    let studio = bins().studio.display().to_string();
    let mut copies = Vec::new();
    for unit in &units {
        let text = std::fs::read_to_string(unit).expect("unit");
        // Hardening and ordering are checked as written; only the program's place moves.
        assert!(text.contains("Type=notify") && text.contains("NoNewPrivileges=yes"));
        assert!(text.contains("ProtectSystem=strict") && text.contains("PrivateTmp=yes"));
        assert!(text.contains("Restart=on-failure") && text.contains("NotifyAccess=main"));
        let copy = out.path().join(unit.file_name().expect("name"));
        std::fs::write(&copy, text.replace("/usr/local/bin/studio", &studio)).expect("copy");
        copies.push(copy);
    }
    let app = std::fs::read_to_string(out.path().join("studio-app.service")).expect("app");
    assert!(
        !app.contains("PartOf=") && !app.contains("BindsTo=") && !app.contains("Requires="),
        "restarting the app's unit must not touch studiod's"
    );
    let verified = Command::new("systemd-analyze")
        .arg("verify")
        .args(&copies)
        .output()
        .expect("systemd-analyze");
    let said = String::from_utf8_lossy(&verified.stderr);
    // The units name a user and a key file of the target machine, not of this one.
    let real: Vec<&str> = said
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| {
            !l.contains("/etc/studio/app.key") && !l.contains("User=") && !l.contains("Group=")
        })
        .collect();
    assert!(verified.status.success() && real.is_empty(), "{said}");
}

#[test]
fn studiod_tells_the_service_manager_it_is_ready_after_it_serves() {
    let home = TempDir::new("notify");
    let socket = home.path().join("notify.sock");
    let manager = UnixDatagram::bind(&socket).expect("bind");
    manager
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(&bins().studiod)
        .arg("--home")
        .arg(home.path())
        .args(["--addr", &addr])
        .env_remove("STUDIO_TOKEN")
        .env(WORKER_ADDR.0, WORKER_ADDR.1)
        .env("NOTIFY_SOCKET", &socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn studiod");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().expect("stdout");
    let child = Kill(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("readiness line");
    assert!(line.contains(&addr), "{line}");
    let mut buf = [0u8; 256];
    let n = manager.recv(&mut buf).expect("a notification");
    assert_eq!(&buf[..n], b"READY=1");
    // It is ready indeed: the API answers.
    let health = std::net::TcpStream::connect(&addr);
    assert!(health.is_ok(), "{health:?}");
    drop(child);
}

#[tokio::test]
async fn studio_app_tells_the_service_manager_too() {
    let dir = TempDir::new("notify-app");
    let socket = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&socket).expect("bind");
    manager
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    // `studio up` hands its environment to both children: each says it is ready.
    let path = socket.display().to_string();
    let studio = studio_tests::Studio::start_with(&[("NOTIFY_SOCKET", &path)]);
    // studiod sends one (the test above): the second is the app's.
    for _ in 0..2 {
        let mut buf = [0u8; 256];
        let n = manager.recv(&mut buf).expect("a notification");
        assert_eq!(&buf[..n], b"READY=1");
    }
    let health = studio_tests::http()
        .get(studio.app_url("/health"))
        .send()
        .await
        .expect("the app answers");
    assert!(health.status().is_success());
}
