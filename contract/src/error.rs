//! The one error body of every HTTP API: `{"code": "...", "message": "..."}`, with
//! `errors[]` (each a field `path` and a `reason`) when a body failed validation.
//!
//! Codes are stable and machine-readable; messages are for humans (lowercase, no period).
//! [`Code::status`] is the one table from code to HTTP status.

use std::fmt;

use axum::{
    Json,
    response::{IntoResponse, Response},
};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

macro_rules! codes {
    ($($variant:ident = $text:literal => $status:ident,)*) => {
        /// Every stable error code, with the HTTP status it is answered with.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum Code { $(#[serde(rename = $text)] $variant,)* }

        impl utoipa::PartialSchema for Code {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .description(Some("a stable error code (each has one HTTP status)"))
                    .enum_values(Some([$($text,)*]))
                    .into()
            }
        }

        impl ToSchema for Code {}

        impl Code {
            pub const ALL: &[Code] = &[$(Code::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $text,)* }
            }

            pub fn status(self) -> StatusCode {
                match self { $(Code::$variant => StatusCode::$status,)* }
            }

            pub fn parse(s: &str) -> Option<Code> {
                match s { $($text => Some(Code::$variant),)* _ => None }
            }
        }

        impl fmt::Display for Code {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

codes! {
    BadRequest = "bad_request" => BAD_REQUEST,
    InvalidCursor = "invalid_cursor" => BAD_REQUEST,
    ValidationFailed = "validation_failed" => BAD_REQUEST,
    InvalidHost = "invalid_host" => BAD_REQUEST,
    Unauthorized = "unauthorized" => UNAUTHORIZED,
    Revoked = "revoked" => UNAUTHORIZED,
    Expired = "expired" => UNAUTHORIZED,
    SessionExpired = "session_expired" => UNAUTHORIZED,
    EpochEnded = "epoch_ended" => UNAUTHORIZED,
    PairingCodeInvalid = "pairing_code_invalid" => UNAUTHORIZED,
    OriginNotAllowed = "origin_not_allowed" => FORBIDDEN,
    DaemonTokenRequired = "daemon_token_required" => FORBIDDEN,
    Forbidden = "forbidden" => FORBIDDEN,
    DecisionRequired = "decision_required" => FORBIDDEN,
    HumanDecisionRequired = "human_decision_required" => FORBIDDEN,
    RequesterCannotApprove = "requester_cannot_approve" => FORBIDDEN,
    NotFound = "not_found" => NOT_FOUND,
    SessionNotFound = "session_not_found" => NOT_FOUND,
    ScheduleNotFound = "schedule_not_found" => NOT_FOUND,
    RunNotFound = "run_not_found" => NOT_FOUND,
    ApprovalNotFound = "approval_not_found" => NOT_FOUND,
    TaskNotFound = "task_not_found" => NOT_FOUND,
    WorkerNotFound = "worker_not_found" => NOT_FOUND,
    AppNotFound = "app_not_found" => NOT_FOUND,
    SecretNotFound = "secret_not_found" => NOT_FOUND,
    EndpointNotFound = "endpoint_not_found" => NOT_FOUND,
    NameTaken = "name_taken" => CONFLICT,
    Conflict = "conflict" => CONFLICT,
    MaxRunsReached = "max_runs_reached" => CONFLICT,
    BudgetExhausted = "budget_exhausted" => CONFLICT,
    RunNotActive = "run_not_active" => CONFLICT,
    ApprovalNotPending = "approval_not_pending" => CONFLICT,
    ApprovalExpired = "approval_expired" => CONFLICT,
    ApprovalStale = "approval_stale" => CONFLICT,
    IdempotencyConflict = "idempotency_conflict" => CONFLICT,
    TaskNotActive = "task_not_active" => CONFLICT,
    TaskNotFinished = "task_not_finished" => CONFLICT,
    SecretInUse = "secret_in_use" => CONFLICT,
    EndpointInUse = "endpoint_in_use" => CONFLICT,
    PlanHasErrors = "plan_has_errors" => CONFLICT,
    NotRunning = "not_running" => CONFLICT,
    Busy = "busy" => CONFLICT,
    OutputElsewhere = "output_elsewhere" => CONFLICT,
    MethodNotAllowed = "method_not_allowed" => METHOD_NOT_ALLOWED,
    PayloadTooLarge = "payload_too_large" => PAYLOAD_TOO_LARGE,
    UnsupportedMediaType = "unsupported_media_type" => UNSUPPORTED_MEDIA_TYPE,
    RateLimited = "rate_limited" => TOO_MANY_REQUESTS,
    QueueFull = "queue_full" => TOO_MANY_REQUESTS,
    InsufficientStorage = "insufficient_storage" => INSUFFICIENT_STORAGE,
    Internal = "internal" => INTERNAL_SERVER_ERROR,
    DaemonUnavailable = "daemon_unavailable" => SERVICE_UNAVAILABLE,
}

/// An API error: a stable code, a human message, and the fields at fault (if any).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct ApiError {
    pub code: Code,
    pub message: String,
    pub errors: Vec<FieldError>,
    /// What else the answer carries (`name` of a moved schedule, a refused `plan`).
    pub detail: Detail,
}

/// The optional parts of an error body beyond `errors`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Detail {
    pub name: Option<String>,
    pub plan: Option<Value>,
}

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            errors: Vec::new(),
            detail: Detail::default(),
        }
    }

    /// The answer to a path no route serves, the same on every listener.
    pub fn no_such_path() -> Self {
        Self::new(Code::NotFound, "no such path")
    }

    /// The answer to a method a served path does not take, the same on every listener.
    pub fn wrong_method() -> Self {
        Self::new(Code::MethodNotAllowed, "method not allowed on this path")
    }

    /// `400 validation_failed`, its message every problem joined by `; `.
    pub fn invalid(errors: Vec<FieldError>) -> Self {
        let message = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        Self {
            errors,
            ..Self::new(Code::ValidationFailed, message)
        }
    }

    pub fn with_detail(mut self, detail: Detail) -> Self {
        self.detail = detail;
        self
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            code: self.code,
            message: self.message.clone(),
            errors: self.errors.clone(),
            name: self.detail.name.clone(),
            plan: self.detail.plan.clone(),
        }
    }
}

/// One problem with a request body: where (`trigger.cron.expression`; empty for the
/// whole body) and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FieldError {
    pub path: String,
    pub reason: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}

/// The serialised form: every error answer of studiod, studio-app and the control socket.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct ErrorBody {
    pub code: Code,
    pub message: String,
    /// With `validation_failed`: every problem, each with its field path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// With a declaration `conflict`: the schedule that moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// With `plan_has_errors`: the plan that was refused (a `Plan`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = plan_ref)]
    pub plan: Option<Value>,
}

/// The refused plan's schema is the API's `Plan` (defined where the API's types are).
fn plan_ref() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    utoipa::openapi::Ref::from_schema_name("Plan").into()
}

impl ErrorBody {
    /// The error this body describes.
    pub fn into_error(self) -> ApiError {
        ApiError {
            code: self.code,
            message: self.message,
            errors: self.errors,
            detail: Detail {
                name: self.name,
                plan: self.plan,
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.code.status(), Json(self.body())).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for c in Code::ALL {
            assert_eq!(Code::parse(c.as_str()), Some(*c));
            let json = serde_json::to_string(c).expect("ser");
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(serde_json::from_str::<Code>(&json).expect("de"), *c);
        }
        assert_eq!(Code::EpochEnded.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            Code::DaemonUnavailable.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
