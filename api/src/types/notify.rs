//! `/api/notify`: notification endpoints and their deliveries (docs/OPERATIONS.md,
//! "Notifications").

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What an endpoint receives: the event as JSON, or Slack's `{"text": …}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndpointFormat {
    #[default]
    Json,
    Slack,
}

impl EndpointFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Slack => "slack",
        }
    }
}

/// `POST /api/notify/endpoints`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEndpoint {
    /// 1 to 64 letters, digits, `_`, `.`, `-`, starting with a letter or digit.
    pub name: String,
    /// `http` or `https`; never one of this machine's own Studio listeners.
    pub url: String,
    #[serde(default)]
    pub format: EndpointFormat,
}

/// One endpoint (never its signing secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Endpoint {
    pub name: String,
    /// Its scheme, host and port, then `/…`: a webhook's path is often its credential,
    /// so it is never shown.
    pub url: String,
    pub format: EndpointFormat,
    #[schema(format = DateTime)]
    pub created_at: String,
    pub created_by: Option<String>,
    /// The schedules (by name) and unfinished tasks (`task ID`) whose rules send to it.
    pub used_by: Vec<String>,
}

/// An endpoint just made, with its signing secret: shown once, kept sealed.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EndpointCreated {
    pub endpoint: Endpoint,
    /// The HMAC-SHA256 key of `Studio-Signature` (64 hex digits).
    pub signing_secret: String,
}

impl std::fmt::Debug for EndpointCreated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointCreated")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Every endpoint, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EndpointList {
    pub endpoints: Vec<Endpoint>,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    Pending,
    Delivered,
    /// Every attempt failed: no more are made.
    Dead,
}

/// One attempt of a delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeliveryAttempt {
    pub n: i64,
    #[schema(format = DateTime)]
    pub at: String,
    pub took_ms: i64,
    /// The receiver's HTTP status, when one answered.
    pub status: Option<i64>,
    /// Why it failed, or the start of the receiver's answer.
    pub detail: Option<String>,
}

/// One notification and its attempts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Delivery {
    /// Also sent as `Studio-Delivery`: a receiver drops a repeat by it.
    pub id: String,
    pub endpoint: String,
    /// `failed`, `timed_out`, `worker_lost`, `awaiting_approval`,
    /// `succeeded_after_failure` or `test`.
    pub event: String,
    pub run_id: Option<String>,
    pub schedule_id: Option<String>,
    pub task_id: Option<String>,
    pub status: DeliveryStatus,
    #[schema(format = DateTime)]
    pub next_attempt_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub delivered_at: Option<String>,
    pub attempts: Vec<DeliveryAttempt>,
}

/// Deliveries, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeliveryList {
    pub deliveries: Vec<Delivery>,
}
