//! The layout of a Studio home (`STUDIO_HOME`): who keeps which file where.
//!
//! ```text
//! state.db            studiod's store (SQLite, WAL)
//! app.db              studio-app's store
//! run/          0700  token (0600), verifier.sock, daemon.sock, api.sock, supervisor.sock,
//!                     studio.lock (the supervisor's), daemon.lock (studiod's, holds its pid)
//! run/app/      0700  a studio-app enrolled with studiod on another host (`studio app
//!                     join`): key.pem, cert.pem, ca.pem, id (each 0600)
//! logs/         0700  daemon.log, app.log (+ rotated .1 … .N)
//! runs/               job output, one folder per run
//! ```

use std::{
    fs, io,
    os::unix::fs::{DirBuilderExt, PermissionsExt},
    path::{Path, PathBuf},
    time::Duration,
};

/// How long a starting studiod waits for the previous studiod of its home to finish its
/// graceful stop (which takes seconds while jobs drain) before it gives up with exit 64.
pub const DAEMON_LOCK_WAIT: Duration = Duration::from_secs(15);
/// Overrides [`DAEMON_LOCK_WAIT`], in milliseconds: studiod waits this long, and the
/// supervisor gives studiod this long on top of its readiness timeout.
pub const DAEMON_LOCK_WAIT_ENV: &str = "STUDIO_DAEMON_LOCK_WAIT_MS";

/// Reads a [`DAEMON_LOCK_WAIT_ENV`] value: whole milliseconds, at most ten minutes.
pub fn parse_lock_wait(value: &str) -> Option<Duration> {
    value
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|ms| *ms <= 600_000)
        .map(Duration::from_millis)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The explicit directory, else the user's state directory
    /// (`$XDG_STATE_HOME/studio`, else `~/.local/state/studio`).
    pub fn resolve(explicit: Option<PathBuf>) -> Self {
        if let Some(root) = explicit {
            return Self::new(root);
        }
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
            .unwrap_or_else(|| PathBuf::from("."));
        Self::new(state.join("studio"))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn state_db(&self) -> PathBuf {
        self.root.join("state.db")
    }
    pub fn app_db(&self) -> PathBuf {
        self.root.join("app.db")
    }
    pub fn run_dir(&self) -> PathBuf {
        self.root.join("run")
    }
    pub fn token_file(&self) -> PathBuf {
        self.run_dir().join("token")
    }
    /// The key that signs the evidence log (`run/evidence.key`, 0600; never in a database).
    pub fn evidence_key_file(&self) -> PathBuf {
        self.run_dir().join("evidence.key")
    }
    /// The key that seals secrets' values (docs/OPERATIONS.md, "Secrets").
    pub fn secrets_key_file(&self) -> PathBuf {
        self.run_dir().join("secrets.key")
    }
    pub fn verifier_socket(&self) -> PathBuf {
        self.run_dir().join("verifier.sock")
    }
    pub fn daemon_socket(&self) -> PathBuf {
        self.run_dir().join("daemon.sock")
    }
    /// studiod's HTTP API on a Unix socket, for studio-app on the same host.
    pub fn api_socket(&self) -> PathBuf {
        self.run_dir().join("api.sock")
    }
    /// Where `studio app join` keeps a studio-app's enrolment with a studiod on another
    /// host: [`Home::app_key_file`], [`Home::app_cert_file`], [`Home::app_ca_file`] and
    /// [`Home::app_id_file`].
    pub fn app_tls_dir(&self) -> PathBuf {
        self.run_dir().join("app")
    }
    /// The enrolled app's private key (PEM, 0600; made on this host, never sent).
    pub fn app_key_file(&self) -> PathBuf {
        self.app_tls_dir().join("key.pem")
    }
    /// The enrolled app's client certificate (PEM), issued by studiod's authority.
    pub fn app_cert_file(&self) -> PathBuf {
        self.app_tls_dir().join("cert.pem")
    }
    /// studiod's authority (PEM): the only one the app trusts for studiod.
    pub fn app_ca_file(&self) -> PathBuf {
        self.app_tls_dir().join("ca.pem")
    }
    /// The enrolled app's id, as studiod lists it (`studio app list`).
    pub fn app_id_file(&self) -> PathBuf {
        self.app_tls_dir().join("id")
    }
    pub fn supervisor_socket(&self) -> PathBuf {
        self.run_dir().join("supervisor.sock")
    }
    /// The supervisor's lock: one `studio up` per home.
    pub fn lock_file(&self) -> PathBuf {
        self.run_dir().join("studio.lock")
    }
    /// studiod's lock, held for the daemon's whole life: one studiod per home.
    pub fn daemon_lock_file(&self) -> PathBuf {
        self.run_dir().join("daemon.lock")
    }
    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }
    /// `logs/<child>.log` for `daemon` or `app`.
    pub fn log_file(&self, child: &str) -> PathBuf {
        self.logs_dir().join(format!("{child}.log"))
    }
    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// Creates the home, `run/` and `logs/`, and tightens `run/` to 0700 even if it existed.
    pub fn prepare(&self) -> io::Result<()> {
        let mut dir = fs::DirBuilder::new();
        dir.recursive(true).mode(0o700);
        for d in [self.root.clone(), self.run_dir(), self.logs_dir()] {
            dir.create(&d)?;
        }
        fs::set_permissions(self.run_dir(), fs::Permissions::from_mode(0o700))
    }

    /// Reads a secret file, refusing one that others could read.
    pub fn read_secret(path: &Path) -> io::Result<String> {
        let meta = fs::metadata(path)?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is readable by others (mode must be 0600)",
                    path.display()
                ),
            ));
        }
        Ok(fs::read_to_string(path)?.trim().to_owned())
    }

    /// The 32-byte key of the home at `path` as 64 hex digits: read, or made from random
    /// bytes (0600) when there is none. `true` when it was made here.
    pub fn key_or_make(path: &Path) -> io::Result<(String, bool)> {
        match Self::read_secret(path) {
            Ok(text) => Ok((text, false)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let text = crate::secret::hex(&crate::secret::random_bytes::<32>());
                Self::write_secret(path, &text)?;
                Ok((text, true))
            }
            Err(e) => Err(e),
        }
    }

    /// Writes a secret file with mode 0600 atomically (temp file, then rename).
    pub fn write_secret(path: &Path, secret: &str) -> io::Result<()> {
        use std::{io::Write, os::unix::fs::OpenOptionsExt};
        let tmp = path.with_extension("tmp");
        let _ = fs::remove_file(&tmp);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(secret.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_and_secrets() {
        let root = std::env::temp_dir().join(format!("studio-home-test-{}", std::process::id()));
        let home = Home::new(&root);
        home.prepare().expect("prepare");
        let mode = fs::metadata(home.run_dir())
            .expect("run")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        Home::write_secret(&home.token_file(), "s3cret").expect("write");
        assert_eq!(
            Home::read_secret(&home.token_file()).expect("read"),
            "s3cret"
        );
        fs::set_permissions(home.token_file(), fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(Home::read_secret(&home.token_file()).is_err());
        fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn lock_wait_values() {
        assert_eq!(parse_lock_wait(" 250 "), Some(Duration::from_millis(250)));
        assert_eq!(parse_lock_wait("0"), Some(Duration::ZERO));
        assert_eq!(parse_lock_wait("600001"), None);
        assert_eq!(parse_lock_wait("-1"), None);
        assert_eq!(parse_lock_wait("15s"), None);
    }
}
