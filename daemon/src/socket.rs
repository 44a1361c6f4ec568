//! Private Unix sockets under `run/`: bound once per start, mode 0600, removed on stop by
//! the process that bound them and only while the path still names their file
//! (`contract::socket`).

use std::{
    fs,
    io::{self, ErrorKind},
    os::unix::fs::{FileTypeExt, PermissionsExt},
    path::Path,
};

use studio_contract::socket::{Removal, SocketFile};
use tokio::net::UnixListener;

/// A socket this daemon bound: the listener, and the file to remove at the stop.
#[derive(Debug)]
pub(crate) struct Bound {
    pub(crate) listener: UnixListener,
    pub(crate) file: SocketFile,
}

/// Binds `path`, replacing a stale socket left by a crashed start but never a live one.
pub(crate) fn bind_private(path: &Path) -> io::Result<Bound> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    ErrorKind::AddrInUse,
                    format!("another process serves {}", path.display()),
                ));
            }
            fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(io::Error::new(
                ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    // run/ is 0700 already; the socket mode is the second wall.
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    // After the chmod, which changes the file's status time that identifies it.
    let file = SocketFile::bound(path)?;
    Ok(Bound { listener, file })
}

/// Removes a socket this process bound, unless another process has bound the path since.
pub(crate) fn remove(file: &SocketFile) {
    let path = file.path().display();
    match file.remove() {
        Ok(Removal::Removed | Removal::Missing) => {}
        Ok(Removal::Replaced) => {
            tracing::info!(%path, "left the socket another process bound in its place");
        }
        Err(error) => tracing::warn!(%path, %error, "cannot remove socket"),
    }
}

/// The uid this daemon runs as: the only peer its sockets serve.
pub(crate) fn own_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;

    #[tokio::test]
    async fn binds_0600_replaces_stale_refuses_live() {
        let dir = TempDir::new("sock");
        let path = dir.path().join("x.sock");
        let live = bind_private(&path).expect("bind");
        let mode = fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            bind_private(&path).expect_err("live").kind(),
            ErrorKind::AddrInUse
        );
        drop(live);
        // The file stays after the listener is gone: a stale socket.
        assert!(path.exists());
        let again = bind_private(&path).expect("rebind over stale");
        remove(&again.file);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn the_stop_leaves_a_socket_bound_in_its_place() {
        let dir = TempDir::new("sock-own");
        let path = dir.path().join("x.sock");
        let old = bind_private(&path).expect("bind");
        // A successor finds the old listener gone (its server stopped accepting) and
        // takes the path over while the old process is still draining.
        drop(old.listener);
        // Past one tick of the coarse clock that stamps files: the successor's file may
        // reuse the freed inode number, never its status time too (a drain takes seconds).
        std::thread::sleep(std::time::Duration::from_millis(30));
        let new = bind_private(&path).expect("rebind over stale");
        remove(&old.file);
        assert!(path.exists(), "the successor's socket stays");
        std::os::unix::net::UnixStream::connect(&path).expect("and still answers");
        remove(&new.file);
        assert!(!path.exists());
    }
}
