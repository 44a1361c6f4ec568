//! What the children run: this very executable as `studio daemon` and `studio app`, unless
//! `STUDIO_DAEMON_BIN` / `STUDIO_APP_BIN` name separate executables (`studiod`,
//! `studio-app`). The supervisor knows only paths and leading arguments.

use std::{
    ffi::OsString,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

/// One child's program and the arguments before its flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Program {
    pub(crate) path: PathBuf,
    pub(crate) leading: Vec<OsString>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binaries {
    pub(crate) daemon: Program,
    pub(crate) app: Program,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum DiscoverError {
    #[error("cannot run {} ({env}): not an executable file", path.display())]
    NotExecutable { env: &'static str, path: PathBuf },
    #[error("cannot locate the studio executable: {0}")]
    NoSelf(#[source] std::io::Error),
}

/// Both children: `own` (the running executable) with a subcommand, or an override.
pub(crate) fn find(
    own: &Path,
    daemon_override: Option<PathBuf>,
    app_override: Option<PathBuf>,
) -> Result<Binaries, DiscoverError> {
    Ok(Binaries {
        daemon: one(own, "daemon", "STUDIO_DAEMON_BIN", daemon_override)?,
        app: one(own, "app", "STUDIO_APP_BIN", app_override)?,
    })
}

/// The running executable.
pub(crate) fn own_exe() -> Result<PathBuf, DiscoverError> {
    std::env::current_exe().map_err(DiscoverError::NoSelf)
}

fn one(
    own: &Path,
    subcommand: &str,
    env: &'static str,
    explicit: Option<PathBuf>,
) -> Result<Program, DiscoverError> {
    let Some(path) = explicit else {
        return Ok(Program {
            path: own.to_path_buf(),
            leading: vec![subcommand.into()],
        });
    };
    let executable =
        std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if executable {
        Ok(Program {
            path,
            leading: Vec::new(),
        })
    } else {
        Err(DiscoverError::NotExecutable { env, path })
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
    fn by_default_both_children_are_this_executable() {
        let own = Path::new("/opt/studio/bin/studio");
        let found = find(own, None, None).expect("found");
        assert_eq!(found.daemon.path, own);
        assert_eq!(found.daemon.leading, [OsString::from("daemon")]);
        assert_eq!(found.app.path, own);
        assert_eq!(found.app.leading, [OsString::from("app")]);
    }

    #[test]
    fn overrides_win_and_take_no_subcommand() {
        let dir = TestDir::new("disc-ovr");
        let other = dir.path().join("my-daemon");
        touch(&other, 0o700);
        let found = find(Path::new("/x/studio"), Some(other.clone()), None).expect("found");
        assert_eq!(found.daemon.path, other);
        assert!(found.daemon.leading.is_empty());
        assert_eq!(found.app.leading, [OsString::from("app")]);
    }

    #[test]
    fn a_non_executable_override_is_named() {
        let dir = TestDir::new("disc-x");
        let app = dir.path().join("studio-app");
        touch(&app, 0o644);
        let err = find(Path::new("/x/studio"), None, Some(app)).expect_err("not executable");
        let text = err.to_string();
        assert!(
            text.contains("studio-app") && text.contains("STUDIO_APP_BIN"),
            "{text}"
        );
    }
}
