//! Canonical YAML for `studio schedule export`: the same set always renders to the same
//! bytes (keys sorted, whatever order serde_json keeps), defaults are left out, and the
//! text parses back to an equal set.

use serde_json::Value;

use crate::{
    declaration::ScheduleSet,
    spec::{MissedFire, Overlap},
};

/// Renders a set as block YAML with sorted keys and no default values.
pub fn render_yaml(set: &ScheduleSet) -> String {
    let mut value = match serde_json::to_value(set) {
        Ok(v) => v,
        // Only non-text map keys fail, and every map of a set is keyed by text.
        Err(_) => return String::new(),
    };
    if let Some(Value::Object(members)) = value.get_mut("schedules") {
        for member in members.values_mut() {
            drop_default_policies(member);
        }
    }
    let mut out = String::new();
    match &value {
        Value::Object(map) if !map.is_empty() => mapping(&mut out, map, 0),
        other => {
            scalar(&mut out, other);
            out.push('\n');
        }
    }
    out
}

/// `missed_fire` and `overlap` are written by serde even at their defaults (the spec's
/// canonical JSON keeps them); an export leaves them out like every other default.
fn drop_default_policies(member: &mut Value) {
    let Some(Value::Object(policies)) = member.get_mut("policies") else {
        return;
    };
    let defaults = [
        ("missed_fire", serde_json::to_value(MissedFire::default())),
        ("overlap", serde_json::to_value(Overlap::default())),
    ];
    for (key, default) in defaults {
        if let Ok(default) = default
            && policies.get(key) == Some(&default)
        {
            policies.remove(key);
        }
    }
    if policies.is_empty()
        && let Value::Object(m) = member
    {
        m.remove("policies");
    }
}

fn mapping(out: &mut String, map: &serde_json::Map<String, Value>, indent: usize) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for key in keys {
        let Some(value) = map.get(key) else { continue };
        out.push_str(&" ".repeat(indent));
        text(out, key);
        out.push(':');
        match value {
            Value::Object(m) if !m.is_empty() => {
                out.push('\n');
                mapping(out, m, indent + 2);
            }
            Value::Array(items) if !items.is_empty() => {
                out.push('\n');
                for item in items {
                    out.push_str(&" ".repeat(indent + 2));
                    out.push_str("- ");
                    scalar(out, item);
                    out.push('\n');
                }
            }
            other => {
                out.push(' ');
                scalar(out, other);
                out.push('\n');
            }
        }
    }
}

/// A value on one line: scalars as themselves, empty or nested collections in flow
/// style (JSON is valid flow YAML; the schema has no such nesting in sequences).
fn scalar(out: &mut String, value: &Value) {
    match value {
        Value::String(s) => text(out, s),
        Value::Object(m) if m.is_empty() => out.push_str("{}"),
        Value::Array(a) if a.is_empty() => out.push_str("[]"),
        other => out.push_str(&other.to_string()),
    }
}

/// Text plain when no YAML reader (1.1 or 1.2) could take it for anything else, else
/// double-quoted with every non-printable character escaped.
fn text(out: &mut String, s: &str) {
    if is_plain_safe(s) {
        out.push_str(s);
        return;
    }
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if is_printable(c) => out.push(c),
            c if u32::from(c) <= 0xFFFF => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08X}", u32::from(c))),
        }
    }
    out.push('"');
}

fn is_plain_safe(s: &str) -> bool {
    const WORDS: [&str; 10] = [
        "true", "false", "null", "yes", "no", "on", "off", "y", "n", "~",
    ];
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '/')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-'))
        && !WORDS.contains(&s.to_ascii_lowercase().as_str())
}

/// YAML's printable set, less the characters some readers take as breaks or marks.
fn is_printable(c: char) -> bool {
    matches!(c, ' '..='~' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
        && !matches!(c, '\u{2028}' | '\u{2029}' | '\u{FEFF}')
}
