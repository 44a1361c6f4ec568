//! Export: the stored schedules as ScheduleSet documents, one per project, such that
//! applying them changes nothing. Pure, like planning; anything that cannot be written
//! as a member is reported as blocked, never half-written.

use std::collections::{BTreeMap, BTreeSet};

use studio_api::{Blocked, ExportedDocument};
use studio_schedule::{
    ScheduleSpec,
    declaration::{API_VERSION, KIND, Metadata, ScheduleSet, valid_part},
};

use super::{compare::stored_spec, declare::DEFAULT_PROJECT, model::ScheduleRow};

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
    pub(crate) fn view(&self) -> studio_api::Export {
        studio_api::Export {
            documents: self
                .documents
                .iter()
                .map(|d| ExportedDocument {
                    project: d.project.clone(),
                    owner: d.document.owner_key(),
                    adopt: d.adopt,
                    document: d.document.clone(),
                })
                .collect(),
            blocked: self
                .blocked
                .iter()
                .map(|(name, reason)| Blocked {
                    name: name.clone(),
                    reason: reason.clone(),
                })
                .collect(),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, owner: Option<&str>) -> ScheduleRow {
        ScheduleRow {
            id: format!("id-{name}"),
            name: name.into(),
            spec: format!(
                r#"{{"name":"{name}","trigger":{{"every":"1h"}},"action":{{"kind":"command","executable":"true"}}}}"#
            ),
            enabled: true,
            trigger_kind: "every".into(),
            timezone: None,
            timezone_source: None,
            anchor_ms: 0,
            next_fire_at_ms: None,
            last_fired_at_ms: None,
            cadence_ms: None,
            max_runs: None,
            runs_counted: 0,
            created_at_ms: 0,
            updated_at_ms: 0,
            revision: 1,
            managed_by: owner.map(|_| "declaration".into()),
            owner_key: owner.map(Into::into),
            source: None,
            stats: Default::default(),
        }
    }

    fn names(e: &Export) -> Vec<(String, String, Vec<String>)> {
        e.documents
            .iter()
            .map(|d| {
                (
                    d.project.clone(),
                    d.document.metadata.name.clone(),
                    d.document.schedules.keys().cloned().collect(),
                )
            })
            .collect()
    }

    #[test]
    fn groups_by_project_and_names_the_owner() {
        let mut off = row("ops/backup", Some("ops/infra"));
        off.enabled = false;
        let rows = [
            row("demo/a", Some("demo/nightly")),
            row("demo/b", Some("demo/nightly")),
            row("demo/hand", None),
            row("mixed/x", Some("mixed/one")),
            row("mixed/y", Some("mixed/two")),
            row("solo", None),
            off,
        ];
        let e = export(&rows, None);
        assert_eq!(
            names(&e),
            [
                ("default".into(), "export".into(), vec!["solo".into()]),
                (
                    "demo".into(),
                    "nightly".into(),
                    vec!["a".into(), "b".into(), "hand".into()]
                ),
                (
                    "mixed".into(),
                    "export".into(),
                    vec!["x".into(), "y".into()]
                ),
                ("ops".into(), "infra".into(), vec!["backup".into()]),
            ]
        );
        assert_eq!(
            e.documents.iter().map(|d| d.adopt).collect::<Vec<_>>(),
            [true, true, false, false]
        );
        let ops = &e.documents[3].document.schedules["backup"];
        assert!(
            ops.name.is_none() && !ops.enabled,
            "name dropped, enabled: false kept"
        );
        assert!(e.blocked.is_empty());
        assert_eq!(names(&export(&rows, Some("demo")))[0].2.len(), 3);
        assert!(export(&rows, Some("nope")).documents.is_empty());
    }

    #[test]
    fn what_cannot_be_a_member_is_blocked() {
        let rows = [
            row("a/b/c", None),
            row("demo/.hidden", None),
            row("default/m", Some("default/jobs")),
            row("m", None),
        ];
        let e = export(&rows, None);
        let blocked: Vec<&str> = e.blocked.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(blocked, ["a/b/c", "demo/.hidden", "m"]);
        assert!(e.blocked[2].1.contains("default/m"), "{:?}", e.blocked[2]);
        assert_eq!(
            names(&e),
            [("default".into(), "jobs".into(), vec!["m".into()])],
            "the declared name keeps the member key; nothing half-written"
        );
        let view = e.view();
        assert_eq!(view.documents[0].owner, "default/jobs");
        assert_eq!(view.documents[0].document.api_version, "studio/v1");
        assert_eq!(view.blocked[0].name, "a/b/c");
    }
}
