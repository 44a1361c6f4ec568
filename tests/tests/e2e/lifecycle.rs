//! Supervision: restarts, crash isolation, fail-closed, ordered stop, no leftovers.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use rustix::process::Signal;
use studio_api::{Code, Identity, Run, RunDetail, RunStatus, Schedule, app::AppHealth};
use studio_tests::{
    Reply, Studio, TempDir, WORKER_ADDR, alive,
    api::{command_spec, every},
    bins, free_port, http, signal, wait_for,
};

use crate::{get_with_cookie, get_with_token, paired_cookie};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_crash_is_restarted_without_touching_the_daemon_or_the_session() {
    let studio = Studio::start();
    let cookie = paired_cookie(&studio).await;
    let daemon = studio.child("daemon");
    let app_pid = studio.child_pid("app");

    signal(app_pid, Signal::KILL);
    let killed = Instant::now();
    let new_app = studio.wait_running("app", Some(app_pid), Duration::from_secs(20));
    assert_ne!(new_app, app_pid);
    let back = wait_for(Duration::from_secs(20), || {
        let resp = block(get_with_cookie(&studio, "/api/identity", &cookie));
        (resp.status() == 200).then(|| block(resp.json::<Identity>()).ok())?
    })
    .expect("the paired browser works again through the restarted app");
    eprintln!(
        "app restart after kill -9 until /api/identity answers: {:?}",
        killed.elapsed()
    );

    let after = studio.child("daemon");
    assert_eq!(after["pid"], daemon["pid"], "the daemon kept its pid");
    assert_eq!(after["epoch"], daemon["epoch"], "the daemon kept its epoch");
    assert_eq!(daemon["epoch"], back.epoch);
    assert!(studio.child("app")["restarts"].as_u64() >= Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_crash_answers_503_meanwhile_and_the_app_recovers_by_itself() {
    let studio = Studio::start();
    let app_pid = studio.child_pid("app");
    let daemon_pid = studio.child_pid("daemon");
    let old_epoch = studio.child("daemon")["epoch"].clone();

    signal(daemon_pid, Signal::KILL);
    let mut saw_unavailable = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    let new_epoch = loop {
        assert!(Instant::now() < deadline, "the app never recovered");
        let resp = get_with_token(&studio, &studio.app_url("/api/identity")).await;
        let reply = Reply::of(resp).await;
        match reply.status {
            503 => {
                assert_eq!(reply.error().code, Code::DaemonUnavailable);
                saw_unavailable = true;
            }
            200 => {
                let epoch = reply.json::<Identity>().epoch;
                if old_epoch != epoch {
                    break epoch;
                }
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        saw_unavailable,
        "requests were refused with 503 while the daemon was down"
    );
    assert_ne!(old_epoch, new_epoch);
    assert_eq!(
        studio.child_pid("app"),
        app_pid,
        "the app was not restarted"
    );
    // Health follows the app's Watch stream, which reconnects with a bounded backoff.
    let healthy = wait_for(Duration::from_secs(5), || {
        let resp = block(http().get(studio.app_url("/health")).send()).ok()?;
        let health: AppHealth = block(Reply::of(resp)).json();
        (health.daemon == "ok").then_some(())
    });
    assert!(
        healthy.is_some(),
        "the app's health reports the daemon again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_daemon_is_a_503_within_the_deadline() {
    let studio = Studio::start();
    let cookie = paired_cookie(&studio).await;
    assert_eq!(
        get_with_cookie(&studio, "/api/identity", &cookie)
            .await
            .status(),
        200
    );
    let daemon_pid = studio.child_pid("daemon");

    signal(daemon_pid, Signal::STOP);
    // Let any cached verdict go stale with the missing heartbeats.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let resp = get_with_cookie(&studio, "/api/identity", &cookie).await;
    let elapsed = started.elapsed();
    let reply = Reply::of(resp).await;
    signal(daemon_pid, Signal::CONT);
    assert_eq!(reply.code(), (503, Code::DaemonUnavailable));
    assert!(
        elapsed < Duration::from_millis(2_600),
        "answered after {elapsed:?}"
    );

    let ok = wait_for(Duration::from_secs(15), || {
        (block(get_with_cookie(&studio, "/api/identity", &cookie)).status() == 200).then_some(())
    });
    assert!(ok.is_some(), "the app recovers once the daemon runs again");
    assert_eq!(studio.child_pid("daemon"), daemon_pid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_stop_leaves_no_process_behind() {
    let mut studio = Studio::start();
    let pids = [
        studio.supervisor_pid(),
        studio.child_pid("daemon"),
        studio.child_pid("app"),
    ];
    let out = studio.cli(&["stop"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        studio.wait_exit(Duration::from_secs(15)),
        Some(true),
        "supervisor exits 0"
    );
    for pid in pids {
        assert!(!alive(pid), "pid {pid} survived studio stop");
    }
    let run = studio.home_path().join("run");
    for sock in ["verifier.sock", "daemon.sock", "supervisor.sock"] {
        assert!(!run.join(sock).exists(), "{sock} was left behind");
    }
    let out = studio.cli(&["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not running"));
}

/// Whether any process still belongs to process group `pgid`.
fn group_alive(pgid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| alive(*pid))
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace().nth(2)?.parse::<u32>().ok()
        })
        .any(|group| group == pgid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_stop_cancels_running_jobs_and_records_it() {
    let mut studio = Studio::start_with(&[("STUDIO_COMMAND_ALLOWLIST", "sh")]);
    let pidfile = studio.home_path().join("job.pid");
    let script = format!("echo $$ > '{}'; sleep 60 & sleep 60", pidfile.display());
    let (run_id, pid) = start_job(&studio, "long", &script, &pidfile).await;
    let _guard = KillOnDrop(Vec::new()).with(pid);
    assert!(group_alive(pid));

    let out = studio.cli(&["stop"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(studio.wait_exit(Duration::from_secs(15)), Some(true));
    assert!(
        !group_alive(pid),
        "a process of the job's group outlived studio stop"
    );
    // Recorded as cancelled by the daemon that stopped, not found lost by the next one.
    let home = studio.stop_keep_home(Duration::from_secs(5));
    let studio = Studio::start_in(home, &[]);
    let run: RunDetail = Reply::of(
        get_with_token(&studio, &studio.daemon_url(&format!("/api/runs/{run_id}"))).await,
    )
    .await
    .expect(200);
    assert_eq!(run.run.core.status, RunStatus::Cancelled, "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_app_then_the_daemon_and_exits_zero() {
    let mut studio = Studio::start();
    let pids = [studio.child_pid("daemon"), studio.child_pid("app")];
    assert_eq!(studio.terminate(Duration::from_secs(15)), Some(true));
    for pid in pids {
        assert!(!alive(pid), "pid {pid} survived");
    }
    let daemon_log = studio.log("daemon");
    assert!(
        !daemon_log.is_empty(),
        "the daemon's output reached logs/daemon.log"
    );
    assert!(
        !studio.log("app").is_empty(),
        "the app's output reached logs/app.log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_die_with_a_killed_supervisor() {
    let studio = Studio::start();
    let pids = [studio.child_pid("daemon"), studio.child_pid("app")];
    signal(studio.supervisor_pid(), Signal::KILL);
    let gone = wait_for(Duration::from_secs(10), || {
        pids.iter().all(|p| !alive(*p)).then_some(())
    });
    assert!(gone.is_some(), "children outlived a SIGKILLed supervisor");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_up_only_prints_a_fresh_link() {
    let studio = Studio::start();
    let pids = (studio.child_pid("daemon"), studio.child_pid("app"));
    let started = Instant::now();
    let out = Command::new(&bins().studio)
        .args(["up", "--home"])
        .arg(studio.home_path())
        .args(["--app-addr", &studio.app_addr.to_string()])
        .args(["--daemon-addr", &studio.daemon_addr.to_string()])
        .stdin(Stdio::null())
        .output()
        .expect("second studio up");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Studio is ready: http://"), "{text}");
    let code = studio_tests::code_from_link(&text).expect("a link");
    assert_ne!(code, studio.first_code());
    assert_eq!((studio.child_pid("daemon"), studio.child_pid("app")), pids);
    let reply = Reply::of(crate::pair(&studio, &code).await).await;
    assert_eq!(reply.status, 200, "the fresh link pairs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_describes_both_children_and_secrets_stay_out_of_logs() {
    let studio = Studio::start();
    let status = studio.status();
    let children = if status["status"].is_object() {
        &status["status"]["children"]
    } else {
        &status["children"]
    };
    for name in ["daemon", "app"] {
        let c = &children[name];
        assert_eq!(c["state"], "running", "{status}");
        assert!(c["pid"].as_u64().is_some_and(|p| p > 1));
        assert_eq!(c["restarts"], 0);
        assert!(c["started_at"].as_str().is_some_and(|t| t.contains('T')));
    }
    let identity: Identity =
        Reply::of(get_with_token(&studio, &studio.daemon_url("/api/identity")).await)
            .await
            .json();
    assert_eq!(children["daemon"]["epoch"], identity.epoch);

    let human = studio.cli(&["status"]);
    assert!(human.status.success());
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("daemon") && text.contains("app") && text.contains("running"),
        "{text}"
    );

    let code = studio.first_code();
    let _ = crate::pair(&studio, &code).await;
    let token = studio.token();
    let logs = format!(
        "{}{}{}",
        studio.log("daemon"),
        studio.log("app"),
        std::fs::read_to_string(studio.home_path().join("supervisor.stderr")).unwrap_or_default()
    );
    assert!(!logs.is_empty());
    assert!(!logs.contains(&code), "a pairing code reached a log");
    assert!(!logs.contains(&token), "the daemon token reached a log");

    let out = studio.cli(&["logs", "daemon"]);
    assert!(out.status.success());
    assert!(!out.stdout.is_empty());
    let out = studio.cli(&["restart", "everything"]);
    assert_eq!(out.status.code(), Some(2), "a usage error exits 2");
}

/// A user's own `STUDIO_TOKEN` given to `studio up` is studiod's alone: the app, which
/// holds no secret, never inherits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_daemon_token_reaches_studiod_and_never_the_app() {
    let token = "stk_a-token-the-user-chose-for-this-test";
    let studio = Studio::start_with(&[("STUDIO_TOKEN", token)]);
    let inherits = |pid: u32| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .expect("environ")
            .split(|b| *b == 0)
            .any(|kv| kv.starts_with(b"STUDIO_TOKEN="))
    };
    assert!(inherits(studio.child_pid("daemon")), "studiod has it");
    assert!(
        !inherits(studio.child_pid("app")),
        "the app holds no secret"
    );
    let resp = http()
        .get(studio.daemon_url("/api/identity"))
        .bearer_auth(token)
        .send()
        .await
        .expect("identity");
    assert_eq!(resp.status(), 200, "the user's token is the daemon token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_runs_alone_and_the_app_alone_fails_closed() {
    let home = TempDir::new("alone");
    let daemon_addr = format!("127.0.0.1:{}", free_port());
    let mut daemon = Command::new(&bins().studiod)
        .args(["--home"])
        .arg(home.path())
        .args(["--addr", &daemon_addr])
        .env_remove("STUDIO_TOKEN")
        .env(WORKER_ADDR.0, WORKER_ADDR.1)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("studiod");
    let daemon_pid = daemon.id();
    let guard = KillOnDrop(vec![daemon_pid]);
    let mut line = String::new();
    let mut out = std::io::BufReader::new(daemon.stdout.take().expect("stdout"));
    std::io::BufRead::read_line(&mut out, &mut line).expect("readiness line");
    let ready = studio_contract::ready::Ready::parse(&line).expect("a readiness line");
    assert_eq!(ready.addr, daemon_addr);
    let token = std::fs::read_to_string(home.path().join("run/token")).expect("minted token");
    let resp = http()
        .get(format!("http://{daemon_addr}/api/identity"))
        .bearer_auth(token.trim())
        .send()
        .await
        .expect("identity");
    let identity: Identity = Reply::of(resp).await.expect(200);
    assert_eq!(Some(identity.epoch.as_str()), ready.epoch.as_deref());

    // An app whose key the daemon does not share: everything under /api fails closed.
    let app_addr = format!("127.0.0.1:{}", free_port());
    let mut app = Command::new(&bins().app)
        .args(["--home"])
        .arg(home.path())
        .args([
            "--addr",
            &app_addr,
            "--daemon-addr",
            &daemon_addr,
            "--app-key-stdin",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("studio-app");
    let guard = guard.with(app.id());
    let key = studio_contract::secret::AppKey::generate().to_hex();
    std::io::Write::write_all(
        &mut app.stdin.take().expect("stdin"),
        format!("{key}\n").as_bytes(),
    )
    .expect("hand over the key");
    let mut line = String::new();
    let mut out = std::io::BufReader::new(app.stdout.take().expect("stdout"));
    std::io::BufRead::read_line(&mut out, &mut line).expect("readiness line");
    assert!(
        studio_contract::ready::Ready::parse(&line).is_some(),
        "{line:?}"
    );
    let resp = http()
        .get(format!("http://{app_addr}/api/identity"))
        .bearer_auth(token.trim())
        .send()
        .await
        .expect("identity");
    let reply = Reply::of(resp).await;
    assert_eq!(reply.code(), (503, Code::DaemonUnavailable));
    let page = http()
        .get(format!("http://{app_addr}/"))
        .send()
        .await
        .expect("page");
    assert_eq!(page.status(), 200, "the page is served without a daemon");

    signal(daemon_pid, Signal::TERM);
    let status = wait_for(Duration::from_secs(10), || daemon.try_wait().ok().flatten())
        .expect("studiod exits on SIGTERM");
    assert!(status.success());
    assert!(!home.path().join("run/verifier.sock").exists());
    signal(app.id(), Signal::TERM);
    let status = wait_for(Duration::from_secs(10), || app.try_wait().ok().flatten())
        .expect("studio-app exits on SIGTERM");
    assert!(status.success());
    drop(guard);
}

/// The crash a tester found: only the supervisor is killed, and `studio up` runs again at
/// once while the old studiod still drains a job that ignores SIGTERM. The new studiod
/// waits for the old one, and the old one's stop leaves the new one's sockets alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_up_after_a_killed_supervisor_waits_for_the_draining_daemon() {
    let env = [("STUDIO_COMMAND_ALLOWLIST", "sh")];
    let first = Studio::start_with(&env);
    let pidfile = first.home_path().join("job.pid");
    let job_pid = start_stubborn_job(&first, &pidfile).await;
    let mut jobs = KillOnDrop(vec![job_pid]);
    let old_daemon = first.child_pid("daemon");

    let (home, orphans) = first.kill_supervisor();
    let killed = Instant::now();
    let second = Studio::start_in(home, &env);
    let ready_after = killed.elapsed();
    let new_daemon = second.child_pid("daemon");
    eprintln!("second studio up ready {ready_after:?} after the kill");

    // One studiod per home: the old one was gone before the new one served.
    assert!(!alive(old_daemon), "the old studiod still runs");
    assert_eq!(
        studio_tests::daemons_of(second.home_path()),
        vec![new_daemon]
    );
    let log = second.log("daemon");
    assert!(
        log.contains("waiting for the previous studiod of this home to finish"),
        "the new studiod started while the old one drained: {log}"
    );
    assert!(!alive(job_pid), "the old studiod's drain killed its job");
    jobs.0.clear();

    // Its sockets are there and answer: the old one's stop did not take them.
    let run = second.home_path().join("run");
    let reply = studio_contract::control::request(
        &run.join("daemon.sock"),
        &studio_contract::control::DaemonRequest::Pair { role: None },
        Duration::from_secs(5),
    )
    .expect("run/daemon.sock answers");
    assert!(
        matches!(reply, studio_contract::control::DaemonReply::Pair(_)),
        "{reply:?}"
    );
    let refused = crate::verifier::hello_without_key(run.join("verifier.sock")).await;
    assert_eq!(
        refused,
        tonic::Code::PermissionDenied,
        "the verifier answers"
    );
    let out = second.cli(&["pair"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("#pair="),
        "studio pair: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let healthy = wait_for(Duration::from_secs(10), || {
        let resp = block(http().get(second.app_url("/health")).send()).ok()?;
        let health: AppHealth = block(Reply::of(resp)).json();
        (health.daemon == "ok").then_some(())
    });
    assert!(
        healthy.is_some(),
        "the new app reports the daemon available"
    );
    drop(orphans);
}

/// Starts a run whose shell ignores SIGTERM (so a stopping studiod spends its drain on it)
/// and returns the shell's pid once the run is dispatched.
async fn start_stubborn_job(studio: &Studio, pidfile: &std::path::Path) -> u32 {
    let script = format!("trap '' TERM; echo $$ > '{}'; sleep 30", pidfile.display());
    start_job(studio, "stubborn", &script, pidfile).await.1
}

/// Creates schedule `name` running `sh -c script`, triggers it, and returns the run's id
/// and the pid the script writes to `pidfile` once it runs.
async fn start_job(
    studio: &Studio,
    name: &str,
    script: &str,
    pidfile: &std::path::Path,
) -> (String, u32) {
    let spec = command_spec(name, every("1d"), "sh", &["-c", script]);
    let api = |path: &str| {
        http()
            .post(studio.daemon_url(path))
            .bearer_auth(studio.token())
            .header("content-type", "application/json")
    };
    let reply = Reply::of(
        api("/api/schedules")
            .json(&spec)
            .send()
            .await
            .expect("create"),
    )
    .await;
    let id = reply.expect::<Schedule>(201).id;
    let reply = Reply::of(
        api(&format!("/api/schedules/{id}/trigger"))
            .send()
            .await
            .expect("trigger"),
    )
    .await;
    let run: Run = reply.expect(202);
    let pid = wait_for(Duration::from_secs(20), || {
        std::fs::read_to_string(pidfile)
            .ok()?
            .trim()
            .parse()
            .ok()
            .filter(|pid| alive(*pid))
    })
    .expect("the job started");
    (run.core.id, pid)
}

/// A studiod on a home another studiod keeps waits (bounded), then exits 64 with one line
/// naming the home and the holder, and leaves the holder's sockets alone.
#[test]
fn a_second_daemon_on_a_busy_home_waits_then_exits_64_naming_the_holder() {
    let home = TempDir::new("busy");
    let daemon = |wait_ms: &str| {
        let mut cmd = Command::new(&bins().studiod);
        cmd.arg("--home")
            .arg(home.path())
            .args(["--addr", &format!("127.0.0.1:{}", free_port())])
            .env_remove("STUDIO_TOKEN")
            .env(WORKER_ADDR.0, WORKER_ADDR.1)
            .env("STUDIO_DAEMON_LOCK_WAIT_MS", wait_ms)
            .stdin(Stdio::null());
        cmd
    };
    let mut first = daemon("0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("first studiod");
    let guard = KillOnDrop(vec![first.id()]);
    let mut line = String::new();
    let mut out = std::io::BufReader::new(first.stdout.take().expect("stdout"));
    std::io::BufRead::read_line(&mut out, &mut line).expect("readiness line");
    assert!(
        studio_contract::ready::Ready::parse(&line).is_some(),
        "{line:?}"
    );

    let started = Instant::now();
    let second = daemon("700").output().expect("second studiod");
    let waited = started.elapsed();
    eprintln!("a second studiod gave up after {waited:?}");
    assert_eq!(second.status.code(), Some(64));
    assert!(
        waited >= Duration::from_millis(700) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("waiting for the previous studiod"),
        "{stderr}"
    );
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("studiod: "), "{stderr}");
    assert!(last.contains(&format!("pid {}", first.id())), "{last}");
    assert!(last.contains(&home.path().display().to_string()), "{last}");
    let run = home.path().join("run");
    assert!(run.join("daemon.sock").exists() && run.join("verifier.sock").exists());

    signal(first.id(), Signal::TERM);
    let status = wait_for(Duration::from_secs(10), || first.try_wait().ok().flatten())
        .expect("the first studiod stops");
    assert!(status.success());
    drop(guard);
}

#[test]
fn bad_configuration_exits_64_with_one_line() {
    let home = TempDir::new("badcfg");
    for (bin, args) in [
        (&bins().studiod, vec!["--addr", "not-an-address"]),
        (&bins().app, vec!["--addr", "0.0.0.0:0", "--app-key-stdin"]),
    ] {
        let out = Command::new(bin)
            .arg("--home")
            .arg(home.path())
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("run");
        let code = out.status.code();
        assert!(
            code == Some(64) || code == Some(2),
            "{bin:?} {args:?}: {code:?}"
        );
        assert!(!out.stderr.is_empty());
    }
}

struct KillOnDrop(Vec<u32>);

impl KillOnDrop {
    fn with(mut self, pid: u32) -> Self {
        self.0.push(pid);
        self
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for pid in &self.0 {
            if alive(*pid) {
                signal(*pid, Signal::KILL);
            }
        }
    }
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}
