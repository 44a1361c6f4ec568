//! Evidence archives: the rows of `rows/evidence.jsonl` (the `evidence` table's columns)
//! as the evidence log's sealed rows, and their check as one stretch of its chain.

use serde_json::{Map, Value};
use studio_contract::secret::hex;
use studio_evidence::{Entry, Key, Sealed, digest_of, verify};

use crate::{Error, manifest::EvidenceSpan};

/// The member that holds an evidence archive's rows.
pub(crate) const ROWS: &str = "rows/evidence.jsonl";

/// The sealed row an `evidence` table row holds; `line` names it in an error.
pub(crate) fn sealed(line: usize, row: &Map<String, Value>) -> Result<Sealed, Error> {
    let bad = |what: String| Error::Invalid(format!("{ROWS} line {line}: {what}"));
    let int = |key: &str| {
        row.get(key)
            .and_then(Value::as_i64)
            .ok_or_else(|| bad(format!("{key} is not an integer")))
    };
    let text = |key: &str| {
        row.get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| bad(format!("{key} is not a string")))
    };
    let content: Value = serde_json::from_str(&text("content")?)
        .map_err(|e| bad(format!("content is not JSON: {e}")))?;
    Ok(Sealed {
        entry: Entry {
            seq: int("seq")?,
            at_ms: int("at_ms")?,
            kind: text("kind")?,
            content,
        },
        content_sha256: text("content_sha256")?,
        chain_sha256: text("chain_sha256")?,
        mac: text("mac")?,
    })
}

/// Checks that `rows` are the stretch of the chain `span` states: they follow
/// `previous_chain_sha256`, run from `first_seq` to `last_seq` with no gap and end at
/// `last_chain_sha256`; with `key`, every MAC too.
pub(crate) fn check(span: &EvidenceSpan, rows: &[Sealed], key: Option<&Key>) -> Result<(), Error> {
    let bad = |what: String| Err(Error::Invalid(what));
    let (Some(previous), Some(last)) = (
        digest_of(&span.previous_chain_sha256),
        digest_of(&span.last_chain_sha256),
    ) else {
        return bad("manifest.json: the evidence span's chain hashes are not 64 hex digits".into());
    };
    let (Some(first_row), Some(last_row)) = (rows.first(), rows.last()) else {
        return bad(format!("{ROWS} holds no row"));
    };
    if first_row.entry.seq != span.first_seq {
        return bad(format!(
            "{ROWS} line 1: seq {}, where the manifest says the span starts at seq {}",
            first_row.entry.seq, span.first_seq
        ));
    }
    let verified = verify(previous, rows, key).map_err(|b| {
        Error::Invalid(format!(
            "{ROWS} line {} (seq {}): {}",
            b.position, b.seq, b.what
        ))
    })?;
    if last_row.entry.seq != span.last_seq {
        return bad(format!(
            "{ROWS} line {}: seq {}, where the manifest says the span ends at seq {}",
            rows.len(),
            last_row.entry.seq,
            span.last_seq
        ));
    }
    if verified.head != last {
        return bad(format!(
            "{ROWS} ends at chain hash {}, the manifest says {}",
            hex(&verified.head),
            span.last_chain_sha256
        ));
    }
    Ok(())
}
