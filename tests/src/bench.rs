//! A studiod of the benchmarks' own: started on a home with the `true` command allowed,
//! read from its readiness line and its token file, stopped by SIGTERM or killed when
//! dropped.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
};

use studio_contract::ready::Ready;

use crate::{WORKER_ADDR, bins, free_port};

pub struct Daemon {
    child: Child,
    pub addr: String,
    pub token: String,
}

impl Daemon {
    /// studiod on `home`, on a free port, once it said it is ready.
    pub fn start(home: &Path) -> Self {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut cmd = Command::new(&bins().studiod);
        // With STUDIO_TEST_DATABASE_URL, the state is in a new PostgreSQL database.
        if let Some(url) = crate::postgres::database_for(home) {
            cmd.env("STUDIO_DATABASE_URL", url);
        }
        let mut child = cmd
            .arg("--home")
            .arg(home)
            .args(["--addr", &addr])
            .env_remove("STUDIO_TOKEN")
            .env(WORKER_ADDR.0, WORKER_ADDR.1)
            .env("RUST_LOG", "warn")
            .env("STUDIO_COMMAND_ALLOWLIST", "true")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn studiod");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("readiness");
        Ready::parse(&line).unwrap_or_else(|| panic!("no readiness line: {line:?}"));
        let token = std::fs::read_to_string(home.join("run/token"))
            .expect("token")
            .trim()
            .to_owned();
        Self { child, addr, token }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// SIGTERM, then waits for it to end.
    pub fn stop(mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
