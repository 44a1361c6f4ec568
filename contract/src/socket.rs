//! Socket files under `run/` and who may remove them: only the process that bound the
//! file, and only while the path still names that very file.
//!
//! A process stopping slowly must not take away the socket a newer process bound at the
//! same path (studiod's `daemon.sock` and `verifier.sock`, the supervisor's
//! `supervisor.sock`), so removal is never by path alone: the file's device, inode and
//! status-change time are recorded right after binding and compared before unlinking.

use std::{
    fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

/// A socket file this process bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketFile {
    path: PathBuf,
    id: FileId,
}

/// What identifies one file, not its name. The status-change time guards against an inode
/// number freed by an unlink and handed at once to the next file (ext4 and tmpfs do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

impl FileId {
    fn of(path: &Path) -> io::Result<Self> {
        let meta = fs::symlink_metadata(path)?;
        Ok(Self {
            dev: meta.dev(),
            ino: meta.ino(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }
}

/// What [`SocketFile::remove`] found at the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Our file, now gone.
    Removed,
    /// Another file (another process's socket): left in place.
    Replaced,
    /// Nothing there any more.
    Missing,
}

impl SocketFile {
    /// Records the file now at `path` as ours. Call it right after `bind` and any
    /// `chmod`, while the caller's lock on the home keeps others from replacing it.
    pub fn bound(path: &Path) -> io::Result<Self> {
        Ok(Self {
            path: path.to_path_buf(),
            id: FileId::of(path)?,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the path still names the file bound here.
    pub fn is_ours(&self) -> io::Result<bool> {
        match FileId::of(&self.path) {
            Ok(id) => Ok(id == self.id),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Unlinks the path only if it still names the file bound here. (A replacement
    /// between the check and the unlink cannot be excluded without a kernel call that
    /// unlinks by inode; the home locks make that window one nobody else enters.)
    pub fn remove(&self) -> io::Result<Removal> {
        match FileId::of(&self.path) {
            Ok(id) if id == self.id => match fs::remove_file(&self.path) {
                Ok(()) => Ok(Removal::Removed),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Removal::Missing),
                Err(e) => Err(e),
            },
            Ok(_) => Ok(Removal::Replaced),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Removal::Missing),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;

    #[test]
    fn removes_its_own_socket_and_never_a_replacement() {
        let dir = std::env::temp_dir().join(format!("st-sockfile-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("x.sock");

        let _first = UnixListener::bind(&path).expect("bind");
        let ours = SocketFile::bound(&path).expect("record");
        assert!(ours.is_ours().expect("stat"));
        assert_eq!(ours.remove().expect("remove"), Removal::Removed);
        assert!(!path.exists());
        assert_eq!(ours.remove().expect("again"), Removal::Missing);

        // Another process binds anew and takes the path over while we still run.
        let _first = UnixListener::bind(&path).expect("bind");
        let ours = SocketFile::bound(&path).expect("record");
        let staged = dir.join("other.sock");
        let other = UnixListener::bind(&staged).expect("bind the other");
        fs::rename(&staged, &path).expect("replace");
        assert!(!ours.is_ours().expect("stat"));
        assert_eq!(ours.remove().expect("remove"), Removal::Replaced);
        assert!(path.exists(), "the other process's socket stays");
        std::os::unix::net::UnixStream::connect(&path).expect("and it still answers");
        drop(other);

        // Or it removes ours as stale and binds at the path: the inode number may be the
        // one just freed, but not the status-change time (coarse clocks tick within ms).
        let ours = SocketFile::bound(&path).expect("record");
        std::thread::sleep(std::time::Duration::from_millis(30));
        fs::remove_file(&path).expect("unlink");
        let _other = UnixListener::bind(&path).expect("bind again");
        assert_eq!(ours.remove().expect("remove"), Removal::Replaced);
        assert!(path.exists(), "the rebound socket stays");
        let _ = fs::remove_dir_all(&dir);
    }
}
