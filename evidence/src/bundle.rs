//! A bundle: JSON lines, a header then one sealed row per line. The header states the
//! chain hash the rows follow (64 zeros from genesis), how many there are and the chain
//! hash of the last, under a MAC: a bundle cut short, or started elsewhere than it says,
//! does not verify.

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};
use serde_json::json;
use studio_contract::secret::hex;

use crate::{
    canonical::canonical,
    chain::{Broken, Key, Sealed, Verified, digest_of, verify},
};

/// The header's `format`.
pub const FORMAT: &str = "studio-evidence/1";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    /// The chain hash of the row before the first one in the bundle.
    pub previous_chain_sha256: String,
    pub rows: usize,
    /// The chain hash of the last row (the previous one when there are none).
    pub last_chain_sha256: String,
    /// HMAC-SHA256 over the canonical JSON of the four fields above.
    pub mac: String,
}

impl Header {
    fn signed_bytes(&self) -> Vec<u8> {
        let fields = json!({
            "format": self.format,
            "previous_chain_sha256": self.previous_chain_sha256,
            "rows": self.rows,
            "last_chain_sha256": self.last_chain_sha256,
        });
        // Strings and an integer: always canonical.
        canonical(&fields).unwrap_or_default()
    }
}

/// Writes `rows`, which follow the row whose chain hash is `previous`, as a bundle.
pub fn write_bundle(
    out: &mut impl Write,
    previous: [u8; 32],
    rows: &[Sealed],
    key: &Key,
) -> std::io::Result<()> {
    let last = rows
        .last()
        .map_or_else(|| hex(&previous), |r| r.chain_sha256.clone());
    let mut header = Header {
        format: FORMAT.into(),
        previous_chain_sha256: hex(&previous),
        rows: rows.len(),
        last_chain_sha256: last,
        mac: String::new(),
    };
    header.mac = key.sign(&header.signed_bytes());
    serde_json::to_writer(&mut *out, &header)?;
    out.write_all(b"\n")?;
    for row in rows {
        serde_json::to_writer(&mut *out, row)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Reads a bundle: its header and rows. A line that is not what it should be is
/// [`Broken`] at its row (position 0 for the header).
pub fn read_bundle(input: impl BufRead) -> Result<(Header, Vec<Sealed>), Broken> {
    let mut lines = input.lines();
    let unreadable = |position: usize, what: String| Broken {
        position,
        seq: 0,
        what,
        not_a_bundle: true,
    };
    let first = lines
        .next()
        .ok_or_else(|| unreadable(0, "the bundle is empty".into()))?
        .map_err(|e| unreadable(0, format!("cannot read the header: {e}")))?;
    let header: Header = serde_json::from_str(&first)
        .map_err(|e| unreadable(0, format!("the header is not a bundle header: {e}")))?;
    if header.format != FORMAT {
        return Err(unreadable(
            0,
            format!("format {:?}, not {FORMAT:?}", header.format),
        ));
    }
    let mut rows = Vec::with_capacity(header.rows.min(1 << 20));
    for (i, line) in lines.enumerate() {
        let line = line.map_err(|e| unreadable(i + 1, format!("cannot read it: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let row: Sealed = serde_json::from_str(&line)
            .map_err(|e| unreadable(i + 1, format!("not an evidence row: {e}")))?;
        rows.push(row);
    }
    Ok((header, rows))
}

/// Verifies a bundle: its rows from the chain hash its header states, and that header
/// against them; with `key`, every MAC.
pub fn verify_bundle(input: impl BufRead, key: Option<&Key>) -> Result<Verified, Broken> {
    let (header, rows) = read_bundle(input)?;
    let at_header = |what: &str| Broken {
        position: 0,
        seq: 0,
        what: what.to_owned(),
        not_a_bundle: false,
    };
    let previous = digest_of(&header.previous_chain_sha256)
        .ok_or_else(|| at_header("its previous chain hash is not 64 hex digits"))?;
    if let Some(key) = key
        && !key.holds(&header.signed_bytes(), &header.mac)
    {
        return Err(at_header(
            "the header's MAC does not match: it was changed, or sealed with another key",
        ));
    }
    let verified = verify(previous, &rows, key)?;
    if verified.rows != header.rows {
        return Err(at_header(&format!(
            "it holds {} rows, its header says {}: rows were removed or added at the end",
            verified.rows, header.rows
        )));
    }
    if digest_of(&header.last_chain_sha256) != Some(verified.head) {
        return Err(at_header(
            "the last row's chain hash is not the one its header states",
        ));
    }
    Ok(verified)
}
