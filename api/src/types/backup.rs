//! `POST /api/admin/backup` (studiod's `state.db`) and `POST /api/app/backup` (studio-app's
//! `app.db`): each process copies its own store while it runs (docs/OPERATIONS.md,
//! "Backups"). Only the machine's owner asks: the daemon token, from a terminal.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Where to write the copy: an absolute directory (made if missing) that does not hold
/// the file yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackupRequest {
    pub dir: String,
}

/// One store copied: a consistent snapshot, fsynced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BackupFile {
    /// Its file name in the directory (`state.db`, `app.db`).
    pub file: String,
    pub bytes: u64,
    /// SHA-256 of the file, hex.
    pub sha256: String,
    pub took_ms: u64,
}
