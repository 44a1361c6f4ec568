//! `/api/admin/allowlist`: the executables a command schedule may name.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AllowEntry {
    /// A bare name (looked up on studiod's PATH) or an absolute path.
    pub executable: String,
    /// Where the entry leads on studiod's PATH now; `null` when nothing is there.
    pub resolved: Option<String>,
    #[schema(format = DateTime)]
    pub added_at: String,
    /// `daemon` (the machine's owner) or `config`.
    pub added_by: String,
}

/// `GET /api/admin/allowlist`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AllowList {
    pub entries: Vec<AllowEntry>,
}

/// `POST /api/admin/allowlist` (the daemon token only, never a browser).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AllowChange {
    #[serde(default)]
    pub add: Vec<String>,
    #[serde(default)]
    pub remove: Vec<String>,
}

/// The list after a change, and what the change did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AllowChanged {
    pub entries: Vec<AllowEntry>,
    /// Names that were not on the list before.
    pub added: Vec<String>,
    /// Names that were on it and are gone.
    pub removed: Vec<String>,
}
