//! Canonical JSON for rows and the manifest: object keys in byte order at every depth,
//! no whitespace, numbers and strings as serde_json writes them (floats allowed: a run's
//! `cost_usd` is one). The keys are sorted here rather than left to serde_json's map
//! order, which its `preserve_order` feature, turned on anywhere in a build, changes.

use std::io::{self, Write};

use serde_json::{Map, Value};

/// Writes the canonical form of `value` to `out`.
pub(crate) fn write_value(value: &Value, out: &mut impl Write) -> io::Result<()> {
    match value {
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_value(item, out)?;
            }
            out.write_all(b"]")
        }
        Value::Object(map) => write_object(map, out),
        scalar => serde_json::to_writer(out, scalar).map_err(io::Error::from),
    }
}

/// Writes the canonical form of the object `map` to `out`.
pub(crate) fn write_object(map: &Map<String, Value>, out: &mut impl Write) -> io::Result<()> {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.write_all(b"{")?;
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut *out, key).map_err(io::Error::from)?;
        out.write_all(b":")?;
        write_value(value, out)?;
    }
    out.write_all(b"}")
}

/// The canonical bytes of `value`.
pub(crate) fn to_vec(value: &Value) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(256);
    write_value(value, &mut out)?;
    Ok(out)
}
