//! Canonical JSON: object keys in byte order, no insignificant whitespace, strings as
//! JSON escapes them, integers only. Written out here rather than trusted to
//! `serde_json`'s map order, which a feature elsewhere in a build could change.

use serde_json::Value;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CanonicalError {
    /// Evidence holds integers only: a float has no single canonical spelling.
    #[error("{0} is not an integer: evidence holds integers only")]
    NotAnInteger(String),
}

/// The canonical bytes of `value`.
pub fn canonical(value: &Value) -> Result<Vec<u8>, CanonicalError> {
    let mut out = Vec::with_capacity(256);
    write(value, &mut out)?;
    Ok(out)
}

fn write(value: &Value, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => {
            if !(n.is_i64() || n.is_u64()) {
                return Err(CanonicalError::NotAnInteger(n.to_string()));
            }
            out.extend_from_slice(n.to_string().as_bytes());
        }
        Value::String(s) => string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out)?;
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(key, out);
                out.push(b':');
                write(&map[key], out)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn string(s: &str, out: &mut Vec<u8>) {
    // A `str` always serialises.
    if let Ok(quoted) = serde_json::to_string(s) {
        out.extend_from_slice(quoted.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keys_are_sorted_at_every_depth_and_nothing_is_spaced() {
        let v = json!({"b": 1, "a": {"z": [true, null, "x\u{1}"], "m": -3}});
        assert_eq!(
            String::from_utf8(canonical(&v).expect("canonical")).expect("utf-8"),
            r#"{"a":{"m":-3,"z":[true,null,"x\u0001"]},"b":1}"#
        );
    }

    #[test]
    fn a_float_is_refused() {
        assert_eq!(
            canonical(&json!({"cost": 0.5})),
            Err(CanonicalError::NotAnInteger("0.5".into()))
        );
    }
}
