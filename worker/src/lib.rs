//! `studio worker`: runs studiod's tasks on another process or machine
//! (docs/TASKS.md, "Workers").
//!
//! Owns: the worker's home (`home`), enrolment (`join`: a key pair made here, a CSR, a
//! certificate from studiod's authority over a connection that pins that authority),
//! its own allow-list, and the run loop (`run`): register, take leases from the
//! assignment stream, launch each job through the same launcher and per-job shim as
//! studiod (`studio_runner`), renew its leases by heartbeat, stream logs, and report
//! each attempt's start and end with the lease's fencing token.
//!
//! Invariants: nothing runs that this worker's own allow-list does not name, whatever
//! studiod asks; a job's environment is the worker's inheritable variables plus the
//! job's own, never a credential of this worker; a job whose lease is superseded, or
//! that outlives a lost studiod by more than one lease, is killed; a worker stopped or
//! restarted leaves its jobs to their shims, and the next worker on the same home adopts
//! them and reports how they ended.

mod config;
mod connect;
mod home;
mod join;
mod run;

use std::{io, path::Path};

pub use config::default_home;
pub use connect::{CONNECT, channel};
pub use join::{JoinOptions, Joined, join, kept};
pub use run::{RunOptions, check, run};

/// The arguments that make the `studio` executable a worker, used again to start it as
/// its job launcher (`studio worker --job-launcher`).
pub const LAUNCHER_LEADING: &str = "worker";

/// Why a worker command failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Bad input or state the user must fix (exit status 2).
    #[error("{0}")]
    Usage(String),
    #[error("{action}: {source}")]
    Io {
        action: String,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Tls(String),
    /// studiod refused or could not be reached.
    #[error("{0}")]
    Remote(String),
}

impl WorkerError {
    pub(crate) fn io(action: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            action: action.into(),
            source,
        }
    }

    /// Whether it is the user's input or state to fix (exit status 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::Usage(_))
    }
}

impl From<studio_pki::PkiError> for WorkerError {
    fn from(e: studio_pki::PkiError) -> Self {
        Self::Tls(e.to_string())
    }
}

/// The worker's allow-list.
pub fn allow_list(home: &Path) -> Result<Vec<String>, WorkerError> {
    home::WorkerHome::new(home).allow_list()
}

/// Adds `entries` (bare names found on the worker's `PATH`, or absolute paths) to the
/// worker's allow-list; the list after.
pub fn allow_add(home: &Path, entries: &[String]) -> Result<Vec<String>, WorkerError> {
    for entry in entries {
        if let Some(why) = studio_runner::program::allow_entry_problem(entry) {
            return Err(WorkerError::Usage(format!(
                "allow-list entry {entry:?} {why}"
            )));
        }
    }
    let home = home::WorkerHome::new(home);
    home.prepare()?;
    let mut list = home.allow_list()?;
    for entry in entries {
        if !list.contains(entry) {
            list.push(entry.clone());
        }
    }
    list.sort();
    home.set_allow_list(&list)?;
    Ok(list)
}

/// Removes `entries` from the worker's allow-list; the list after.
pub fn allow_remove(home: &Path, entries: &[String]) -> Result<Vec<String>, WorkerError> {
    let home = home::WorkerHome::new(home);
    let mut list = home.allow_list()?;
    if let Some(missing) = entries.iter().find(|e| !list.contains(e)) {
        return Err(WorkerError::Usage(format!(
            "{missing:?} is not on this worker's allow-list"
        )));
    }
    list.retain(|e| !entries.contains(e));
    home.set_allow_list(&list)?;
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allow_list_is_the_workers_own_and_checked() {
        let dir = std::env::temp_dir().join(format!("studio-worker-allow-{}", std::process::id()));
        assert_eq!(allow_list(&dir).expect("empty"), Vec::<String>::new());
        let list = allow_add(&dir, &["true".into(), "/bin/echo".into()]).expect("add");
        assert_eq!(list, ["/bin/echo", "true"]);
        assert!(
            allow_add(&dir, &["../x".into()])
                .expect_err("bad")
                .is_usage()
        );
        assert!(
            allow_remove(&dir, &["nope".into()])
                .expect_err("absent")
                .is_usage()
        );
        assert_eq!(
            allow_remove(&dir, &["true".into()]).expect("rm"),
            ["/bin/echo"]
        );
        assert_eq!(allow_list(&dir).expect("read"), ["/bin/echo"]);
        std::fs::remove_dir_all(dir).expect("clean");
    }

    /// `--unless-enrolled` keeps an enrolment with the same server whose certificate has
    /// more than 30 days left, and nothing else.
    #[test]
    fn an_enrolment_is_kept_only_with_its_server_and_time_left() {
        let dir = std::env::temp_dir().join(format!("studio-worker-kept-{}", std::process::id()));
        let ca = studio_pki::Authority::load_or_create(&dir.join("ca")).expect("CA");
        let home = home::WorkerHome::new(&dir.join("home"));
        home.prepare().expect("home");
        assert!(kept(home.root(), "studiod:8767").expect("read").is_none());
        let day = 24 * 60 * 60 * 1000;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as i64;
        let store = |days_left: i64| {
            let (key, csr) = studio_pki::key_and_csr("w").expect("key");
            let cert = ca
                .sign_worker_csr_between(&csr, "w1", now - day, now + days_left * day)
                .expect("signed");
            let identity = home::Identity {
                server: "studiod:8767".into(),
                worker_id: "w1".into(),
                name: "w".into(),
                labels: vec!["pool".into()],
            };
            home.store_join(&identity, &key, &cert.cert_pem, ca.cert_pem())
                .expect("stored");
        };
        store(300);
        let joined = kept(home.root(), "studiod:8767")
            .expect("read")
            .expect("kept");
        assert_eq!(
            (joined.worker_id.as_str(), joined.labels),
            ("w1", vec!["pool".to_owned()])
        );
        assert!(kept(home.root(), "elsewhere:8767").expect("read").is_none());
        store(10);
        assert!(kept(home.root(), "studiod:8767").expect("read").is_none());
        std::fs::remove_dir_all(dir).expect("clean");
    }
}
