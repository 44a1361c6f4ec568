//! Schedules as code: ScheduleSet documents against the stored schedules become a plan
//! (create, update, adopt, unchanged, disable, delete, error). Pure: no store, and "now"
//! is passed in, so every rule of `docs/DECLARATIONS.md` is unit-tested here; the HTTP layer reads
//! the rows, calls [`plan`] and hands [`Plan::writes`] to the store's one transaction.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Deserialize;
use serde_json::Value;
use studio_api::{ChangeKind, PlanChange};
use studio_schedule::{
    Context, FieldError, ScheduleSpec, Validated, Zone,
    declaration::{API_VERSION, KIND, Metadata, valid_part},
    validate,
};

use super::{
    compare::{FieldChange, canonical, diff, stored_spec},
    define::{new_row, revised_row, toggled_row},
    model::{MANAGED_BY_DECLARATION, ScheduleRow},
    store::PlanWrite,
};

/// Hand-made schedules with a bare name belong to this project (see export).
pub(crate) const DEFAULT_PROJECT: &str = "default";

/// The body of `POST /api/declarations/plan` and `/apply`. Closed, like the documents.
pub(crate) use studio_api::{DeclarationRequest as Request, SourcedDocument};

/// The envelope of a `ScheduleSet` (`studio_schedule::declaration`) with its members left
/// as JSON: each member is then parsed as the one `ScheduleSpec` on its own.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: Metadata,
    #[serde(default)]
    schedules: BTreeMap<String, Value>,
}

/// What validation needs from the daemon: its zone, its allow-list, the names of its
/// secrets and endpoints (`None` skips those checks) and "now".
#[derive(Debug, Clone, Copy)]
pub(crate) struct Env<'a> {
    pub default_zone: &'a Zone,
    pub allowlist: &'a [String],
    pub secrets: Option<&'a [String]>,
    pub endpoints: Option<&'a [String]>,
    pub now_ms: i64,
}

#[derive(Debug, Clone)]
pub(crate) enum Action {
    Create(ScheduleRow),
    Update {
        current: ScheduleRow,
        row: ScheduleRow,
        fields: Vec<FieldChange>,
    },
    /// A hand-made schedule taken over (with `adopt`), revised to the member if it differs.
    Adopt {
        current: ScheduleRow,
        row: ScheduleRow,
        fields: Vec<FieldChange>,
    },
    Unchanged(ScheduleRow),
    Disable {
        current: ScheduleRow,
        row: ScheduleRow,
    },
    Delete(ScheduleRow),
    Error {
        path: String,
        reason: String,
    },
}

impl Action {
    pub(crate) fn kind(&self) -> ChangeKind {
        match self {
            Self::Create(_) => ChangeKind::Create,
            Self::Update { .. } => ChangeKind::Update,
            Self::Adopt { .. } => ChangeKind::Adopt,
            Self::Unchanged(_) => ChangeKind::Unchanged,
            Self::Disable { .. } => ChangeKind::Disable,
            Self::Delete(_) => ChangeKind::Delete,
            Self::Error { .. } => ChangeKind::Error,
        }
    }

    /// The stored row this action starts from.
    fn current(&self) -> Option<&ScheduleRow> {
        match self {
            Self::Update { current, .. }
            | Self::Adopt { current, .. }
            | Self::Disable { current, .. } => Some(current),
            Self::Unchanged(current) | Self::Delete(current) => Some(current),
            Self::Create(_) | Self::Error { .. } => None,
        }
    }
}

/// One line of a plan.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    /// The stored name; `None` for a document that could not be read far enough to say.
    pub name: Option<String>,
    pub source: String,
    /// The owner key of the document; `None` when unreadable.
    pub owner: Option<String>,
    pub action: Action,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    pub changes: Vec<Change>,
}

impl Plan {
    pub(crate) fn has_errors(&self) -> bool {
        self.changes
            .iter()
            .any(|c| matches!(c.action, Action::Error { .. }))
    }

    /// The store writes that carry out this plan. `unchanged` writes nothing but is
    /// checked: a row edited since the plan was made fails the whole transaction.
    pub(crate) fn writes(&self) -> Vec<PlanWrite> {
        self.changes
            .iter()
            .filter_map(|c| match &c.action {
                Action::Create(row) => Some(PlanWrite::Insert(row.clone())),
                Action::Update { current, row, .. }
                | Action::Adopt { current, row, .. }
                | Action::Disable { current, row } => Some(PlanWrite::Update {
                    row: row.clone(),
                    expected_revision: current.revision,
                }),
                Action::Delete(current) => Some(PlanWrite::Delete {
                    row: current.clone(),
                    expected_revision: current.revision,
                }),
                Action::Unchanged(current) => Some(PlanWrite::Check {
                    id: current.id.clone(),
                    name: current.name.clone(),
                    expected_revision: current.revision,
                }),
                Action::Error { .. } => None,
            })
            .collect()
    }

    /// The API's shape: every change, and how many of each kind.
    pub(crate) fn view(&self) -> studio_api::Plan {
        let mut summary: BTreeMap<ChangeKind, u64> =
            ChangeKind::ALL.into_iter().map(|k| (k, 0)).collect();
        let changes = self
            .changes
            .iter()
            .map(|c| {
                *summary.entry(c.action.kind()).or_default() += 1;
                change_view(c)
            })
            .collect();
        studio_api::Plan { changes, summary }
    }
}

fn change_view(c: &Change) -> PlanChange {
    let (fields, path, reason) = match &c.action {
        Action::Update { fields, .. } | Action::Adopt { fields, .. } => {
            (Some(fields.clone()), None, None)
        }
        Action::Error { path, reason } => (None, Some(path.clone()), Some(reason.clone())),
        _ => (None, None, None),
    };
    PlanChange {
        name: c.name.clone(),
        action: c.action.kind(),
        owner: c.owner.clone(),
        source: c.source.clone(),
        revision: c.action.current().map(|r| r.revision),
        fields,
        path,
        reason,
    }
}

/// The first row of `expected` (name → revision from an earlier plan) that has moved
/// since, and why: `(name, message)`.
pub(crate) fn stale_expected(
    rows: &[ScheduleRow],
    expected: &BTreeMap<String, i64>,
) -> Option<(String, String)> {
    expected.iter().find_map(|(name, revision)| {
        let why = match rows.iter().find(|r| &r.name == name) {
            Some(r) if r.revision == *revision => return None,
            Some(r) => format!(
                "{name} is at revision {} now, not {revision}; nothing was written, plan again",
                r.revision
            ),
            None => format!("{name} no longer exists; nothing was written, plan again"),
        };
        Some((name.clone(), why))
    })
}

/// What one document adds to the plan, with the names and owners seen so far.
struct Planner<'a> {
    rows: HashMap<&'a str, &'a ScheduleRow>,
    all: &'a [ScheduleRow],
    env: Env<'a>,
    adopt: bool,
    prune: bool,
    /// Owner key → the source that declared it.
    owners: HashMap<String, String>,
    /// Stored name → the source that declared it.
    names: HashMap<String, String>,
    changes: Vec<Change>,
}

/// The plan of `req` against the stored `rows`.
pub(crate) fn plan(rows: &[ScheduleRow], req: &Request, env: Env<'_>) -> Plan {
    let mut p = Planner {
        rows: rows.iter().map(|r| (r.name.as_str(), r)).collect(),
        all: rows,
        env,
        adopt: req.adopt,
        prune: req.prune,
        owners: HashMap::new(),
        names: HashMap::new(),
        changes: Vec::new(),
    };
    for doc in &req.documents {
        p.document(doc);
    }
    Plan { changes: p.changes }
}

fn parse_error(e: serde_path_to_error::Error<serde_json::Error>) -> (String, String) {
    let path = e.path().to_string();
    let path = if path == "." { String::new() } else { path };
    (path, e.into_inner().to_string())
}

fn sub(prefix: &str, path: &str) -> String {
    if path.is_empty() {
        prefix.to_owned()
    } else {
        format!("{prefix}.{path}")
    }
}

impl Planner<'_> {
    fn error(
        &mut self,
        name: Option<String>,
        src: &str,
        owner: Option<&str>,
        path: String,
        reason: String,
    ) {
        self.changes.push(Change {
            name,
            source: src.to_owned(),
            owner: owner.map(str::to_owned),
            action: Action::Error { path, reason },
        });
    }

    fn push(&mut self, name: &str, src: &str, owner: &str, action: Action) {
        self.changes.push(Change {
            name: Some(name.to_owned()),
            source: src.to_owned(),
            owner: Some(owner.to_owned()),
            action,
        });
    }

    fn document(&mut self, doc: &SourcedDocument) {
        let src = doc.source.as_str();
        let envelope: Envelope = match serde_path_to_error::deserialize(&doc.document) {
            Ok(e) => e,
            Err(e) => {
                let (path, reason) = parse_error(e);
                return self.error(None, src, None, path, reason);
            }
        };
        let Metadata { name, project } = &envelope.metadata;
        let mut readable = true;
        for (path, part) in [("metadata.name", name), ("metadata.project", project)] {
            if !valid_part(part) {
                readable = false;
                let reason = "use 1 to 64 letters, digits, '-', '_' or '.', not starting with '.'";
                self.error(None, src, None, path.into(), reason.into());
            }
        }
        if !readable {
            return;
        }
        let owner = format!("{project}/{name}");
        if envelope.api_version != API_VERSION {
            let reason = format!("must be {API_VERSION}");
            self.error(None, src, Some(&owner), "apiVersion".into(), reason);
        }
        if envelope.kind != KIND {
            let reason = format!("must be {KIND}");
            self.error(None, src, Some(&owner), "kind".into(), reason);
        }
        if let Some(other) = self.owners.get(&owner) {
            let reason = format!("the owner key {owner} is also declared by {other}");
            return self.error(None, src, Some(&owner), "metadata.name".into(), reason);
        }
        self.owners.insert(owner.clone(), src.to_owned());
        let mut declared = BTreeSet::new();
        for (member, value) in &envelope.schedules {
            let name = format!("{project}/{member}");
            declared.insert(name.clone());
            self.member(src, &owner, project, member, value);
        }
        self.absent(src, &owner, &declared);
    }

    fn member(&mut self, src: &str, owner: &str, project: &str, member: &str, value: &Value) {
        let name = format!("{project}/{member}");
        let at = format!("schedules.{member}");
        if !valid_part(member) {
            let reason =
                "a member key is 1 to 64 letters, digits, '-', '_' or '.', not starting with '.'";
            return self.error(Some(name), src, Some(owner), at, reason.into());
        }
        if let Some(other) = self.names.get(&name) {
            let reason = format!("{name} is also declared by {other}");
            return self.error(Some(name), src, Some(owner), at, reason);
        }
        self.names.insert(name.clone(), src.to_owned());
        let mut spec: ScheduleSpec = match serde_path_to_error::deserialize(value) {
            Ok(spec) => spec,
            Err(e) => {
                let (path, reason) = parse_error(e);
                return self.error(Some(name), src, Some(owner), sub(&at, &path), reason);
            }
        };
        if spec.name.is_some() {
            let reason = format!("a member is named by its key ({name}); remove name");
            return self.error(Some(name), src, Some(owner), sub(&at, "name"), reason);
        }
        spec.name = Some(name.clone());
        let current = self.current(project, member, &name);
        if let Some(cur) = current {
            let refused = match (&cur.managed_by, &cur.owner_key) {
                (Some(_), Some(key)) if key == owner => None,
                (Some(_), key) => Some(format!(
                    "owned by {}; not by {owner}",
                    key.as_deref().unwrap_or("another document")
                )),
                (None, _) if self.adopt => None,
                (None, _) => Some(format!(
                    "created by hand; not owned by {owner} (apply with adopt to take it over)"
                )),
            };
            if let Some(reason) = refused {
                return self.error(Some(name), src, Some(owner), at, reason);
            }
        }
        let validated = match self.validate(spec, current) {
            Ok(v) => v,
            Err(errors) => {
                for e in errors {
                    self.error(
                        Some(name.clone()),
                        src,
                        Some(owner),
                        sub(&at, &e.path),
                        e.reason,
                    );
                }
                return;
            }
        };
        let action = self.action(src, owner, current, &validated);
        self.push(&name, src, owner, action);
    }

    /// The stored row a member names. In the default project, a hand-made schedule with
    /// the bare member name is the same schedule (that is how export writes it).
    fn current(&self, project: &str, member: &str, name: &str) -> Option<&ScheduleRow> {
        self.rows.get(name).copied().or_else(|| {
            (project == DEFAULT_PROJECT)
                .then(|| self.rows.get(member).copied())
                .flatten()
                .filter(|r| r.managed_by.is_none())
        })
    }

    /// Validates with the daemon's context. An `at` trigger that is already stored
    /// unchanged is not refused for lying in the past: re-applying must stay a no-op.
    fn validate(
        &self,
        spec: ScheduleSpec,
        current: Option<&ScheduleRow>,
    ) -> Result<Validated, Vec<FieldError>> {
        let mut ctx = Context {
            default_zone: self.env.default_zone,
            allowlist: Some(self.env.allowlist),
            secrets: self.env.secrets,
            endpoints: self.env.endpoints,
            now_ms: Some(self.env.now_ms),
            require_name: true,
        };
        let same_trigger = current
            .and_then(stored_spec)
            .is_some_and(|s| s.trigger == spec.trigger);
        match validate(spec.clone(), &ctx) {
            Err(_) if same_trigger => {
                ctx.now_ms = None;
                validate(spec, &ctx)
            }
            other => other,
        }
    }

    fn action(
        &self,
        src: &str,
        owner: &str,
        current: Option<&ScheduleRow>,
        v: &Validated,
    ) -> Action {
        let now = self.env.now_ms;
        let own = |row: &mut ScheduleRow| {
            row.managed_by = Some(MANAGED_BY_DECLARATION.to_owned());
            row.owner_key = Some(owner.to_owned());
            row.source = Some(src.to_owned());
        };
        let Some(current) = current else {
            let mut row = new_row(v, uuid::Uuid::now_v7().to_string(), now);
            own(&mut row);
            return Action::Create(row);
        };
        let before = stored_spec(current).map_or(Value::Null, |s| canonical(&s));
        let fields = diff(&before, &canonical(&v.spec));
        let mut row = revised_row(current, v, now);
        own(&mut row);
        match (current.managed_by.is_some(), fields.is_empty()) {
            (false, _) => {
                if fields.is_empty() {
                    // Only ownership changes: the timeline and cursor stay as they are.
                    row.anchor_ms = current.anchor_ms;
                    row.next_fire_at_ms = current.next_fire_at_ms;
                }
                Action::Adopt {
                    current: current.clone(),
                    row,
                    fields,
                }
            }
            (true, true) => Action::Unchanged(current.clone()),
            (true, false) => Action::Update {
                current: current.clone(),
                row,
                fields,
            },
        }
    }

    /// Owned schedules the document no longer declares: disabled, or deleted with prune.
    fn absent(&mut self, src: &str, owner: &str, declared: &BTreeSet<String>) {
        let gone: Vec<&ScheduleRow> = self
            .all
            .iter()
            .filter(|r| r.managed_by.is_some() && r.owner_key.as_deref() == Some(owner))
            .filter(|r| !declared.contains(&r.name))
            .collect();
        for current in gone {
            let action = if self.prune {
                Action::Delete(current.clone())
            } else if !current.enabled {
                Action::Unchanged(current.clone())
            } else {
                match toggled_row(current, false, self.env.default_zone, self.env.now_ms) {
                    Ok(row) => Action::Disable {
                        current: current.clone(),
                        row,
                    },
                    Err(e) => Action::Error {
                        path: String::new(),
                        reason: format!("cannot disable: {e}"),
                    },
                }
            };
            self.push(&current.name, src, owner, action);
        }
    }
}

#[cfg(test)]
#[path = "declare_tests.rs"]
mod tests;
