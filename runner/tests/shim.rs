//! The launcher and its shims against real processes. A test process has threads and
//! must not fork, so the launcher runs as its own process (`examples/launcher.rs`),
//! requests piped in, reports read back; every process a test starts is killed on the
//! way out, matched by its identity so that a reused pid is never signalled.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use studio_runner::{
    Ending, LaunchReport, LaunchRequest, LaunchSpec, Outcome, ProcessIdentity,
    env::job_env,
    evidence::{self, Evidence, JOB_FILE, OUTCOME_FILE, SHIM_FILE},
    identity::boot_id,
};

const PATIENCE: Duration = Duration::from_secs(15);

/// The launcher's executable, built beside this test by `cargo test` and `cargo nextest`.
fn launcher_exe() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/shim-<hash> → target/<profile>/examples/launcher
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("target folder")
        .join("examples/launcher");
    assert!(
        path.exists(),
        "{} is missing: build the examples",
        path.display()
    );
    path
}

/// A running launcher; killed and reaped on drop.
struct Launcher {
    child: Child,
    stdin: Option<ChildStdin>,
    reports: mpsc::Receiver<String>,
}

impl Launcher {
    fn start() -> Self {
        let mut child = Command::new(launcher_exe())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("launcher");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, reports) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            reports,
        }
    }

    fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("launcher stdin");
        writeln!(stdin, "{line}").expect("request written");
        stdin.flush().expect("flushed");
    }

    fn launch(&mut self, req: &LaunchRequest) -> LaunchReport {
        self.send_line(&serde_json::to_string(req).expect("json"));
        self.report()
    }

    fn report(&self) -> LaunchReport {
        let line = self.reports.recv_timeout(PATIENCE).expect("a report line");
        assert!(line.len() < 4096, "one atomic line: {} bytes", line.len());
        serde_json::from_str(&line).expect("a launch report")
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Processes to end on the way out (the job's whole group), and the run's folder.
struct Cleanup {
    dir: PathBuf,
    shims: Vec<ProcessIdentity>,
    groups: Vec<ProcessIdentity>,
}

impl Cleanup {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("studio-shim-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Self {
            dir,
            shims: Vec::new(),
            groups: Vec::new(),
        }
    }

    fn watch(&mut self, report: &LaunchReport) {
        self.shims.extend(report.shim.clone());
        if let Ok(job) = &report.result {
            self.groups.push(job.clone());
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let boot = boot_id().unwrap_or_default();
        for shim in self.shims.iter().filter(|p| p.is_running(&boot)) {
            if let Some(pid) = pid(shim.pid) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
        for job in self.groups.iter().filter(|p| p.is_running(&boot)) {
            if let Some(pid) = pid(job.pid) {
                let _ = kill_process_group(pid, Signal::KILL);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A process standing in for the daemon; killed and reaped on drop.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn pid(raw: u32) -> Option<Pid> {
    i32::try_from(raw).ok().and_then(Pid::from_raw)
}

fn request(c: &Cleanup, program: &str, args: &[&str]) -> LaunchRequest {
    LaunchRequest {
        run_id: format!("run-{}", c.dir.display()),
        boot_id: boot_id().expect("boot id"),
        spec: LaunchSpec {
            program: program.into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            cwd: Some(std::env::temp_dir()),
            env: job_env(std::env::vars(), &BTreeMap::new(), &[]),
            run_dir: c.dir.clone(),
            log_cap: 1 << 20,
            deadline_ms: None,
            grace_ms: 300,
            redact: Vec::new(),
        },
        daemon_pid: None,
        inherited_lock_fd: None,
    }
}

fn sh(c: &Cleanup, script: &str) -> LaunchRequest {
    request(c, "/bin/sh", &["-c", script])
}

/// Alive and not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X")
    })
}

fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < until, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for the shim's outcome, checks the folder reads as ended, and that the shim is
/// gone entirely (reaped, not a zombie).
fn outcome(c: &Cleanup, report: &LaunchReport) -> Outcome {
    let path = c.dir.join(OUTCOME_FILE);
    eventually("outcome.json", || path.exists());
    let shim = report.shim.as_ref().expect("a shim");
    // Neither running nor a zombie (a later process under the same pid is neither).
    eventually("the shim reaped", || {
        !shim.is_running(&shim.boot_id) && !is_zombie(shim.pid)
    });
    match evidence::classify(&c.dir, &shim.boot_id).expect("evidence") {
        Evidence::Ended(outcome) => *outcome,
        other => panic!("the run reads as {other:?}, not ended"),
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|st| st == "Z")
    })
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> T {
    serde_json::from_slice(&std::fs::read(path).expect("evidence file")).expect("json")
}

/// What the descriptors `only` (all if empty) of process `pid` name.
fn fd_targets(pid: u32, only: &[u32]) -> Vec<String> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("descriptors");
    dir.filter_map(|e| {
        let e = e.ok()?;
        let fd: u32 = e.file_name().to_str()?.parse().ok()?;
        if !only.is_empty() && !only.contains(&fd) {
            return None;
        }
        Some(std::fs::read_link(e.path()).ok()?.display().to_string())
    })
    .collect()
}

fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn a_job_runs_under_its_shim_and_leaves_its_evidence() {
    let mut c = Cleanup::new("runs");
    let mut launcher = Launcher::start();
    let req = sh(&c, "echo hello; sleep 0.5; exit 3");
    let report = launcher.launch(&req);
    c.watch(&report);
    assert_eq!(report.run_id, req.run_id);
    let shim = report.shim.clone().expect("a shim");
    let job = report.result.clone().expect("the job started");
    assert_ne!(shim.pid, job.pid);
    assert_eq!(shim.boot_id, req.boot_id);
    // The shim's footprint while it supervises: a forked launcher plus a runtime.
    let rss = vm_rss_kib(shim.pid).expect("the shim's VmRSS");
    eprintln!("shim VmRSS: {rss} KiB");
    assert!(rss < 64 * 1024, "a shim should stay small, has {rss} KiB");
    // The shim holds neither of the launcher's pipes: the daemon sees their ends when
    // the launcher goes, however many jobs still run.
    // (The report pipe is closed just after the line is written: wait for that.)
    let launcher_pipes = fd_targets(launcher.child.id(), &[0, 1]);
    assert_eq!(launcher_pipes.len(), 2);
    eventually("the shim to let go of the launcher's pipes", || {
        let shim_fds = fd_targets(shim.pid, &[]);
        launcher_pipes.iter().all(|p| !shim_fds.contains(p))
    });
    assert!(
        fd_targets(shim.pid, &[0, 1, 2])
            .iter()
            .all(|t| t == "/dev/null")
    );
    assert_eq!(read_json::<ProcessIdentity>(&c.dir.join(SHIM_FILE)), shim);
    assert_eq!(read_json::<ProcessIdentity>(&c.dir.join(JOB_FILE)), job);
    let outcome = outcome(&c, &report);
    assert_eq!(outcome.ending, Ending::Exited);
    assert_eq!((outcome.exit_code, outcome.signal), (Some(3), None));
    assert_eq!(
        std::fs::read_to_string(c.dir.join("stdout.log")).expect("stdout.log"),
        "hello\n"
    );
    assert!(!alive(job.pid));
    // Reaped by the kernel while its launcher still runs: never the launcher's zombie.
    assert!(launcher.alive());
    assert!(!is_zombie(shim.pid), "the shim lingers as a zombie");
}

#[test]
fn a_job_outlives_its_launcher() {
    let mut c = Cleanup::new("orphan");
    let mut launcher = Launcher::start();
    let report = launcher.launch(&sh(&c, "sleep 1; echo done"));
    c.watch(&report);
    let job = report.result.clone().expect("the job started");
    launcher.kill();
    assert!(alive(job.pid), "the job died with its launcher");
    let outcome = outcome(&c, &report);
    assert_eq!(outcome.ending, Ending::Exited);
    assert_eq!(outcome.exit_code, Some(0));
    assert_eq!(outcome.stdout.tail, "done\n");
}

#[test]
fn sigterm_to_the_shim_cancels_the_whole_job() {
    let mut c = Cleanup::new("term");
    let mut launcher = Launcher::start();
    let gc = c.dir.join("gc.pid");
    let script = format!("sleep 30 & echo $! > {}; wait", gc.display());
    let report = launcher.launch(&sh(&c, &script));
    c.watch(&report);
    let shim = report.shim.clone().expect("a shim");
    let job = report.result.clone().expect("the job started");
    eventually("the grandchild's pid", || {
        std::fs::read_to_string(&gc).is_ok_and(|s| s.ends_with('\n'))
    });
    let grandchild: u32 = std::fs::read_to_string(&gc)
        .expect("gc.pid")
        .trim()
        .parse()
        .expect("pid");
    kill_process(pid(shim.pid).expect("pid"), Signal::TERM).expect("SIGTERM to the shim");
    let outcome = outcome(&c, &report);
    assert_eq!(outcome.ending, Ending::Cancelled);
    assert_eq!(
        outcome.cancelled_by, None,
        "the daemon that asked knows why"
    );
    assert!(!alive(job.pid) && !alive(grandchild), "the group is gone");
}

#[test]
fn a_deadline_ends_the_job() {
    let mut c = Cleanup::new("deadline");
    let mut launcher = Launcher::start();
    let mut req = request(&c, "/bin/sleep", &["30"]);
    req.spec.deadline_ms = Some(300);
    let report = launcher.launch(&req);
    c.watch(&report);
    let outcome = outcome(&c, &report);
    assert_eq!(outcome.ending, Ending::Deadline);
    assert_eq!(outcome.signal, Some(Signal::TERM.as_raw()));
}

#[test]
fn a_job_that_cannot_start_is_reported_and_ended() {
    let mut c = Cleanup::new("nostart");
    let mut launcher = Launcher::start();
    // A line that is no request is answered too, so the reader never waits on it.
    launcher.send_line(r#"{"run_id": "garbled", "spec": 3}"#);
    let refused = launcher.report();
    assert_eq!(refused.run_id, "garbled");
    assert!(refused.shim.is_none());
    assert!(
        refused
            .result
            .expect_err("refused")
            .contains("not a launch request")
    );
    let report = launcher.launch(&request(&c, "/nonexistent/studio-test-program", &[]));
    c.watch(&report);
    assert!(report.shim.is_some(), "the shim recorded itself");
    let message = report.result.clone().expect_err("nothing started");
    assert!(message.contains("cannot start"), "{message}");
    let outcome = outcome(&c, &report);
    assert_eq!(outcome.ending, Ending::Exited);
    assert_eq!((outcome.exit_code, outcome.signal), (None, None));
    assert_eq!(outcome.report_error.as_deref(), Some(message.as_str()));
    assert!(!c.dir.join(JOB_FILE).exists());
}

#[test]
fn a_job_that_must_not_outlive_its_daemon_is_cancelled_when_it_goes() {
    let mut c = Cleanup::new("daemonloss");
    let mut daemon = Daemon(
        Command::new("/bin/sleep")
            .arg("60")
            .spawn()
            .expect("stand-in daemon"),
    );
    let mut launcher = Launcher::start();
    let mut req = request(&c, "/bin/sleep", &["30"]);
    req.daemon_pid = Some(daemon.0.id());
    let report = launcher.launch(&req);
    c.watch(&report);
    let job = report.result.clone().expect("the job started");
    std::thread::sleep(Duration::from_millis(200));
    assert!(alive(job.pid), "the job runs while its daemon does");
    let _ = daemon.0.kill();
    let _ = daemon.0.wait();
    let outcome = outcome(&c, &report);
    assert_eq!(outcome.ending, Ending::Cancelled);
    assert_eq!(
        outcome.cancelled_by.as_deref(),
        Some(studio_runner::shim::DAEMON_LOST),
        "the outcome says why, since no daemon is left to"
    );
    assert!(!alive(job.pid));
}

/// The daemon's client replaces a launcher that died: the next launch starts a new one,
/// and a shim of the dead one runs its job to the end regardless.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_replaces_a_launcher_that_died() {
    let mut first = Cleanup::new("restart-1");
    let mut second = Cleanup::new("restart-2");
    let command = studio_runner::client::LauncherCommand {
        program: launcher_exe(),
        leading: Vec::new(),
        open_files: None,
    };
    let client = studio_runner::client::Launcher::start(&command, None).expect("launcher");
    let report = client
        .launch(&sh(&first, "sleep 0.5; echo first"))
        .await
        .expect("a report");
    first.watch(&report);
    let old = client.pid().await.expect("launcher pid");
    kill_process(pid(old).expect("pid"), Signal::KILL).expect("SIGKILL to the launcher");
    let report2 = client
        .launch(&sh(&second, "echo second"))
        .await
        .expect("a report from a new launcher");
    second.watch(&report2);
    assert!(report2.result.is_ok(), "{report2:?}");
    let new = client.pid().await.expect("launcher pid");
    assert_ne!(new, old, "another launcher");
    for (c, r, text) in [(&first, &report, "first"), (&second, &report2, "second")] {
        let outcome = outcome(c, r);
        assert!(outcome.succeeded(), "{outcome:?}");
        assert_eq!(outcome.stdout.tail, format!("{text}\n"));
    }
}

/// A daemon that raised its own open-file limit for its listeners hands its jobs the one
/// it started with: the launcher sets the soft limit back before anything is exec'd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_get_the_open_file_limit_the_daemon_started_with() {
    let mut c = Cleanup::new("nofile");
    let ours = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1024);
    let wanted = ours.min(1024) - 1;
    let command = studio_runner::client::LauncherCommand {
        program: launcher_exe(),
        leading: Vec::new(),
        open_files: Some(wanted),
    };
    let client = studio_runner::client::Launcher::start(&command, None).expect("launcher");
    let report = client.launch(&sh(&c, "ulimit -n")).await.expect("a report");
    c.watch(&report);
    let outcome = outcome(&c, &report);
    assert!(outcome.succeeded(), "{outcome:?}");
    assert_eq!(outcome.stdout.tail, format!("{wanted}\n"));
}
