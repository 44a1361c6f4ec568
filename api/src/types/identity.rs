//! Who answers and who asks: `/health`, `/api/identity`, pairing and sessions.

use serde::{Deserialize, Serialize};
use studio_contract::role::Role;
use utoipa::ToSchema;

/// `GET /health`: the process is up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: String,
}

impl Health {
    pub fn ok() -> Self {
        Self {
            status: "ok".into(),
        }
    }
}

/// `GET /api/identity`: which Studio, which version, which epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Identity {
    /// Always `studio`.
    pub identity: String,
    pub version: String,
    /// This daemon run's epoch; every token is bound to one.
    pub epoch: String,
}

/// `POST /api/studio/pair`: a one-time pairing code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PairRequest {
    pub code: String,
}

/// The tokens a redeemed pairing code yields (studio-app keeps them in cookies).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Paired {
    /// The admission token (secret).
    pub token: String,
    /// The decision token, sent as `x-studio-decision-token` (secret).
    pub decision_token: String,
    pub epoch: String,
    /// The new session's id.
    pub principal: String,
    #[schema(format = DateTime)]
    pub decision_expires_at: String,
    /// When the admission token stops being accepted.
    #[schema(format = DateTime)]
    pub expires_at: String,
}

/// `POST /api/studio/disconnect`: the caller's own session is revoked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Disconnected {
    pub revoked: bool,
    pub principal: String,
}

/// A paired browser of the current epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Session {
    pub id: String,
    /// The Origin it paired from.
    pub origin: String,
    /// What it may do.
    pub role: Role,
    /// The browser and system it paired from ("Firefox 133 on Windows"), read from its
    /// `User-Agent`; absent when that named neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub last_seen_at: String,
    /// When its admission token stops being accepted.
    #[schema(format = DateTime)]
    pub expires_at: String,
    #[schema(format = DateTime)]
    pub revoked_at: Option<String>,
    /// Whether this is the caller's own session.
    pub current: bool,
}

/// `GET /api/studio/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Sessions {
    pub sessions: Vec<Session>,
}

/// `PATCH /api/studio/sessions/{id}`: a session's new role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionChange {
    pub role: Role,
}

/// `DELETE /api/studio/sessions/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionRevoked {
    pub revoked: bool,
    pub id: String,
}
