//! Which file a program name runs. A job's program is always an absolute path, found here
//! with the daemon's own search path, never the job's: a job's environment cannot change
//! what an allowed name starts.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

/// The longest allow-list entry accepted (PATH_MAX).
const MAX_ENTRY_BYTES: usize = 4096;

/// Why `text` cannot be an entry of a command allow-list (studiod's or a worker's), or
/// `None` when it can: a bare file name (found on the allowing process's `PATH` when a
/// job starts) or an absolute path without `.`, `..` or empty components.
pub fn allow_entry_problem(text: &str) -> Option<&'static str> {
    if text.is_empty() || text.len() > MAX_ENTRY_BYTES {
        return Some("must be 1 to 4096 bytes");
    }
    if text.chars().any(char::is_control) {
        return Some("must not contain control characters");
    }
    match text.strip_prefix('/') {
        None if text.contains('/') => {
            Some("must be a bare name (found on PATH) or an absolute path")
        }
        None if matches!(text, "." | "..") => Some("is not a file name"),
        None => None,
        Some(rest) => rest
            .split('/')
            .any(|part| matches!(part, "" | "." | ".."))
            .then_some("must be a plain absolute path (no empty, '.' or '..' parts)"),
    }
}

/// Why a program has no file to run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("{0:?} is neither a bare name nor an absolute path")]
    Relative(String),
    #[error("{name:?} is not an executable file in any absolute directory of PATH ({path})")]
    NotFound { name: String, path: String },
}

/// `program` as an absolute path: a path as it is, a bare name looked up in the absolute
/// directories of `search_path` (relative ones, `.` included, are skipped).
pub fn resolve(program: &str, search_path: &str) -> Result<PathBuf, ResolveError> {
    if program.starts_with('/') {
        return Ok(PathBuf::from(program));
    }
    if program.is_empty() || program.contains('/') || matches!(program, "." | "..") {
        return Err(ResolveError::Relative(program.to_owned()));
    }
    search_path
        .split(':')
        .map(Path::new)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(|| ResolveError::NotFound {
            name: program.to_owned(),
            path: search_path.to_owned(),
        })
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use std::{fs, os::unix::fs::PermissionsExt};

    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("runner-prog-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    fn executable(path: &Path, mode: u32) {
        fs::write(path, "#!/bin/sh\n").expect("write");
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn a_name_is_found_in_the_first_absolute_directory_that_has_it() {
        let dir = scratch("first");
        let (a, b) = (dir.join("a"), dir.join("b"));
        fs::create_dir_all(&a).expect("a");
        fs::create_dir_all(&b).expect("b");
        executable(&a.join("tool"), 0o644); // not executable: skipped
        executable(&b.join("tool"), 0o755);
        let path = format!("{}:{}", a.display(), b.display());
        assert_eq!(resolve("tool", &path), Ok(b.join("tool")));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn relative_search_directories_are_never_searched() {
        // Relative to the test's working directory, where a relative PATH entry would look.
        let rel = format!("runner-prog-rel-{}", std::process::id());
        fs::create_dir_all(&rel).expect("mkdir");
        executable(&Path::new(&rel).join("tool"), 0o755);
        let found = resolve("tool", &format!(".:{rel}:"));
        let absolute = std::env::current_dir().expect("cwd").join(&rel);
        let found_absolute = resolve("tool", &absolute.display().to_string());
        let _ = fs::remove_dir_all(&rel);
        assert!(
            matches!(found, Err(ResolveError::NotFound { .. })),
            "{found:?}"
        );
        assert_eq!(found_absolute, Ok(absolute.join("tool")));
    }

    #[test]
    fn paths_are_kept_and_relative_paths_refused() {
        assert_eq!(resolve("/bin/echo", ""), Ok(PathBuf::from("/bin/echo")));
        for bad in ["./echo", "bin/echo", "..", ".", ""] {
            assert_eq!(
                resolve(bad, "/bin"),
                Err(ResolveError::Relative(bad.into()))
            );
        }
    }
}
