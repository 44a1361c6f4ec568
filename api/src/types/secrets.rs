//! `/api/secrets`: named values kept sealed by studiod for jobs (docs/OPERATIONS.md,
//! "Secrets"). Answers carry names only, never a value.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One secret: its name and who set it when, never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Secret {
    pub name: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// The principal that last set it (a session id, or `daemon`).
    pub updated_by: Option<String>,
    /// The schedules (by name) and unfinished tasks (`task ID`) that name it.
    pub used_by: Vec<String>,
}

/// Every secret, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SecretList {
    pub secrets: Vec<Secret>,
}

/// `PUT /api/secrets/{name}`: the value (6 bytes to 64 KiB of UTF-8, no NUL). Its `Debug`
/// never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretValue {
    pub value: String,
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretValue").finish_non_exhaustive()
    }
}
