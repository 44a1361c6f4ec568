//! `/api/apps`: the studio-apps on other hosts that reach studiod's apps listener with a
//! client certificate of its authority (docs/FLEETS.md, "Split hosts"), and the one-time
//! tokens that enrol them (`studio app token`, `studio app join`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One enrolled studio-app.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EnrolledApp {
    pub id: String,
    pub name: String,
    #[schema(format = DateTime)]
    pub enrolled_at: String,
    /// When its certificate stops admitting it.
    #[schema(format = DateTime)]
    pub certificate_expires_at: String,
    /// SHA-256 of its certificate (what admits it).
    pub certificate_sha256: String,
    /// Revoked: its certificate admits it no more.
    #[schema(format = DateTime)]
    pub revoked_at: Option<String>,
}

/// Every enrolled app, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AppList {
    pub apps: Vec<EnrolledApp>,
}

/// `POST /api/apps/tokens`: a one-time app join token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewAppToken {
    /// How long it may be used: `30m`, `1h`, `2d` (at most 7 days; default `1h`).
    #[serde(default)]
    pub ttl: Option<String>,
}

/// An app join token, shown once: studiod keeps only its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AppTokenCreated {
    /// Pass to `studio app join --token`; it also pins studiod's authority.
    pub token: String,
    #[schema(format = DateTime)]
    pub expires_at: String,
    /// Where apps connect (`host:port` of studiod's apps listener).
    pub server: String,
}
