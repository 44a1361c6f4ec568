//! The manifest (`manifest.json`): what an archive holds, by member, with each member's
//! size and SHA-256; and the archive's kind.

use std::{collections::BTreeMap, fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// What a retention chunk pruned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Finished runs, with their transitions, approvals, tasks and log folders.
    Runs,
    /// The log folders of runs that stay.
    Logs,
    /// Rows of the evidence log behind its checkpoint.
    Evidence,
    /// Delivered and dead-lettered notifications.
    Notifications,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 4] = [Kind::Runs, Kind::Logs, Kind::Evidence, Kind::Notifications];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Runs => "runs",
            Kind::Logs => "logs",
            Kind::Evidence => "evidence",
            Kind::Notifications => "notifications",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                format!("{s:?} is not an archive kind (runs, logs, evidence, notifications)")
            })
    }
}

/// `manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`crate::FORMAT`].
    pub format: String,
    /// [`crate::FORMAT_VERSION`].
    pub format_version: u32,
    /// 32 lowercase hex digits: a UUID v7, so ids sort by when they were made.
    pub archive_id: String,
    pub kind: Kind,
    pub created_at_ms: i64,
    /// The version of Studio that wrote it.
    pub studio_version: String,
    /// Rows in each `rows/<table>.jsonl`.
    pub tables: BTreeMap<String, u64>,
    /// Rows in each `preimages/<table>.jsonl`.
    pub preimages: BTreeMap<String, u64>,
    /// How many `logs/<run_id>/<file>` members there are.
    pub log_files: u64,
    /// Every member but the manifest, in the order written.
    pub members: Vec<MemberEntry>,
    /// For an evidence archive, the stretch of the chain it holds; `null` otherwise.
    pub evidence: Option<EvidenceSpan>,
}

/// One member as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberEntry {
    pub name: String,
    /// Its size, uncompressed.
    pub bytes: u64,
    /// SHA-256 of its uncompressed bytes, in lowercase hex.
    pub sha256: String,
    /// How many rows (lines) it holds: present for `.jsonl` members only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
}

/// The stretch of the evidence chain an evidence archive holds: its rows follow the row
/// whose chain hash is `previous_chain_sha256` (64 zeros for the first row of the log),
/// run from `first_seq` to `last_seq` without a gap, and end at `last_chain_sha256`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceSpan {
    pub previous_chain_sha256: String,
    pub first_seq: i64,
    pub last_seq: i64,
    pub last_chain_sha256: String,
}

impl Manifest {
    /// The rows of every `rows/` member together.
    pub fn row_count(&self) -> u64 {
        self.tables.values().sum()
    }

    /// The listed entry of member `name`.
    pub fn member(&self, name: &str) -> Option<&MemberEntry> {
        self.members.iter().find(|m| m.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_spell_as_they_serialize() {
        for kind in Kind::ALL {
            assert_eq!(kind.as_str().parse::<Kind>(), Ok(kind));
            assert_eq!(
                serde_json::to_value(kind).ok(),
                Some(serde_json::Value::String(kind.as_str().into()))
            );
        }
        assert!("Runs".parse::<Kind>().is_err());
    }
}
