//! Where the children's executables are: next to `studio` itself, unless
//! `STUDIO_DAEMON_BIN` / `STUDIO_APP_BIN` name them. The supervisor knows only paths.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binaries {
    pub(crate) daemon: PathBuf,
    pub(crate) app: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum DiscoverError {
    #[error("cannot find {name} at {} (build it, or set {env})", path.display())]
    Missing {
        name: &'static str,
        env: &'static str,
        path: PathBuf,
    },
    #[error("cannot locate the studio executable: {0}")]
    NoSelf(#[source] std::io::Error),
}

/// Resolves both binaries; `dir` is the directory of the running executable.
pub(crate) fn find(
    dir: &Path,
    daemon_override: Option<PathBuf>,
    app_override: Option<PathBuf>,
) -> Result<Binaries, DiscoverError> {
    Ok(Binaries {
        daemon: one(dir, "studiod", "STUDIO_DAEMON_BIN", daemon_override)?,
        app: one(dir, "studio-app", "STUDIO_APP_BIN", app_override)?,
    })
}

/// The directory of the running executable.
pub(crate) fn own_dir() -> Result<PathBuf, DiscoverError> {
    let exe = std::env::current_exe().map_err(DiscoverError::NoSelf)?;
    Ok(exe.parent().map(Path::to_path_buf).unwrap_or_default())
}

fn one(
    dir: &Path,
    name: &'static str,
    env: &'static str,
    explicit: Option<PathBuf>,
) -> Result<PathBuf, DiscoverError> {
    let path = explicit.unwrap_or_else(|| dir.join(name));
    let executable =
        std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if executable {
        Ok(path)
    } else {
        Err(DiscoverError::Missing { name, env, path })
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::testdir::TestDir;

    fn touch(path: &Path, mode: u32) {
        fs::write(path, "#!/bin/sh\n").expect("write");
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn finds_siblings_of_the_executable() {
        let dir = TestDir::new("disc");
        touch(&dir.path().join("studiod"), 0o755);
        touch(&dir.path().join("studio-app"), 0o755);
        let found = find(dir.path(), None, None).expect("found");
        assert_eq!(found.daemon, dir.path().join("studiod"));
        assert_eq!(found.app, dir.path().join("studio-app"));
    }

    #[test]
    fn overrides_win_and_missing_ones_are_named() {
        let dir = TestDir::new("disc-ovr");
        let other = dir.path().join("my-daemon");
        touch(&other, 0o700);
        let err = find(dir.path(), Some(other.clone()), None).expect_err("no app");
        let text = err.to_string();
        assert!(
            text.contains("studio-app") && text.contains("STUDIO_APP_BIN"),
            "{text}"
        );
        touch(&dir.path().join("studio-app"), 0o755);
        let found = find(dir.path(), Some(other.clone()), None).expect("found");
        assert_eq!(found.daemon, other);
    }

    #[test]
    fn a_non_executable_file_does_not_count() {
        let dir = TestDir::new("disc-x");
        touch(&dir.path().join("studiod"), 0o644);
        touch(&dir.path().join("studio-app"), 0o755);
        assert!(matches!(
            find(dir.path(), None, None),
            Err(DiscoverError::Missing {
                name: "studiod",
                ..
            })
        ));
    }
}
