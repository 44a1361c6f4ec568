//! `/api/workers`: the workers that run tasks (studiod's built-in one and the enrolled
//! remote ones) and the one-time join tokens that enrol them (docs/TASKS.md, "Workers").

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Worker {
    /// `builtin` for studiod's own; an enrolled worker's id otherwise.
    pub id: String,
    pub name: String,
    /// studiod's own worker (it runs on studiod's machine, through its runner).
    pub builtin: bool,
    /// The labels it serves now.
    pub labels: Vec<String>,
    /// The labels its join token granted: the most it may offer.
    pub granted: Vec<String>,
    /// How many jobs it runs at once.
    pub capacity: i64,
    /// Attempts running on it now.
    pub running: i64,
    /// Its assignment stream is open (the built-in worker always is).
    pub connected: bool,
    pub version: Option<String>,
    #[schema(format = DateTime)]
    pub enrolled_at: Option<String>,
    #[schema(format = DateTime)]
    pub last_seen_at: Option<String>,
    /// When its certificate stops admitting it.
    #[schema(format = DateTime)]
    pub certificate_expires_at: Option<String>,
    /// SHA-256 of its certificate (what admits it).
    pub certificate_sha256: Option<String>,
    /// Revoked: its certificate admits it no more.
    #[schema(format = DateTime)]
    pub revoked_at: Option<String>,
}

/// Every worker: the built-in one first, then the enrolled ones, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkerList {
    pub workers: Vec<Worker>,
}

/// `POST /api/workers/tokens`: a one-time join token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewJoinToken {
    /// The labels a worker enrolled with it may offer (`[a-z0-9][a-z0-9._-]*`, at most 32).
    #[serde(default)]
    pub labels: Vec<String>,
    /// How long it may be used: `30m`, `1h`, `2d` (at most 7 days; default `1h`).
    #[serde(default)]
    pub ttl: Option<String>,
}

/// A join token, shown once: studiod keeps only its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct JoinTokenCreated {
    /// Pass to `studio worker join --token`; it also pins studiod's authority.
    pub token: String,
    pub labels: Vec<String>,
    #[schema(format = DateTime)]
    pub expires_at: String,
    /// Where workers connect (`host:port` of studiod's worker listener).
    pub server: String,
}
