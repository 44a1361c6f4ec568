//! Several studiod on one PostgreSQL database, each with a home of its own (docs/FLEETS.md):
//! started directly (no supervisor), each with the first member's keys and workers'
//! authority and one daemon token, and killed when dropped however the test or bench
//! ends. A member's [`App`] is a studio-app in its home, holding its app key and
//! verifying through it, as `studio up` would start one.

use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Child, ChildStdout, Command, Stdio},
    time::{Duration, Instant},
};

use studio_contract::{ready::Ready, secret::AppKey};

use crate::{TempDir, WORKER_ADDR, bins, free_port, signal};

/// The daemon token every member of a test cluster is given.
pub const TOKEN: &str = "cluster-test-daemon-token";

/// Readies `to` with what every member must share, as an operator does:
/// `studio cluster seed --from <a member's home>`.
fn seed(from: &Path, to: &Path) {
    let out = crate::studio_cmd(
        &["cluster", "seed", "--from", &from.to_string_lossy()],
        &[("STUDIO_HOME", &to.to_string_lossy())],
        None,
    )
    .output()
    .expect("studio cluster seed");
    assert!(
        out.status.success(),
        "studio cluster seed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Hands `key` to a child started with `--app-key-stdin` and waits for its readiness
/// line (the first on its stdout).
fn handed_key_then_ready(child: &mut Child, key: &str) -> String {
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{key}").expect("hand over the app key");
    drop(stdin);
    let out: ChildStdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .expect("readiness line");
    line
}

/// One studiod of the cluster: its home (kept across restarts), the app key it shares
/// with its [`App`] (the same across restarts, as `studio up` keeps it) and its process.
pub struct Member {
    home: TempDir,
    addr: String,
    key: String,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl Member {
    /// The first member: a new home (its keys and authority made at its start), its
    /// studiod started on database `url` with `env`.
    pub fn first(url: &str, env: &[(&str, &str)]) -> Self {
        Self::start(url, env, None)
    }

    /// Another member: a new home holding `first`'s keys and authority.
    pub fn joining(first: &Member, env: &[(&str, &str)]) -> Self {
        let url = first.url();
        Self::start(&url, env, Some(first.home.path()))
    }

    fn start(url: &str, env: &[(&str, &str)], like: Option<&Path>) -> Self {
        let home = TempDir::new("cluster");
        if let Some(like) = like {
            seed(like, home.path());
        }
        let mut all = vec![
            ("STUDIO_DATABASE_URL".to_owned(), url.to_owned()),
            ("STUDIO_TOKEN".to_owned(), TOKEN.to_owned()),
        ];
        all.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let mut member = Self {
            home,
            addr: format!("127.0.0.1:{}", free_port()),
            key: AppKey::generate().to_hex(),
            env: all,
            child: None,
        };
        member.restart();
        member
    }

    /// The database it keeps its state in.
    fn url(&self) -> String {
        self.env
            .iter()
            .find(|(k, _)| k == "STUDIO_DATABASE_URL")
            .map(|(_, v)| v.clone())
            .expect("a database")
    }

    /// A new home with keys of its own, whose studiod on this member's database must
    /// refuse to start: its exit code and what it said.
    pub fn stranger(&self, env: &[(&str, &str)]) -> (i32, String) {
        let home = TempDir::new("cluster-stranger");
        let said = home.path().join("said.log");
        let log = std::fs::File::create(&said).expect("log file");
        let mut child = Command::new(&bins().studiod)
            .arg("--home")
            .arg(home.path())
            .args(["--addr", &format!("127.0.0.1:{}", free_port())])
            .env(WORKER_ADDR.0, WORKER_ADDR.1)
            .env("STUDIO_DATABASE_URL", self.url())
            .env("STUDIO_TOKEN", TOKEN)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawn studiod");
        // One that starts after all is killed, not waited for forever.
        let deadline = Instant::now() + Duration::from_secs(30);
        let code = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break -1;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        (code, std::fs::read_to_string(&said).unwrap_or_default())
    }

    /// Starts studiod again in the same home and waits for its readiness line.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "running already");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.home.path().join("studiod.log"))
            .expect("log file");
        let mut child = Command::new(&bins().studiod)
            .arg("--home")
            .arg(self.home.path())
            .args(["--addr", &self.addr, "--app-key-stdin"])
            .env("RUST_LOG", "studio_daemon=info")
            .env(WORKER_ADDR.0, WORKER_ADDR.1)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn studiod");
        let line = handed_key_then_ready(&mut child, &self.key);
        self.child = Some(child);
        assert!(
            line.contains(&self.addr),
            "not ready: {line:?}\n{}",
            self.log()
        );
    }

    /// Its id (`run/member`).
    pub fn id(&self) -> String {
        std::fs::read_to_string(self.home.path().join("run/member"))
            .expect("run/member")
            .trim()
            .to_owned()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Its home, for `studio --home` commands.
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// `http://host:port` of its API.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("studiod.log")).unwrap_or_default()
    }

    /// `kill -9`, reaped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A clean stop (TERM), waited for.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), rustix::process::Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(30);
            while child.try_wait().expect("wait").is_none() {
                assert!(
                    Instant::now() < deadline,
                    "studiod did not stop:\n{}",
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A frozen one first wakes, to die.
            signal(child.id(), rustix::process::Signal::CONT);
        }
        self.kill();
    }
}

/// A member's studio-app: in the member's home (its verifier socket), proxying to the
/// member's API, on a loopback port of its own; killed when dropped.
pub struct App {
    addr: String,
    origin: String,
    log: std::path::PathBuf,
    child: Child,
}

impl App {
    /// Starts `member`'s app on loopback `port` and waits for its readiness line. Every
    /// member must allow the origins of every app a browser may pair through
    /// (`STUDIO_ALLOWED_ORIGINS`), as behind a load balancer they share the public one.
    pub fn of(member: &Member, port: u16) -> Self {
        let addr = format!("127.0.0.1:{port}");
        let log = member.home.path().join("studio-app.log");
        let file = std::fs::File::create(&log).expect("log file");
        let mut child = Command::new(&bins().app)
            .arg("--home")
            .arg(member.home.path())
            .args(["--addr", &addr, "--daemon-addr", &member.addr])
            .arg("--app-key-stdin")
            .env("RUST_LOG", "studio_app=info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(file)
            .spawn()
            .expect("spawn studio-app");
        let line = handed_key_then_ready(&mut child, &member.key);
        let origin = Ready::parse(&line).and_then(|r| r.origin);
        let mut app = Self {
            addr,
            origin: String::new(),
            log,
            child,
        };
        app.origin = origin.unwrap_or_else(|| panic!("not ready: {line:?}\n{}", app.log()));
        app
    }

    /// A studio-app on "another host": its own `home`, enrolled there with `studio app
    /// join`, reaching studiod only through the apps listeners `daemons`
    /// (`HOST:PORT,…`), on loopback `port`.
    pub fn remote(home: &Path, daemons: &str, port: u16) -> Self {
        let addr = format!("127.0.0.1:{port}");
        let log = home.join("studio-app.log");
        let file = std::fs::File::create(&log).expect("log file");
        let mut child = Command::new(&bins().app)
            .arg("--home")
            .arg(home)
            .args(["--addr", &addr, "--studiod", daemons])
            .env("RUST_LOG", "studio_app=info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(file)
            .spawn()
            .expect("spawn studio-app");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("readiness line");
        let origin = Ready::parse(&line).and_then(|r| r.origin);
        let mut app = Self {
            addr,
            origin: String::new(),
            log,
            child,
        };
        app.origin = origin.unwrap_or_else(|| panic!("not ready: {line:?}\n{}", app.log()));
        app
    }

    /// `http://host:port` plus `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The origin its browsers use.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The index of the member with id `id`.
pub fn index_of(members: &[Member], id: &str) -> usize {
    members
        .iter()
        .position(|m| m.id() == id)
        .unwrap_or_else(|| panic!("no member {id}"))
}
