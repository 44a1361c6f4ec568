//! Retention (docs/OPERATIONS.md, "Retention and archives"): the policy
//! (`GET`/`PUT /api/admin/retention`), a pass on demand (`POST /api/admin/retention/run`)
//! and putting an archive back (`POST /api/admin/archives/restore`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What retention keeps. Every part is optional: a part left out keeps everything it
/// governs. Intervals are written like the specs' (`90s`, `15m`, `6h`, `30d`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetentionPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<RunsRetention>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<LogsRetention>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notifications: Option<NotificationsRetention>,
    /// Where passes that run on their own archive each chunk before deleting it (an
    /// absolute directory); without it they delete without archiving. Only the daemon
    /// token from a terminal changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_dir: Option<String>,
    /// How often a pass runs on its own (default `1h`; at least `1m`, at most `7d`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
}

/// Finished runs (with their transitions, approvals, tasks and log folders). A run is
/// pruned when it is older than `max_age` (by when it finished) and not among the last
/// `keep_last` of its schedule; tasks count as one group, a task with all its attempts.
/// With only `keep_last`, age does not matter; with only `max_age`, count does not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunsRetention {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub keep_last: Option<u32>,
}

/// A cap on the bytes of run logs kept: past it, the log folders of the oldest finished
/// runs are pruned (the runs stay, with the tails of their output).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LogsRetention {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1048576)]
    pub max_bytes: Option<u64>,
}

/// How long delivered and dead-lettered notifications are kept (pending ones always are).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotificationsRetention {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead: Option<String>,
}

/// The policy in force, where it comes from, and the latest passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RetentionState {
    pub policy: RetentionPolicy,
    /// `default` (never set), `api` (`PUT /api/admin/retention`) or `config`
    /// (`STUDIO_RETENTION`, which then cannot be changed through the API).
    pub source: String,
    #[schema(format = DateTime)]
    pub updated_at: Option<String>,
    /// The principal that set it through the API.
    pub updated_by: Option<String>,
    /// When the next pass runs on its own.
    #[schema(format = DateTime)]
    pub next_pass_at: Option<String>,
    /// The latest passes, newest first (at most 10).
    pub passes: Vec<RetentionPass>,
}

/// `POST /api/admin/retention/run`: one pass now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetentionRunRequest {
    /// Archive each chunk here before deleting it (an absolute directory, made if
    /// missing); without it, the policy's `archive_dir`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_dir: Option<String>,
}

/// One pass: what it pruned and archived, and the checkpoint after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RetentionPass {
    pub id: i64,
    /// `clock` (on its own) or `request`.
    pub trigger: String,
    #[schema(format = DateTime)]
    pub started_at: String,
    #[schema(format = DateTime)]
    pub finished_at: Option<String>,
    /// `running`, `completed`, or `failed` (chunks committed before the failure stay
    /// pruned, and archived when archiving).
    pub outcome: String,
    pub error: Option<String>,
    pub archive_dir: Option<String>,
    /// Rows deleted, by table (and `log_dirs`, `log_bytes` for log folders removed).
    pub pruned: BTreeMap<String, u64>,
    /// Archives written.
    pub archives: u64,
    /// Chunks committed.
    pub chunks: u64,
    /// The longest a chunk's transaction held the writer, in milliseconds.
    pub longest_chunk_ms: f64,
    pub checkpoint: Option<WalCheckpoint>,
}

/// `PRAGMA wal_checkpoint(TRUNCATE)` after a pass: SQLite's answer and what it moved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WalCheckpoint {
    #[schema(format = DateTime)]
    pub at: String,
    /// Whether a reader kept it from finishing (the WAL is then not truncated).
    pub busy: bool,
    /// Frames in the WAL, and those moved into the database.
    pub log_frames: i64,
    pub checkpointed_frames: i64,
    pub wal_bytes_before: u64,
    pub wal_bytes_after: u64,
    pub took_ms: f64,
}

/// `POST /api/admin/archives/restore`: an archive file on studiod's machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchiveRestoreRequest {
    /// An absolute path to an archive `studio retention` wrote.
    pub file: String,
}

/// What a restore put back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ArchiveRestored {
    pub archive_id: String,
    /// `runs`, `logs` or `notifications`.
    pub kind: String,
    /// Rows inserted, by table.
    pub rows: BTreeMap<String, u64>,
    /// Rows whose pruned references or log marks were put back, by table.
    pub preimages: BTreeMap<String, u64>,
    /// Log files written back.
    pub log_files: u64,
}
