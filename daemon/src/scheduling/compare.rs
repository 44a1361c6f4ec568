//! Authored specs compared: the canonical JSON of a spec (as stored, as declared) and
//! the field-level differences between two of them, with dotted paths.

use std::collections::BTreeSet;

use serde_json::{Map, Value};
use studio_schedule::ScheduleSpec;

use super::model::ScheduleRow;

pub(crate) use studio_api::FieldChange;

/// The authored spec of a row as compared and exported: canonical JSON with `enabled`
/// spelled out (the row's flag is the truth).
pub(crate) fn stored_spec(row: &ScheduleRow) -> Option<ScheduleSpec> {
    let mut spec: ScheduleSpec = serde_json::from_str(&row.spec).ok()?;
    spec.enabled = row.enabled;
    Some(spec)
}

/// Defaults the spec's serialisation leaves out (`enabled`, `policies`) are spelled out,
/// so a diff says `policies.deadline`, not the default policies appearing whole.
pub(crate) fn canonical(spec: &ScheduleSpec) -> Value {
    let mut v = serde_json::to_value(spec).unwrap_or(Value::Null);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("enabled".into(), Value::Bool(spec.enabled));
        let policies = serde_json::to_value(&spec.policies).unwrap_or(Value::Null);
        obj.insert("policies".into(), policies);
    }
    v
}

/// Field-level differences between two specs as JSON. A side that lacks an object the
/// other has counts as empty, so a new policy shows as `policies.deadline`, not as the
/// whole `policies`.
pub(crate) fn diff(from: &Value, to: &Value) -> Vec<FieldChange> {
    let mut out = Vec::new();
    diff_at("", from, to, &mut out);
    out
}

fn diff_at(path: &str, from: &Value, to: &Value, out: &mut Vec<FieldChange>) {
    if from == to {
        return;
    }
    let empty = Map::new();
    let as_object = |v: &'_ Value, other: &Value| -> Option<Map<String, Value>> {
        match (v, other) {
            (Value::Object(m), _) => Some(m.clone()),
            (Value::Null, Value::Object(_)) => Some(empty.clone()),
            _ => None,
        }
    };
    match (as_object(from, to), as_object(to, from)) {
        (Some(a), Some(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let sub = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let null = Value::Null;
                diff_at(
                    &sub,
                    a.get(key).unwrap_or(&null),
                    b.get(key).unwrap_or(&null),
                    out,
                );
            }
        }
        _ => out.push(FieldChange {
            path: path.to_owned(),
            from: from.clone(),
            to: to.clone(),
        }),
    }
}
