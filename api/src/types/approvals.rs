//! `/api/approvals` and `/api/evidence`: requests for a person's decision on a run of an
//! approval-gated schedule, the decisions, and the evidence rows sealed for each step.

use serde::{Deserialize, Serialize};
use studio_contract::role::Role;
use utoipa::ToSchema;

use crate::Run;

/// Where a request stands. `pending` waits for a person; `granted` lets its run launch
/// once, which makes it `consumed`; `voided` was replaced when the schedule's action
/// changed (`reason: approval_stale`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Granted,
    Denied,
    Expired,
    Voided,
    Consumed,
}

/// Every [`ApprovalStatus`] word, for filters and their documentation.
pub const APPROVAL_STATUSES: [&str; 6] = [
    "pending", "granted", "denied", "expired", "voided", "consumed",
];

impl ApprovalStatus {
    pub const ALL: [ApprovalStatus; 6] = [
        Self::Pending,
        Self::Granted,
        Self::Denied,
        Self::Expired,
        Self::Voided,
        Self::Consumed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Granted => "granted",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Voided => "voided",
            Self::Consumed => "consumed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// One request for a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Approval {
    pub id: String,
    pub run_id: String,
    pub schedule_id: Option<String>,
    pub schedule_name: Option<String>,
    pub status: ApprovalStatus,
    /// Exactly what will run: the action (executable and arguments, or the agent's
    /// prompt, model and profile), the working directory and the names of the
    /// environment variables set (never their values).
    #[schema(value_type = Object)]
    pub action: serde_json::Value,
    /// SHA-256 of the canonical JSON of `action`: what a grant is bound to.
    pub action_sha256: String,
    /// The session that asked for the run by hand, `daemon` for the daemon token;
    /// absent when the clock fired it.
    pub requested_by: Option<String>,
    #[schema(format = DateTime)]
    pub requested_at: String,
    #[schema(format = DateTime)]
    pub expires_at: String,
    /// The session that asked for the run may not decide it.
    pub distinct_from_requester: bool,
    /// The session that granted or denied it.
    pub decided_by: Option<String>,
    pub decided_role: Option<Role>,
    pub decided_origin: Option<String>,
    #[schema(format = DateTime)]
    pub decided_at: Option<String>,
    /// The decider's reason; `approval_stale` for a voided request.
    pub reason: Option<String>,
}

/// One page of requests, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalPage {
    pub approvals: Vec<Approval>,
    /// Pass back as `cursor` (with the same filters) for the next page; `null` at the end.
    pub next_cursor: Option<String>,
}

/// One request with the evidence rows of its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalDetail {
    pub approval: Approval,
    pub evidence: Vec<EvidenceRow>,
}

/// `POST /api/approvals/{id}/grant` and `…/deny`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// Why (kept with the decision and its evidence; at most 500 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The longest reason a decision keeps, in characters.
pub const MAX_REASON_CHARS: usize = 500;

/// What a decision did: the request as decided and its run (`queued` or already
/// `running` after a grant, `skipped` when its schedule's policies held it back,
/// `denied` after a denial).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Decided {
    pub approval: Approval,
    pub run: Run,
}

/// One row of the evidence log, as stored and as `studio evidence export` writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EvidenceRow {
    pub seq: i64,
    pub at_ms: i64,
    /// requested, granted, denied, expired, consumed, voided, launched.
    pub kind: String,
    #[schema(value_type = Object)]
    pub content: serde_json::Value,
    pub content_sha256: String,
    pub chain_sha256: String,
    pub mac: String,
}

/// `event: approval`: a request was raised or changed status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalEvent {
    pub id: String,
    pub run_id: String,
    pub schedule_id: Option<String>,
    pub schedule_name: Option<String>,
    pub status: ApprovalStatus,
}
