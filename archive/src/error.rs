//! What writing or reading an archive can fail with. Callers tell apart a file they
//! could not read or write, a file that is no ZIP, and a ZIP that is no valid archive.

use std::{io, path::PathBuf};

/// An archive's failure; each message is one line naming the member or line at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be read or written.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// The file is no ZIP archive (or one cut short: its central directory is missing).
    #[error("not a ZIP archive: {0}")]
    NotAZip(String),
    /// A ZIP archive, but not a valid `studio-archive/1` one, or one that does not
    /// verify: what is wrong, naming the member and line.
    #[error("{0}")]
    Invalid(String),
    /// The archive's final name is taken: an archive never replaces a file.
    #[error("a file named {} already exists", .0.display())]
    Exists(PathBuf),
    /// What the caller asked for cannot be done: a chunk with a name the format does
    /// not allow, a log the archive does not hold.
    #[error("{0}")]
    Input(String),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// Whether the file was read and found wanting (rather than not read at all).
    pub fn is_invalid(&self) -> bool {
        matches!(self, Self::Invalid(_))
    }
}
