//! A worker's home (`--home`, `STUDIO_WORKER_HOME`, default `~/.studio-worker`): its
//! key and certificate (0600), the authority it trusts, who it is and where studiod is
//! (`worker.json`), its own allow-list (`allow.json`), its lock, and one folder per
//! attempt (`runs/<run id>/`: the lease, the shim's evidence and the logs).

use std::{
    fs::{self, File, OpenOptions},
    io::{self, Write},
    os::unix::fs::{DirBuilderExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::WorkerError;

/// Who this worker is, as its join made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Identity {
    /// studiod's worker listener, `HOST:PORT`.
    pub server: String,
    pub worker_id: String,
    pub name: String,
    /// The labels its join token granted.
    pub labels: Vec<String>,
}

/// The lease an attempt runs under, kept beside its evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LeaseFile {
    pub run_id: String,
    pub task_id: String,
    pub fence: i64,
}

#[derive(Debug, Clone)]
pub(crate) struct WorkerHome {
    root: PathBuf,
}

impl WorkerHome {
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    /// Creates the home (0700) and its `runs/`.
    pub(crate) fn prepare(&self) -> Result<(), WorkerError> {
        for dir in [self.root.clone(), self.runs_dir()] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| WorkerError::io(format!("cannot create {}", dir.display()), e))?;
        }
        Ok(())
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn key_file(&self) -> PathBuf {
        self.root.join("worker.key")
    }

    pub(crate) fn cert_file(&self) -> PathBuf {
        self.root.join("worker.crt")
    }

    pub(crate) fn ca_file(&self) -> PathBuf {
        self.root.join("ca.crt")
    }

    fn identity_file(&self) -> PathBuf {
        self.root.join("worker.json")
    }

    fn allow_file(&self) -> PathBuf {
        self.root.join("allow.json")
    }

    pub(crate) fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }

    pub(crate) fn run_dir(&self, run_id: &str) -> PathBuf {
        self.runs_dir().join(run_id)
    }

    /// Whether this home holds a join (its identity, written after the rest).
    pub(crate) fn joined(&self) -> bool {
        self.identity_file().exists()
    }

    /// Who this worker is; a usage error when it never joined.
    pub(crate) fn identity(&self) -> Result<Identity, WorkerError> {
        let path = self.identity_file();
        let text = match fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(WorkerError::Usage(format!(
                    "{} holds no worker: run `studio worker join --server HOST:PORT --token T` first",
                    self.root.display()
                )));
            }
            Err(e) => {
                return Err(WorkerError::io(
                    format!("cannot read {}", path.display()),
                    e,
                ));
            }
        };
        serde_json::from_slice(&text)
            .map_err(|e| WorkerError::Usage(format!("{} is not readable: {e}", path.display())))
    }

    /// Writes the identity, key and certificates of a join, each whole and private.
    pub(crate) fn store_join(
        &self,
        identity: &Identity,
        key_pem: &str,
        cert_pem: &str,
        ca_pem: &str,
    ) -> Result<(), WorkerError> {
        let json = serde_json::to_vec_pretty(identity)
            .map_err(|e| WorkerError::io("cannot encode worker.json", io::Error::other(e)))?;
        write_private(&self.key_file(), key_pem.as_bytes())?;
        write_private(&self.cert_file(), cert_pem.as_bytes())?;
        write_private(&self.ca_file(), ca_pem.as_bytes())?;
        write_private(&self.identity_file(), &json)
    }

    /// Reads a private file of the home.
    pub(crate) fn read(&self, path: &Path) -> Result<String, WorkerError> {
        fs::read_to_string(path)
            .map_err(|e| WorkerError::io(format!("cannot read {}", path.display()), e))
    }

    /// The worker's own allow-list (empty when never set: it runs nothing).
    pub(crate) fn allow_list(&self) -> Result<Vec<String>, WorkerError> {
        let path = self.allow_file();
        match fs::read(&path) {
            Ok(text) => serde_json::from_slice(&text).map_err(|e| {
                WorkerError::Usage(format!("{} is not a list of entries: {e}", path.display()))
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(WorkerError::io(
                format!("cannot read {}", path.display()),
                e,
            )),
        }
    }

    pub(crate) fn set_allow_list(&self, entries: &[String]) -> Result<(), WorkerError> {
        let json = serde_json::to_vec_pretty(entries)
            .map_err(|e| WorkerError::io("cannot encode allow.json", io::Error::other(e)))?;
        write_private(&self.allow_file(), &json)
    }

    /// Takes the home's lock: one worker per home. Held for the worker's whole life and
    /// inherited by its launcher, so a shim that could still start a job has recorded
    /// itself before another worker can take the home (as studiod's, `docs/SHIMS.md`).
    pub(crate) fn lock(&self) -> Result<File, WorkerError> {
        let path = self.root.join("worker.lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| WorkerError::io(format!("cannot open {}", path.display()), e))?;
        match file.try_lock() {
            Ok(()) => Ok(file),
            Err(fs::TryLockError::WouldBlock) => Err(WorkerError::Usage(format!(
                "another worker runs with the home {}",
                self.root.display()
            ))),
            Err(fs::TryLockError::Error(e)) => Err(WorkerError::io(
                format!("cannot lock {}", path.display()),
                e,
            )),
        }
    }
}

/// Writes `bytes` to `path` (0600) whole: a temporary file, fsync, rename, fsync of the
/// directory.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), WorkerError> {
    let fail = |e: io::Error| WorkerError::io(format!("cannot write {}", path.display()), e);
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.tmp"));
    {
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(fail)?;
        file.write_all(bytes).map_err(fail)?;
        file.sync_all().map_err(fail)?;
    }
    fs::rename(&tmp, path).map_err(fail)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(fail)
}
