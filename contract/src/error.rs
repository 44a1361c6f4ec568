//! The one error body of every HTTP API: `{"code": "...", "message": "..."}`.
//!
//! Codes are stable and machine-readable; messages are for humans (lowercase, no period).

use axum::{
    Json,
    response::{IntoResponse, Response},
};
use http::StatusCode;
use serde::{Deserialize, Serialize};

macro_rules! codes {
    ($($variant:ident = $text:literal => $status:ident,)*) => {
        /// Every stable error code, with the HTTP status it is answered with.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code { $($variant,)* }

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
    NotFound = "not_found" => NOT_FOUND,
    SessionNotFound = "session_not_found" => NOT_FOUND,
    ScheduleNotFound = "schedule_not_found" => NOT_FOUND,
    RunNotFound = "run_not_found" => NOT_FOUND,
    NameTaken = "name_taken" => CONFLICT,
    Conflict = "conflict" => CONFLICT,
    MaxRunsReached = "max_runs_reached" => CONFLICT,
    BudgetExhausted = "budget_exhausted" => CONFLICT,
    RunNotActive = "run_not_active" => CONFLICT,
    PlanHasErrors = "plan_has_errors" => CONFLICT,
    MethodNotAllowed = "method_not_allowed" => METHOD_NOT_ALLOWED,
    PayloadTooLarge = "payload_too_large" => PAYLOAD_TOO_LARGE,
    UnsupportedMediaType = "unsupported_media_type" => UNSUPPORTED_MEDIA_TYPE,
    RateLimited = "rate_limited" => TOO_MANY_REQUESTS,
    Internal = "internal" => INTERNAL_SERVER_ERROR,
    DaemonUnavailable = "daemon_unavailable" => SERVICE_UNAVAILABLE,
}

/// An API error: a stable code and a human message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct ApiError {
    pub code: Code,
    pub message: String,
}

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            code: self.code.as_str().to_owned(),
            message: self.message.clone(),
        }
    }
}

/// The serialised form.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
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
        }
        assert_eq!(Code::EpochEnded.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            Code::DaemonUnavailable.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
