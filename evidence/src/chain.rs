//! Rows, their seals, and the verification of a run of rows.

use ring::{digest, hmac};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use studio_contract::secret::{hex, unhex};

use crate::canonical::{CanonicalError, canonical};

/// The chain hash before the first row.
pub const GENESIS: [u8; 32] = [0; 32];

/// What a row records: what its content hash covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// 1 for the first row of the log, one more for each row after it.
    pub seq: i64,
    pub at_ms: i64,
    /// requested, granted, denied, expired, consumed, voided, launched.
    pub kind: String,
    /// Ids and facts; never an environment value.
    pub content: Value,
}

impl Entry {
    /// SHA-256 of the canonical JSON of the entry.
    pub fn content_hash(&self) -> Result<[u8; 32], CanonicalError> {
        let whole = json!({
            "seq": self.seq, "at_ms": self.at_ms, "kind": self.kind, "content": self.content,
        });
        Ok(sha256(&[&canonical(&whole)?]))
    }
}

/// A row as stored and exported: the entry and its three seals, in lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    #[serde(flatten)]
    pub entry: Entry,
    pub content_sha256: String,
    pub chain_sha256: String,
    pub mac: String,
}

/// The per-home evidence key (32 random bytes kept outside the database).
pub struct Key(hmac::Key);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    pub fn new(bytes: &[u8]) -> Self {
        Self(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    pub(crate) fn sign(&self, data: &[u8]) -> String {
        hex(hmac::sign(&self.0, data).as_ref())
    }

    pub(crate) fn holds(&self, data: &[u8], mac: &str) -> bool {
        unhex(mac).is_some_and(|tag| hmac::verify(&self.0, data, &tag).is_ok())
    }
}

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut ctx = digest::Context::new(&digest::SHA256);
    for part in parts {
        ctx.update(part);
    }
    let mut out = [0; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// A 32-byte digest from lowercase or uppercase hex.
pub fn digest_of(text: &str) -> Option<[u8; 32]> {
    unhex(text)?.try_into().ok()
}

/// Seals `entry` onto the row whose chain hash is `head` ([`GENESIS`] for the first):
/// how a store that keeps the head in its own table appends one row.
pub fn seal_after(head: [u8; 32], key: &Key, entry: Entry) -> Result<Sealed, CanonicalError> {
    let content = entry.content_hash()?;
    let chain = sha256(&[&head, &content]);
    Ok(Sealed {
        entry,
        content_sha256: hex(&content),
        chain_sha256: hex(&chain),
        mac: key.sign(&chain),
    })
}

/// The SHA-256 of `bytes`, in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&sha256(&[bytes]))
}

/// Appends rows: each new row is sealed onto the one before it.
pub struct Chain {
    head: [u8; 32],
    key: Key,
}

impl Chain {
    /// A chain whose last row has the chain hash `head` ([`GENESIS`] for an empty log).
    pub fn new(head: [u8; 32], key: Key) -> Self {
        Self { head, key }
    }

    /// Seals `entry` onto the chain and moves the head to it.
    pub fn seal(&mut self, entry: Entry) -> Result<Sealed, CanonicalError> {
        let sealed = seal_after(self.head, &self.key, entry)?;
        self.head = digest_of(&sealed.chain_sha256).unwrap_or_default();
        Ok(sealed)
    }

    /// The chain hash of the last row sealed.
    pub fn head(&self) -> [u8; 32] {
        self.head
    }
}

/// Where a run of rows stops verifying, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("row {position} (seq {seq}): {what}")]
pub struct Broken {
    /// 1 for the first row checked.
    pub position: usize,
    pub seq: i64,
    pub what: String,
    /// The input is no bundle at all (unreadable, or a line that is no header or row),
    /// rather than a bundle that does not verify.
    pub not_a_bundle: bool,
}

/// What a run of rows that verified holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub rows: usize,
    /// The chain hash of its last row (its start when it has none).
    pub head: [u8; 32],
    /// Whether every row's MAC was checked against the key.
    pub signed: bool,
}

/// Checks `rows`, which follow the row whose chain hash is `previous`: each row's
/// content against its hash, its place in the sequence and in the chain, and with `key`
/// its MAC. The first row that fails is the answer.
pub fn verify<'a>(
    previous: [u8; 32],
    rows: impl IntoIterator<Item = &'a Sealed>,
    key: Option<&Key>,
) -> Result<Verified, Broken> {
    let mut head = previous;
    let mut last_seq: Option<i64> = None;
    let mut count = 0;
    for (i, row) in rows.into_iter().enumerate() {
        let seq = row.entry.seq;
        let broken = |what: &str| Broken {
            position: i + 1,
            seq,
            what: what.to_owned(),
            not_a_bundle: false,
        };
        let content = row
            .entry
            .content_hash()
            .map_err(|e| broken(&e.to_string()))?;
        if digest_of(&row.content_sha256) != Some(content) {
            return Err(broken(
                "its content does not match its hash: the row was edited",
            ));
        }
        if let Some(before) = last_seq
            && seq != before + 1
        {
            return Err(broken(&format!(
                "it follows seq {before}: a row was deleted, inserted or moved here"
            )));
        }
        let chain = sha256(&[&head, &content]);
        if digest_of(&row.chain_sha256) != Some(chain) {
            return Err(broken(
                "its chain hash does not follow the row before it: a row was deleted, \
                 inserted or moved here",
            ));
        }
        if let Some(key) = key
            && !key.holds(&chain, &row.mac)
        {
            return Err(broken(
                "its MAC does not match: the row was sealed without this home's evidence key",
            ));
        }
        head = chain;
        last_seq = Some(seq);
        count += 1;
    }
    Ok(Verified {
        rows: count,
        head,
        signed: key.is_some(),
    })
}
