//! `/api/declarations`: plan, apply and export ScheduleSet documents (docs/DECLARATIONS.md).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use studio_schedule::declaration::ScheduleSet;
use utoipa::ToSchema;

/// The body of a plan or an apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeclarationRequest {
    pub documents: Vec<SourcedDocument>,
    /// Delete owned schedules a document no longer declares (instead of disabling them).
    #[serde(default)]
    pub prune: bool,
    /// Take over hand-made schedules a document declares (instead of refusing them).
    #[serde(default)]
    pub adopt: bool,
    /// Name → revision from a previous plan: apply refuses if any has moved since.
    #[serde(default)]
    pub expected: BTreeMap<String, i64>,
}

/// One document and where it was read from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SourcedDocument {
    /// As the client names it (a path, for the CLI).
    pub source: String,
    /// A ScheduleSet, read member by member so that every problem is reported at once.
    #[schema(value_type = ScheduleSet)]
    pub document: Value,
}

/// What a plan does to one schedule.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Create,
    Update,
    Adopt,
    Unchanged,
    Disable,
    Delete,
    Error,
}

impl ChangeKind {
    pub const ALL: [ChangeKind; 7] = [
        Self::Create,
        Self::Update,
        Self::Adopt,
        Self::Unchanged,
        Self::Disable,
        Self::Delete,
        Self::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Update => "update",
            Self::Adopt => "adopt",
            Self::Unchanged => "unchanged",
            Self::Disable => "disable",
            Self::Delete => "delete",
            Self::Error => "error",
        }
    }
}

/// One field-level difference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FieldChange {
    /// Dotted: `trigger.cron.expression`.
    pub path: String,
    pub from: Value,
    pub to: Value,
}

/// One line of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanChange {
    /// The stored name; `null` for a document that could not be read far enough to say.
    pub name: Option<String>,
    pub action: ChangeKind,
    /// The owner key of the document; `null` when unreadable.
    pub owner: Option<String>,
    pub source: String,
    /// The stored schedule's revision, when there is one (pass back as `expected`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// For `update` and `adopt`: what differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<FieldChange>>,
    /// For `error`: where in the document, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The answer to a plan (and to an apply: what was done).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Plan {
    pub changes: Vec<PlanChange>,
    /// How many changes of each kind, every kind present.
    pub summary: BTreeMap<ChangeKind, u64>,
}

/// One exported document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ExportedDocument {
    pub project: String,
    /// Its owner key, `<project>/<metadata.name>`.
    pub owner: String,
    /// Whether applying it takes over hand-made schedules (pass `adopt`).
    pub adopt: bool,
    pub document: ScheduleSet,
}

/// A stored schedule no document can hold, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Blocked {
    pub name: String,
    pub reason: String,
}

/// `GET /api/declarations/export`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Export {
    pub documents: Vec<ExportedDocument>,
    pub blocked: Vec<Blocked>,
}
