//! Redaction of a job's output (docs/OPERATIONS.md, "Redaction").

use serde::{Deserialize, Serialize};

/// A secret a job received: its output never shows `value`, only `[redacted:NAME]`. Its
/// `Debug` shows the name only.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redaction {
    pub name: String,
    pub value: String,
}

impl std::fmt::Debug for Redaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redaction")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The names of an environment, for `Debug` output that must not show values.
pub(crate) fn names(env: &[(String, String)]) -> Vec<&str> {
    env.iter().map(|(name, _)| name.as_str()).collect()
}
