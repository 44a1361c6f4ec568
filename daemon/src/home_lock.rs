//! studiod's lock on its home (`run/daemon.lock`): one studiod per home, for its whole life.
//!
//! An exclusive `flock`, taken before anything is bound or opened and held until the
//! daemon has removed its sockets and closed its store. A supervisor killed with SIGKILL
//! leaves its studiod draining (it gets SIGTERM through its parent-death signal); a new
//! `studio up` starts a new studiod at once, which waits here for the old one to finish
//! instead of sharing `state.db` and the sockets with it. The holder writes its pid into
//! the file so a waiter can name it.

use std::{
    fs::{File, OpenOptions, TryLockError},
    io::{self, Write},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    time::Duration,
};

use studio_contract::home::Home;

/// How often a waiter tries again: short against a drain that lasts seconds.
const POLL: Duration = Duration::from_millis(50);

/// The held lock. Dropping it (closing the file) releases it.
#[derive(Debug)]
pub(crate) struct HomeLock {
    file: File,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot open {}", .path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot lock {}", .path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Another studiod still serves this home after the whole wait: exit 64.
    #[error(
        "another studiod ({}) still holds the home {} after {} ms; stop it first",
        holder_text(*.holder),
        .home.display(),
        .waited.as_millis()
    )]
    Busy {
        home: PathBuf,
        holder: Option<u32>,
        waited: Duration,
    },
}

fn holder_text(holder: Option<u32>) -> String {
    holder.map_or_else(|| "pid unknown".to_owned(), |pid| format!("pid {pid}"))
}

impl HomeLock {
    /// The lock's descriptor, for the job launcher to inherit (`docs/SHIMS.md`).
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.file)
    }

    /// Takes the lock, waiting up to `wait` for a previous studiod to let go of it.
    /// `run/` must exist.
    pub(crate) async fn acquire(home: &Home, wait: Duration) -> Result<Self, LockError> {
        let path = home.daemon_lock_file();
        // Never truncate on open: the holder's pid is in there until we hold the lock.
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| LockError::Open {
                path: path.clone(),
                source,
            })?;
        let started = tokio::time::Instant::now();
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(source)) => return Err(LockError::Lock { path, source }),
            }
            let waited = started.elapsed();
            if waited >= wait {
                return Err(LockError::Busy {
                    home: home.root().to_path_buf(),
                    holder: holder(&path),
                    waited,
                });
            }
            if !told {
                told = true;
                tracing::info!(
                    home = %home.root().display(),
                    holder = %holder_text(holder(&path)),
                    wait_ms = wait.as_millis(),
                    "waiting for the previous studiod of this home to finish"
                );
            }
            tokio::time::sleep(POLL.min(wait - waited)).await;
        }
        if told {
            let waited_ms = started.elapsed().as_millis();
            tracing::info!(waited_ms, "the previous studiod finished; starting");
        }
        write_pid(&file).map_err(|source| LockError::Lock { path, source })?;
        Ok(Self { file })
    }
}

fn write_pid(mut file: &File) -> io::Result<()> {
    file.set_len(0)?;
    file.write_all(format!("{}\n", std::process::id()).as_bytes())
}

/// The pid the holder wrote, if it has yet.
fn holder(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::testing::TempDir;

    #[tokio::test]
    async fn a_second_holder_waits_then_gives_up_naming_the_first() {
        let dir = TempDir::new("lock");
        let home = Home::new(dir.path());
        home.prepare().expect("prepare");
        let first = HomeLock::acquire(&home, Duration::ZERO)
            .await
            .expect("free");
        let text = std::fs::read_to_string(home.daemon_lock_file()).expect("pid");
        assert_eq!(text, format!("{}\n", std::process::id()));

        let started = Instant::now();
        let err = HomeLock::acquire(&home, Duration::from_millis(300))
            .await
            .expect_err("held");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        assert!(waited < Duration::from_secs(3), "{waited:?}");
        let LockError::Busy { holder, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(*holder, Some(std::process::id()));
        let line = err.to_string();
        assert!(line.contains(&dir.path().display().to_string()), "{line}");
        assert!(
            line.contains(&format!("pid {}", std::process::id())),
            "{line}"
        );

        // A waiter gets the lock as soon as the holder lets go.
        let waiter = tokio::spawn({
            let home = home.clone();
            async move { HomeLock::acquire(&home, Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "it waits while the lock is held");
        let released = Instant::now();
        drop(first);
        let _second = waiter.await.expect("join").expect("taken after release");
        assert!(released.elapsed() < Duration::from_secs(1));
    }
}
