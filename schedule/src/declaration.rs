//! The declaration document: a versioned set of schedules kept in a repository.
//!
//! Each member is exactly a [`ScheduleSpec`] without `name`: the stored name is
//! `<project>/<member>`, and the document's owner key is `<project>/<metadata.name>`.
//! See `docs/DECLARATIONS.md`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::spec::ScheduleSpec;

pub const API_VERSION: &str = "studio/v1";
pub const KIND: &str = "ScheduleSet";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSet {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    #[serde(default)]
    pub schedules: BTreeMap<String, ScheduleSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    pub name: String,
    pub project: String,
}

impl ScheduleSet {
    /// `<project>/<metadata.name>`: what owns the members this document applied.
    pub fn owner_key(&self) -> String {
        format!("{}/{}", self.metadata.project, self.metadata.name)
    }

    /// The stored name of a member.
    pub fn member_name(&self, member: &str) -> String {
        format!("{}/{member}", self.metadata.project)
    }
}

/// Whether `part` may be a project, document or member name: letters, digits, `-`, `_`
/// and `.`, 1 to 64 characters, not starting with `.`.
pub fn valid_part(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= 64
        && !part.starts_with('.')
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_owner() {
        let set: ScheduleSet = serde_json::from_str(
            r#"{"apiVersion":"studio/v1","kind":"ScheduleSet","metadata":{"name":"nightly","project":"demo"},
                "schedules":{"reindex":{"trigger":{"every":"1h"},"action":{"kind":"command","executable":"reindex"}}}}"#,
        )
        .expect("parse");
        assert_eq!(set.owner_key(), "demo/nightly");
        assert_eq!(set.member_name("reindex"), "demo/reindex");
        assert!(valid_part("nightly-jobs_2.0"));
        for bad in ["", ".hidden", "a/b", "a b", &"x".repeat(65)] {
            assert!(!valid_part(bad), "{bad:?}");
        }
        let unknown = serde_json::from_str::<ScheduleSet>(
            r#"{"apiVersion":"studio/v1","kind":"ScheduleSet","metadata":{"name":"n","project":"p","extra":1}}"#,
        );
        assert!(unknown.is_err(), "closed at every level");
    }
}
