//! Notification rules of schedules and tasks (docs/OPERATIONS.md, "Notifications"):
//! which outcomes are sent to which endpoint, after how many failures in a row, and how
//! often while they go on.

use serde::{Deserialize, Serialize};
use studio_contract::error::FieldError;
use utoipa::ToSchema;

use crate::{Context, duration::parse_interval, validate::is_secret_name};

/// The most rules one schedule or task may have.
pub const MAX_RULES: usize = 16;
/// The longest cooldown.
const MAX_COOLDOWN_MS: i64 = 30 * 24 * 3_600_000;

/// What a rule sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NotifyOn {
    Failed,
    TimedOut,
    WorkerLost,
    AwaitingApproval,
    /// A success after failures in a row that had reached the rule's `after`.
    SucceededAfterFailure,
}

impl NotifyOn {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::WorkerLost => "worker_lost",
            Self::AwaitingApproval => "awaiting_approval",
            Self::SucceededAfterFailure => "succeeded_after_failure",
        }
    }

    /// A failure: it counts toward `after`, and a success after it is news.
    pub fn is_failure(self) -> bool {
        matches!(self, Self::Failed | Self::TimedOut | Self::WorkerLost)
    }
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// One rule: send `on` these outcomes to the endpoint `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotifyRule {
    pub on: Vec<NotifyOn>,
    /// An endpoint's name (`studio notify endpoint add`).
    pub to: String,
    /// Failures in a row before the first sending (default 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub after: u32,
    /// While failures go on, at most one sending per this interval (`1h`); without it,
    /// one sending per run of failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown: Option<String>,
}

impl NotifyRule {
    /// The cooldown in milliseconds (`None` without one, or one that does not parse).
    pub fn cooldown_ms(&self) -> Option<i64> {
        self.cooldown
            .as_deref()
            .and_then(|c| parse_interval(c).ok())
    }
}

/// Checks `rules` (at `notify`) against `ctx`'s endpoints when it knows them.
pub(crate) fn check_notify(rules: &[NotifyRule], ctx: &Context<'_>, errors: &mut Vec<FieldError>) {
    if rules.len() > MAX_RULES {
        errors.push(FieldError::new(
            "notify",
            format!("at most {MAX_RULES} rules"),
        ));
    }
    for (i, rule) in rules.iter().enumerate() {
        let path = |field: &str| format!("notify[{i}].{field}");
        if rule.on.is_empty() {
            errors.push(FieldError::new(
                path("on"),
                "name at least one of failed, timed_out, worker_lost, awaiting_approval, succeeded_after_failure",
            ));
        }
        if !is_secret_name(&rule.to) {
            errors.push(FieldError::new(
                path("to"),
                "an endpoint's name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit",
            ));
        } else if let Some(known) = ctx.endpoints
            && !known.iter().any(|k| k == &rule.to)
        {
            errors.push(FieldError::new(
                path("to"),
                format!(
                    "no endpoint is named {:?} (add one with `studio notify endpoint add {} URL`)",
                    rule.to, rule.to
                ),
            ));
        }
        if rule.after == 0 || rule.after > 1_000 {
            errors.push(FieldError::new(path("after"), "must be 1 to 1000"));
        }
        if let Some(c) = &rule.cooldown {
            match parse_interval(c) {
                Ok(ms) if ms > MAX_COOLDOWN_MS => {
                    errors.push(FieldError::new(path("cooldown"), "at most 30 days"));
                }
                Ok(_) => {}
                Err(why) => errors.push(FieldError::new(path("cooldown"), why)),
            }
        }
    }
}
