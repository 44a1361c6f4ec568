//! Export: the stored schedules as ScheduleSet documents, one per project, such that
//! applying them changes nothing. Pure, like planning; anything that cannot be written
//! as a member is reported as blocked, never half-written.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use studio_schedule::{
    ScheduleSpec,
    declaration::{API_VERSION, KIND, Metadata, ScheduleSet, valid_part},
};

use super::{
    declare::{DEFAULT_PROJECT, stored_spec},
    model::ScheduleRow,
};

/// The document name of a project whose declared members do not share one owner.
pub(crate) const EXPORT_NAME: &str = "export";

/// One exported project.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Exported {
    pub project: String,
    pub document: ScheduleSet,
    /// Whether it holds hand-made schedules: applying it is then a no-op only with
    /// `adopt`, which takes them over (the first time).
    pub adopt: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Export {
    pub documents: Vec<Exported>,
    /// Name → why it is not in any document.
    pub blocked: Vec<(String, String)>,
}

impl Export {
    pub(crate) fn view(&self) -> Value {
        let documents: Vec<Value> = self
            .documents
            .iter()
            .map(|d| {
                json!({
                    "project": d.project,
                    "owner": d.document.owner_key(),
                    "adopt": d.adopt,
                    "document": d.document,
                })
            })
            .collect();
        let blocked: Vec<Value> = self
            .blocked
            .iter()
            .map(|(name, reason)| json!({ "name": name, "reason": reason }))
            .collect();
        json!({ "documents": documents, "blocked": blocked })
    }
}

/// Where a stored name goes: `(project, member key)`, or why it cannot be a member.
fn place(name: &str) -> Result<(&str, &str), String> {
    let (project, member) = match name.split_once('/') {
        Some(parts) => parts,
        None => (DEFAULT_PROJECT, name),
    };
    if member.contains('/') {
        return Err("not <project>/<member>: the name has more than two parts".into());
    }
    for part in [project, member] {
        if !valid_part(part) {
            return Err(format!(
                "{part:?} is not a valid project or member name (1 to 64 letters, digits, '-', '_' or '.')"
            ));
        }
    }
    Ok((project, member))
}

#[derive(Default)]
struct Group<'a> {
    members: BTreeMap<&'a str, (&'a ScheduleRow, ScheduleSpec)>,
}

/// Every stored schedule (of `project`, if given) as documents, or blocked.
pub(crate) fn export(rows: &[ScheduleRow], project: Option<&str>) -> Export {
    let mut groups: BTreeMap<&str, Group<'_>> = BTreeMap::new();
    let mut out = Export::default();
    // Declared `<project>/<member>` names first, so that a bare hand-made name that maps
    // onto the same member key is the one blocked.
    let mut ordered: Vec<&ScheduleRow> = rows.iter().collect();
    ordered.sort_by_key(|r| (!r.name.contains('/'), r.name.clone()));
    for row in ordered {
        let (p, member) = match place(&row.name) {
            Ok(placed) => placed,
            Err(reason) => {
                if project.is_none_or(|want| row.name.starts_with(&format!("{want}/"))) {
                    out.blocked.push((row.name.clone(), reason));
                }
                continue;
            }
        };
        if project.is_some_and(|want| want != p) {
            continue;
        }
        let Some(mut spec) = stored_spec(row) else {
            out.blocked
                .push((row.name.clone(), "the stored spec cannot be read".into()));
            continue;
        };
        spec.name = None;
        let group = groups.entry(p).or_default();
        if let Some((other, _)) = group.members.get(member) {
            let reason = format!(
                "maps to member {member:?} of project {p}, as {} does",
                other.name
            );
            out.blocked.push((row.name.clone(), reason));
            continue;
        }
        group.members.insert(member, (row, spec));
    }
    for (p, group) in groups {
        out.documents.push(document(p, group));
    }
    out.blocked.sort();
    out
}

fn document(project: &str, group: Group<'_>) -> Exported {
    let owners: BTreeSet<&str> = group
        .members
        .values()
        .filter(|(row, _)| row.managed_by.is_some())
        .filter_map(|(row, _)| row.owner_key.as_deref())
        .collect();
    // One declaring owner: the document is that owner's, so re-applying it changes
    // nothing; hand-made members join it only through an explicit adopt.
    let name = match owners.iter().next() {
        Some(only) if owners.len() == 1 => only
            .strip_prefix(&format!("{project}/"))
            .filter(|n| valid_part(n))
            .unwrap_or(EXPORT_NAME),
        _ => EXPORT_NAME,
    };
    let adopt = group
        .members
        .values()
        .any(|(row, _)| row.managed_by.is_none());
    Exported {
        project: project.to_owned(),
        adopt,
        document: ScheduleSet {
            api_version: API_VERSION.to_owned(),
            kind: KIND.to_owned(),
            metadata: Metadata {
                name: name.to_owned(),
                project: project.to_owned(),
            },
            schedules: group
                .members
                .into_iter()
                .map(|(member, (_, spec))| (member.to_owned(), spec))
                .collect(),
        },
    }
}
