//! The end-to-end harness: builds the real binaries once, starts `studio up` in a
//! temporary home on free ports, talks to it as a user (or an attacker) would, and kills
//! everything it started, by pid, even when a test fails.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::{Mutex, OnceLock},
    time::{Duration, Instant},
};

use serde_json::Value;

pub mod api;
pub mod bench;
pub mod browser;
pub mod cluster;
pub mod fill;
pub mod postgres;

pub use api::Reply;

/// The three binaries under test.
#[derive(Debug)]
pub struct Bins {
    pub studio: PathBuf,
    pub studiod: PathBuf,
    pub app: PathBuf,
}

/// Builds the binaries (once per process) with the same cargo and profile that built
/// the caller (a test in `target/<profile>/deps`, or a bench binary in
/// `target/<profile>`), and returns their paths.
pub fn bins() -> &'static Bins {
    static BINS: OnceLock<Bins> = OnceLock::new();
    BINS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("tests/ lives in the workspace")
            .to_path_buf();
        let exe = std::env::current_exe().expect("current exe");
        let mut dir = exe.parent().expect("exe has a folder").to_path_buf();
        let in_a_test = dir.ends_with("deps");
        if in_a_test {
            dir.pop();
        }
        let release = dir.ends_with("release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // In a test, the binaries as the test build itself resolves features (`--tests`,
        // as `scripts/test` builds them first): a no-op there, where a plain `--bins`
        // build would relink all three once per test run.
        let mut build = Command::new(cargo);
        build
            .current_dir(&root)
            .args(["build", "--quiet", "--workspace", "--bins"]);
        if in_a_test {
            build.arg("--tests");
        }
        // What cargo set for this test process only: build scripts that watch one of
        // these (ring's watches CARGO_MANIFEST_DIR) would rerun, and every crate above
        // them rebuild, twice per test run.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            let per_target = [
                "CARGO_PKG_",
                "CARGO_BIN_",
                "CARGO_MANIFEST_",
                "CARGO_CRATE_",
            ]
            .iter()
            .any(|p| name.starts_with(p))
                || matches!(&*name, "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR");
            if per_target {
                build.env_remove(&*name);
            }
        }
        if release {
            build.arg("--release");
        }
        let status = build.status().expect("cargo runs");
        assert!(status.success(), "building the binaries failed");
        Bins {
            studio: dir.join("studio"),
            studiod: dir.join("studiod"),
            app: dir.join("studio-app"),
        }
    })
}

/// Set on every studiod the tests start (a caller's own value comes after, and wins):
/// its worker listener on a port of its own, never the default 127.0.0.1:8767 that
/// parallel tests, and a real studiod, would contend for.
pub const WORKER_ADDR: (&str, &str) = ("STUDIO_WORKER_ADDR", "127.0.0.1:0");

/// A port that was free a moment ago, drawn at random below Linux's ephemeral range
/// (32768 and up): a port handed out for port 0 is the next one any process's outgoing
/// connection or `:0` listener may take, after which a process told to bind it fails
/// for as long as that holder lives.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    const LOW: u16 = 20_000;
    const SPAN: u64 = 12_000;
    let random = RandomState::new();
    for attempt in 0u64..1_000 {
        let port = LOW + (random.hash_one(attempt) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {LOW}..{}", u64::from(LOW) + SPAN)
}

/// A temporary directory removed on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
    /// False only for the placeholder left behind by [`Studio::stop_keep_home`].
    owned: bool,
}

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static SEQ: Mutex<u32> = Mutex::new(0);
        let n = {
            let mut seq = SEQ.lock().unwrap_or_else(|e| e.into_inner());
            *seq += 1;
            *seq
        };
        // Short paths: a Unix socket path must fit in 108 bytes.
        let dir = std::env::temp_dir().join(format!("st-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self {
            path: dir,
            owned: true,
        }
    }

    /// Names no directory and removes nothing.
    fn placeholder() -> Self {
        Self {
            path: PathBuf::new(),
            owned: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.owned {
            end_jobs(&self.path);
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Ends every shim and job group recorded under `home/runs/` that is still that very
/// process (pid, start time and boot match): jobs outlive a killed daemon under their
/// shims, so a test's home must not leave them behind.
pub fn end_jobs(home: &Path) {
    use studio_runner::{
        ProcessIdentity,
        evidence::{JOB_FILE, SHIM_FILE},
    };
    let Ok(boot) = studio_runner::identity::boot_id() else {
        return;
    };
    let Ok(runs) = std::fs::read_dir(home.join("runs")) else {
        return;
    };
    let recorded = |path: PathBuf| -> Option<ProcessIdentity> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    };
    for dir in runs.flatten().map(|e| e.path()) {
        if let Some(shim) = recorded(dir.join(SHIM_FILE))
            && shim.is_running(&boot)
        {
            signal(shim.pid, rustix::process::Signal::KILL);
        }
        if let Some(job) = recorded(dir.join(JOB_FILE)) {
            job.kill_group(&boot);
        }
    }
}

/// A `studio worker` home joined to the worker listener at `server` with `token`, as
/// `name`, its own allow-list naming `allow`: `studio worker join` and `allow add`, run
/// as a user would, with `--home` naming the worker's home (a `STUDIO_HOME` in the
/// environment names the Studio home, never a worker's).
pub fn join_worker(server: &str, token: &str, name: &str, allow: &[&str]) -> TempDir {
    let home = TempDir::new(&format!("w{name}"));
    let dir = home.path().display().to_string();
    let studio = |args: &[&str]| {
        let out = Command::new(&bins().studio)
            .args(args)
            .args(["--home", &dir])
            .env("STUDIO_HOME", home.path().join("not-the-worker-home"))
            .env_remove("STUDIO_WORKER_HOME")
            .stdin(Stdio::null())
            .output()
            .expect("run studio worker");
        assert!(out.status.success(), "studio {args:?}: {out:?}");
    };
    studio(&[
        "worker", "join", "--server", server, "--token", token, "--name", name,
    ]);
    if !allow.is_empty() {
        let mut args = vec!["worker", "allow", "add"];
        args.extend_from_slice(allow);
        studio(&args);
    }
    assert!(
        !home.path().join("not-the-worker-home").exists(),
        "STUDIO_HOME named the worker's home"
    );
    home
}

/// Polls `check` until it returns `Some` or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a process exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Sends a signal to one process.
pub fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// A running `studio up` in its own home, on its own ports.
pub struct Studio {
    pub home: TempDir,
    pub app_addr: SocketAddr,
    pub daemon_addr: SocketAddr,
    /// The link `studio up` printed.
    pub pair_url: String,
    supervisor: Child,
    /// Drains the supervisor's stdout after the ready line, so it never blocks on a pipe.
    _stdout: std::thread::JoinHandle<String>,
    /// Every child pid seen, killed on drop if it still runs this home.
    seen: Mutex<Vec<u32>>,
}

impl Studio {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts `studio up` with extra environment, and waits for its ready line.
    pub fn start_with(env: &[(&str, &str)]) -> Self {
        Self::start_in(TempDir::new("home"), env)
    }

    /// Starts `studio up` on an existing home (one a stopped instance handed back with
    /// [`Studio::stop_keep_home`]), on fresh ports, and waits for its ready line.
    pub fn start_in(home: TempDir, env: &[(&str, &str)]) -> Self {
        Self::start_exe(&bins().studio, home, env)
    }

    /// Starts `exe up` (a `studio` executable anywhere, e.g. copied alone into an empty
    /// directory) without `STUDIO_DAEMON_BIN` or `STUDIO_APP_BIN`, and waits for its ready
    /// line.
    pub fn start_exe(exe: &Path, home: TempDir, env: &[(&str, &str)]) -> Self {
        Self::start_command(Command::new(exe), home, env)
    }

    /// Starts `studio up` with its open-file limit (soft and hard) set to `open_files`, as
    /// a desktop session would give it: every process it starts inherits the limit.
    pub fn start_with_open_files(open_files: u64) -> Self {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -n {open_files} && exec \"$0\" \"$@\""))
            .arg(&bins().studio);
        Self::start_command(cmd, TempDir::new("studio"), &[])
    }

    fn start_command(mut cmd: Command, home: TempDir, env: &[(&str, &str)]) -> Self {
        let app_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let daemon_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(home.path().join("supervisor.stderr"))
            .expect("supervisor stderr file");
        cmd.arg("up")
            .arg("--home")
            .arg(home.path())
            .arg("--app-addr")
            .arg(app_addr.to_string())
            .arg("--daemon-addr")
            .arg(daemon_addr.to_string())
            .env_remove("STUDIO_TOKEN")
            .env_remove("STUDIO_HOME")
            .env_remove("STUDIO_DAEMON_BIN")
            .env_remove("STUDIO_APP_BIN")
            .env("STUDIO_STOP_GRACE_MS", "3000")
            .env(WORKER_ADDR.0, WORKER_ADDR.1)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        // The second run of the suites keeps studiod's state in PostgreSQL.
        if let Some(url) = postgres::database_for(home.path()) {
            cmd.env("STUDIO_DATABASE_URL", url);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut supervisor = cmd.spawn().expect("spawn studio up");
        let stdout = supervisor.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout_rest = std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut rest = String::new();
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                if let Some(url) = line.trim().strip_prefix("Studio is ready: ") {
                    let _ = tx.send(url.to_owned());
                } else {
                    rest.push_str(&line);
                }
                line.clear();
            }
            rest
        });
        let pair_url = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(url) => url,
            Err(_) => {
                let _ = supervisor.kill();
                let log = std::fs::read_to_string(home.path().join("supervisor.stderr"))
                    .unwrap_or_default();
                panic!("studio up did not become ready within 60 s; stderr:\n{log}");
            }
        };
        let studio = Self {
            home,
            app_addr,
            daemon_addr,
            pair_url,
            supervisor,
            _stdout: stdout_rest,
            seen: Mutex::new(Vec::new()),
        };
        studio.remember_children();
        studio
    }

    pub fn home_path(&self) -> &Path {
        self.home.path()
    }

    pub fn supervisor_pid(&self) -> u32 {
        self.supervisor.id()
    }

    /// Runs `studio <args> --home <home>` to completion.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(&bins().studio)
            .args(args)
            .arg("--home")
            .arg(self.home.path())
            .stdin(Stdio::null())
            .output()
            .expect("run studio")
    }

    /// Runs `studio <args> --home <home>` with extra environment (and none of the
    /// caller's STUDIO_TOKEN or STUDIO_DAEMON_URL unless `env` sets them), in `dir`.
    pub fn cli_env(&self, args: &[&str], env: &[(&str, &str)], dir: Option<&Path>) -> Output {
        let mut full: Vec<&str> = args.to_vec();
        let home = self.home.path().to_string_lossy().into_owned();
        full.extend(["--home", home.as_str()]);
        studio_cmd(&full, env, dir)
            .stdin(Stdio::null())
            .output()
            .expect("run studio")
    }

    /// `studio status --json`. JSON: the supervisor's control-socket status, no studiod
    /// API body, and its type lives in the `studio` binary's crate.
    pub fn status(&self) -> Value {
        let out = self.cli(&["status", "--json"]);
        assert!(
            out.status.success(),
            "studio status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("status is JSON")
    }

    /// A child's status object (`daemon` or `app`).
    pub fn child(&self, name: &str) -> Value {
        let status = self.status();
        let child = status["status"]["children"][name].clone();
        let child = if child.is_null() {
            status["children"][name].clone()
        } else {
            child
        };
        if let Some(pid) = child["pid"].as_u64() {
            self.remember(pid as u32);
        }
        child
    }

    pub fn child_pid(&self, name: &str) -> u32 {
        self.child(name)["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} has no pid")) as u32
    }

    /// Waits until `name` is `running` with a pid other than `not`.
    pub fn wait_running(&self, name: &str, not: Option<u32>, timeout: Duration) -> u32 {
        wait_for(timeout, || {
            let c = self.child(name);
            let pid = c["pid"].as_u64()? as u32;
            (c["state"] == "running" && Some(pid) != not).then_some(pid)
        })
        .unwrap_or_else(|| panic!("{name} did not come back running: {}", self.child(name)))
    }

    /// A fresh pairing code from `studio pair`.
    pub fn pair_code(&self) -> String {
        let out = self.cli(&["pair"]);
        let text = String::from_utf8_lossy(&out.stdout);
        code_from_link(&text).unwrap_or_else(|| panic!("no pairing link in {text:?}"))
    }

    /// The code in the link `studio up` printed.
    pub fn first_code(&self) -> String {
        code_from_link(&self.pair_url).expect("the ready line carries a code")
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.home.path().join("run/token"))
            .expect("run/token")
            .trim()
            .to_owned()
    }

    pub fn app_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.app_addr)
    }

    pub fn daemon_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.daemon_addr)
    }

    /// The app's origin, as a browser on the pairing link would send it.
    pub fn app_origin(&self) -> String {
        format!("http://{}", self.app_addr)
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.home.path().join(format!("logs/{name}.log")))
            .unwrap_or_default()
    }

    pub fn remember(&self, pid: u32) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.contains(&pid) {
            seen.push(pid);
        }
    }

    fn remember_children(&self) {
        for name in ["daemon", "app"] {
            let _ = self.child(name);
        }
    }

    /// Sends SIGTERM to the supervisor and waits for it; returns whether it exited 0.
    pub fn terminate(&mut self, timeout: Duration) -> Option<bool> {
        signal(self.supervisor.id(), rustix::process::Signal::TERM);
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.supervisor.try_wait() {
                return Some(status.success());
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops this instance (SIGTERM to the supervisor, then whatever of it is left is
    /// killed) and hands back its home, kept on disk, for [`Studio::start_in`].
    pub fn stop_keep_home(mut self, timeout: Duration) -> TempDir {
        let stopped = self.terminate(timeout);
        if stopped.is_none() {
            let _ = self.supervisor.kill();
            let _ = self.supervisor.wait();
        }
        self.kill_leftovers();
        std::mem::replace(&mut self.home, TempDir::placeholder())
    }

    /// SIGKILLs the supervisor alone, as a crash would: its children get SIGTERM through
    /// their parent-death signal and stop on their own, in their own time. Hands back the
    /// home (for [`Studio::start_in`]) and the children, which are killed on drop if they
    /// still run.
    pub fn kill_supervisor(mut self) -> (TempDir, Orphans) {
        signal(self.supervisor.id(), rustix::process::Signal::KILL);
        let _ = self.supervisor.wait();
        let orphans = Orphans {
            home: self.home.path().to_path_buf(),
            pids: self.seen_pids(),
        };
        let home = std::mem::replace(&mut self.home, TempDir::placeholder());
        (home, orphans)
    }

    fn kill_leftovers(&self) {
        for pid in self.seen_pids() {
            if self.owns(pid) {
                signal(pid, rustix::process::Signal::CONT);
                signal(pid, rustix::process::Signal::KILL);
            }
        }
    }

    /// Waits for the supervisor to exit on its own (after `studio stop`).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<bool> {
        wait_for(timeout, || {
            self.supervisor
                .try_wait()
                .ok()
                .flatten()
                .map(|s| s.success())
        })
    }

    /// Every child pid this instance was seen with.
    pub fn seen_pids(&self) -> Vec<u32> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether `pid` is a process started for this home (guards against pid reuse).
    pub fn owns(&self, pid: u32) -> bool {
        let home = self.home.path().to_string_lossy().into_owned();
        // A handed-back home leaves an empty path, which every command line "contains".
        !home.is_empty()
            && std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&home))
                .unwrap_or(false)
            && alive(pid)
    }
}

impl Drop for Studio {
    fn drop(&mut self) {
        if matches!(self.supervisor.try_wait(), Ok(None)) {
            signal(self.supervisor.id(), rustix::process::Signal::TERM);
            let stopped = wait_for(Duration::from_secs(10), || {
                self.supervisor.try_wait().ok().flatten()
            });
            if stopped.is_none() {
                let _ = self.supervisor.kill();
                let _ = self.supervisor.wait();
            }
        }
        self.kill_leftovers();
    }
}

/// Processes a killed supervisor left behind; each is killed on drop while it still runs
/// the home (its command line names it), so a failing test leaves none.
pub struct Orphans {
    home: PathBuf,
    pids: Vec<u32>,
}

impl Orphans {
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }
}

impl Drop for Orphans {
    fn drop(&mut self) {
        let home = self.home.to_string_lossy().into_owned();
        for &pid in &self.pids {
            let runs_home = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&home))
                .unwrap_or(false);
            if runs_home && alive(pid) {
                signal(pid, rustix::process::Signal::CONT);
                signal(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// The live studiod processes of `home`: `studiod --home <home>` or
/// `studio daemon --home <home>`, by their command lines in /proc.
pub fn daemons_of(home: &Path) -> Vec<u32> {
    let home = home.to_string_lossy();
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| {
            let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<String> = raw
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let daemon = args.first().is_some_and(|a| a.ends_with("studiod"))
                || args.get(1).is_some_and(|a| a == "daemon");
            daemon && args.iter().any(|a| *a == *home) && alive(*pid)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// A `studio <args>` command with extra environment, run in `dir`; the caller's
/// STUDIO_TOKEN, STUDIO_DAEMON_URL and STUDIO_HOME are removed first.
pub fn studio_cmd(args: &[&str], env: &[(&str, &str)], dir: Option<&Path>) -> Command {
    let mut cmd = Command::new(&bins().studio);
    cmd.args(args)
        .env_remove("STUDIO_TOKEN")
        .env_remove("STUDIO_DAEMON_URL")
        .env_remove("STUDIO_HOME");
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    cmd
}

/// The code in `…/#pair=<code>`.
pub fn code_from_link(text: &str) -> Option<String> {
    let start = text.find("#pair=")? + "#pair=".len();
    let code: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    (!code.is_empty()).then_some(code)
}

/// A raw HTTP/1.1 exchange, for requests a client library would refuse to send (odd
/// Host headers). `head` is the request line and headers without the final blank line.
pub fn raw_http(addr: SocketAddr, head: &str, body: &str) -> (u16, String) {
    raw_request(
        addr,
        &format!(
            "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// Sends `request` byte for byte (head, blank line and body, framed by the caller) and
/// reads the answer to the end: its status and body.
pub fn raw_request(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(request.as_bytes()).expect("write");
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A plain HTTP client (no proxy, no cookie jar: tests carry cookies by hand).
pub fn http() -> reqwest::Client {
    // reqwest may be built with TLS for studiod's notifications: it needs a provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(15))
        .build()
        .expect("http client")
}

/// The `studio_admission` cookie pair (`name=value`) from a response.
pub fn admission_cookie(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("studio_admission="))
        .and_then(|v| v.split(';').next())
        .map(str::to_owned)
}
