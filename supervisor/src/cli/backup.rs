//! `studio backup DEST` and `studio restore SRC` (docs/OPERATIONS.md, "Backups").
//!
//! A backup is made by the running processes, each of its own store (this CLI never
//! opens a database): studiod copies `state.db` and studio-app `app.db` into DEST as one
//! consistent snapshot each (SQLite's `VACUUM INTO`, on a reader, while writes go on);
//! then `backup.json` records the files' sizes and SHA-256. The home's keys are not in a
//! backup, so a backup alone discloses no secret. A restore checks every file against
//! `backup.json`, refuses a home that runs, keeps what it replaces beside it, and drops
//! the replaced stores' write-ahead logs with them.

use std::{
    fs,
    io::{self, Write},
    path::Path,
};

use serde::{Deserialize, Serialize};
use studio_api::{BackupFile, BackupRequest};
use studio_contract::{home::Home, time::now_ms};

use crate::{
    Error,
    cli::{Remote, client::Client},
    control::{Reply, Request, ask},
    output::print_json,
};

/// The manifest's name in a backup directory.
const MANIFEST: &str = "backup.json";
/// The manifest's format.
const FORMAT: u32 = 1;

/// What `backup.json` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub format: u32,
    pub studio_version: String,
    pub created_at: String,
    pub files: Vec<BackupFile>,
}

/// `studio backup DEST`: both stores of the running Studio into DEST.
pub(crate) async fn backup(home: &Home, dest: &Path, remote: &Remote) -> Result<u8, Error> {
    let dest = std::path::absolute(dest)
        .map_err(|e| Error::Usage(format!("backup directory {}: {e}", dest.display())))?;
    if fs::read_dir(&dest).is_ok_and(|mut d| d.next().is_some()) {
        return Err(Error::Usage(format!(
            "{} is not empty: a backup goes into a new or empty directory",
            dest.display()
        )));
    }
    let Reply::Status(status) = ask(home, &Request::Status).await? else {
        return Err(Error::Failed("unexpected reply from the supervisor".into()));
    };
    let daemon = Client::connect(home, remote.daemon.as_deref()).await?;
    // The app where it listens on this machine, never through a proxy in front of it.
    let app_origin = if status.app_origin.is_empty() {
        &status.app_url
    } else {
        &status.app_origin
    };
    let app = daemon.at(app_origin)?;
    let request = BackupRequest {
        dir: dest.display().to_string(),
    };
    let began = std::time::Instant::now();
    let state: BackupFile = daemon.post("/api/admin/backup", &request).await?;
    let app_db: BackupFile = app.post("/api/app/backup", &request).await?;
    let manifest = Manifest {
        format: FORMAT,
        studio_version: studio_contract::VERSION.to_owned(),
        created_at: studio_contract::time::rfc3339(now_ms()),
        files: vec![state, app_db],
    };
    write_durably(
        &dest.join(MANIFEST),
        &serde_json::to_vec_pretty(&manifest).unwrap_or_default(),
    )
    .map_err(|e| Error::io("cannot write backup.json", e))?;
    if remote.json {
        print_json(&manifest)?;
    } else {
        for f in &manifest.files {
            outln!("{}  {} bytes  sha256 {}", f.file, f.bytes, f.sha256)?;
        }
    }
    errln!(
        "backed up into {} in {} ms; the keys in run/ are not in it: keep them apart",
        dest.display(),
        began.elapsed().as_millis()
    );
    Ok(0)
}

/// `studio restore SRC`: the stores of a backup into this stopped home.
pub(crate) async fn restore(home: &Home, src: &Path) -> Result<u8, Error> {
    let manifest = read_manifest(src)?;
    match ask(home, &Request::Status).await {
        Err(Error::NotRunning(_)) => {}
        Ok(_) | Err(_) => {
            return Err(Error::Usage(format!(
                "Studio runs on {}: stop it first (`studio stop`)",
                home.root().display()
            )));
        }
    }
    if daemon_runs(home) {
        return Err(Error::Usage(format!(
            "a studiod holds {}: stop it first",
            home.daemon_lock_file().display()
        )));
    }
    for f in &manifest.files {
        let have = studio_contract::secret::sha256_file(&src.join(&f.file))
            .map_err(|e| Error::Usage(format!("{}: {e}", src.join(&f.file).display())))?;
        if have != f.sha256 {
            return Err(Error::Usage(format!(
                "{} does not match backup.json (sha256 {have}, not {}): not restored",
                f.file, f.sha256
            )));
        }
    }
    fs::create_dir_all(home.root()).map_err(|e| Error::io("cannot make the home", e))?;
    let stamp = now_ms();
    for f in &manifest.files {
        let target = home.root().join(&f.file);
        put_back(&src.join(&f.file), &target, stamp)
            .map_err(|e| Error::io(format!("cannot restore {}", f.file), e))?;
        outln!("restored {} ({} bytes)", f.file, f.bytes)?;
    }
    fs::File::open(home.root())
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("cannot sync the home", e))?;
    if !home.secrets_key_file().exists() {
        errln!(
            "this home has no run/secrets.key: the backup's secrets and notification endpoints cannot be opened until the original home's key is put there"
        );
    }
    Ok(0)
}

fn read_manifest(src: &Path) -> Result<Manifest, Error> {
    let path = src.join(MANIFEST);
    let text = fs::read(&path)
        .map_err(|e| Error::Usage(format!("{}: {e} (not a Studio backup?)", path.display())))?;
    let manifest: Manifest = serde_json::from_slice(&text)
        .map_err(|e| Error::Usage(format!("{}: {e}", path.display())))?;
    if manifest.format != FORMAT {
        return Err(Error::Usage(format!(
            "{}: format {} is not one this studio reads ({FORMAT})",
            path.display(),
            manifest.format
        )));
    }
    for f in &manifest.files {
        if !matches!(f.file.as_str(), "state.db" | "app.db") {
            return Err(Error::Usage(format!(
                "{}: names {:?}, not a store",
                path.display(),
                f.file
            )));
        }
    }
    Ok(manifest)
}

/// Whether a studiod holds the home's daemon lock.
fn daemon_runs(home: &Home) -> bool {
    let Ok(file) = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(home.daemon_lock_file())
    else {
        return false;
    };
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {
            let _ = rustix::fs::flock(&file, rustix::fs::FlockOperation::Unlock);
            false
        }
        Err(_) => true,
    }
}

/// Copies `from` over `target`: into a temporary file, fsynced, then renamed; what it
/// replaces (and that store's `-wal` / `-shm`, which belong to it) is kept beside it as
/// `*.before-restore-<ms>`.
fn put_back(from: &Path, target: &Path, stamp: i64) -> io::Result<()> {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = target.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!("{name}.restoring"));
    let mut input = fs::File::open(from)?;
    let mut output = fs::File::create(&tmp)?;
    io::copy(&mut input, &mut output)?;
    output.sync_all()?;
    for suffix in ["", "-wal", "-shm"] {
        let old = dir.join(format!("{name}{suffix}"));
        if old.exists() {
            fs::rename(
                &old,
                dir.join(format!("{name}{suffix}.before-restore-{stamp}")),
            )?;
        }
    }
    fs::rename(&tmp, target)
}

fn write_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    if let Some(dir) = path.parent() {
        fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
