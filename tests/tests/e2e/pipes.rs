//! A reader that went away: studiod, studio-app and the supervisor whose stderr pipe has
//! no reader (their supervisor died) still log, serve and stop cleanly on SIGTERM, with
//! status 0 rather than a panic's 101; the CLI piped into `head` ends quietly.

use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, ChildStdout, Command, Stdio},
    time::Duration,
};

use rustix::process::Signal;
use studio_contract::ready::Ready;
use studio_tests::{TempDir, WORKER_ADDR, alive, bins, free_port, http, signal, wait_for};

/// A pipe whose read end is already closed: every write to it fails with EPIPE.
fn readerless() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    writer
}

/// Kills by pid whatever is still alive when the test ends, passing or not: the pids
/// given, and any process whose command line names `home` (children not yet known).
struct Reap {
    pids: Vec<u32>,
    home: std::path::PathBuf,
}

impl Drop for Reap {
    fn drop(&mut self) {
        let home = self.home.to_string_lossy().into_owned();
        let named = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&home))
            });
        let all: Vec<u32> = self.pids.iter().copied().chain(named).collect();
        for pid in all {
            if alive(pid) {
                signal(pid, Signal::KILL);
            }
        }
    }
}

/// Reads the readiness line; the rest of stdout is then left without a reader too.
fn ready_line(child: &mut Child) -> Ready {
    let out: ChildStdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).expect("stdout");
    Ready::parse(&line).unwrap_or_else(|| panic!("no readiness line: {line:?}"))
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    signal(child.id(), Signal::TERM);
    wait_for(Duration::from_secs(20), || child.try_wait().ok().flatten())
        .unwrap_or_else(|| panic!("pid {} did not stop on SIGTERM", child.id()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_and_the_app_log_into_a_closed_pipe_and_still_stop_with_zero() {
    let home = TempDir::new("pipes");
    let daemon_addr = format!("127.0.0.1:{}", free_port());
    let mut daemon = Command::new(&bins().studiod)
        .arg("--home")
        .arg(home.path())
        .args(["--addr", &daemon_addr])
        .env_remove("STUDIO_TOKEN")
        .env(WORKER_ADDR.0, WORKER_ADDR.1)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(readerless())
        .spawn()
        .expect("studiod");
    let mut reap = Reap {
        pids: vec![daemon.id()],
        home: home.path().to_path_buf(),
    };
    // Its start-up lines already went nowhere; it serves all the same.
    let ready = ready_line(&mut daemon);
    assert_eq!(ready.addr, daemon_addr);

    let app_addr = format!("127.0.0.1:{}", free_port());
    let mut app = Command::new(&bins().app)
        .arg("--home")
        .arg(home.path())
        .args(["--addr", &app_addr, "--daemon-addr", &daemon_addr])
        .arg("--app-key-stdin")
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(readerless())
        .spawn()
        .expect("studio-app");
    reap.pids.push(app.id());
    let key = studio_contract::secret::AppKey::generate().to_hex();
    app.stdin
        .take()
        .expect("stdin")
        .write_all(format!("{key}\n").as_bytes())
        .expect("hand over the key");
    ready_line(&mut app);

    // Requests that log at info: a refused pairing, on each.
    for base in [&daemon_addr, &app_addr] {
        let resp = http()
            .post(format!("http://{base}/api/studio/pair"))
            .header("content-type", "application/json")
            .header("origin", format!("http://{base}"))
            .body(r#"{"code":"not-a-code"}"#)
            .send()
            .await
            .expect("pair request");
        let status = resp.status().as_u16();
        assert!((400..600).contains(&status), "{base}: {status}");
    }
    let health = http()
        .get(format!("http://{daemon_addr}/health"))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status(), 200, "studiod still serves");

    let status = terminate(&mut app);
    assert_eq!(status.code(), Some(0), "studio-app: {status}");
    let status = terminate(&mut daemon);
    assert_eq!(status.code(), Some(0), "studiod: {status}");
    assert!(!home.path().join("run/daemon.sock").exists());
    drop(reap);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_without_readers_still_stops_its_children_and_exits_zero() {
    let home = TempDir::new("pipes-up");
    let mut up = Command::new(&bins().studio)
        .arg("up")
        .arg("--home")
        .arg(home.path())
        .args(["--app-addr", &format!("127.0.0.1:{}", free_port())])
        .args(["--daemon-addr", &format!("127.0.0.1:{}", free_port())])
        .env_remove("STUDIO_TOKEN")
        .env_remove("STUDIO_HOME")
        .env("STUDIO_STOP_GRACE_MS", "3000")
        .env(WORKER_ADDR.0, WORKER_ADDR.1)
        .stdin(Stdio::null())
        .stdout(readerless())
        .stderr(readerless())
        .spawn()
        .expect("studio up");
    let mut reap = Reap {
        pids: vec![up.id()],
        home: home.path().to_path_buf(),
    };
    // It printed its link into the closed stdout; its control socket tells it is up.
    let status = wait_for(Duration::from_secs(60), || {
        let out = Command::new(&bins().studio)
            .args(["status", "--json", "--home"])
            .arg(home.path())
            .stdin(Stdio::null())
            .output()
            .ok()?;
        // The supervisor's control-socket status: no studiod API body (see Studio::status).
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let children = &status["status"]["children"];
        (children["daemon"]["state"] == "running" && children["app"]["state"] == "running")
            .then(|| children.clone())
    })
    .expect("both children running");
    let pids: Vec<u32> = ["daemon", "app"]
        .iter()
        .filter_map(|c| status[*c]["pid"].as_u64())
        .map(|p| u32::try_from(p).expect("pid"))
        .collect();
    reap.pids.extend(&pids);

    let exit = terminate(&mut up);
    assert_eq!(exit.code(), Some(0), "studio up: {exit}");
    for pid in pids {
        assert!(!alive(pid), "child {pid} survived");
    }
    drop(reap);
}

#[test]
fn the_cli_piped_into_a_closed_reader_ends_quietly() {
    let out = Command::new(&bins().studio)
        .args(["schedule", "preview", "--every", "1m", "--count", "1000"])
        .env("STUDIO_SCHEDULER_TZ", "UTC")
        .stdin(Stdio::null())
        .stdout(readerless())
        .stderr(Stdio::piped())
        .output()
        .expect("studio schedule preview");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "nothing said: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
