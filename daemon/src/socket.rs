//! Private Unix sockets under `run/`: bound once per start, mode 0600, removed on stop.

use std::{
    fs,
    io::{self, ErrorKind},
    os::unix::fs::{FileTypeExt, PermissionsExt},
    path::Path,
};

use tokio::net::UnixListener;

/// Binds `path`, replacing a stale socket left by a crashed start but never a live one.
pub(crate) fn bind_private(path: &Path) -> io::Result<UnixListener> {
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
    Ok(listener)
}

/// Removes a socket this process bound; a missing file is fine.
pub(crate) fn remove(path: &Path) {
    if let Err(e) = fs::remove_file(path)
        && e.kind() != ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove socket");
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
        let _again = bind_private(&path).expect("rebind over stale");
        remove(&path);
        assert!(!path.exists());
    }
}
