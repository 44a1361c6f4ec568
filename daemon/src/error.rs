//! Why the daemon could not start or stop cleanly, and how errors are logged: one
//! line with the whole cause chain, so a log reader sees the root cause.

use std::{error::Error, fmt::Write};

use crate::{config::ConfigError, home_lock::LockError, store::StoreError};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("bad configuration")]
    Config(#[from] ConfigError),
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("state.db")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Lock(#[from] LockError),
}

impl DaemonError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }

    /// Whether the operator must fix something (exit 64) rather than retry (exit 1).
    pub fn is_config(&self) -> bool {
        // Another studiod on the home will not go away by retrying either.
        matches!(self, Self::Config(_) | Self::Lock(LockError::Busy { .. }))
    }
}

/// `outer: inner: root` for one-line logs.
pub fn chain(error: &dyn Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let _ = write!(line, ": {c}");
        cause = c.source();
    }
    line
}
