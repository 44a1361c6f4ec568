//! studio-evidence: the evidence log's rows and bundles (docs/DECISIONS.md), with no
//! database and no daemon — studiod seals rows with it as it records decisions, and
//! `studio evidence verify` checks an exported bundle offline.
//!
//! A row's `content_sha256` is SHA-256 over the canonical JSON of what it records;
//! `chain_sha256` = SHA-256(previous chain ‖ content hash) over the raw digests, the
//! first previous being [`GENESIS`]; `mac` = HMAC-SHA256(evidence key, chain hash). An
//! edit changes a content hash, and a deletion, an insertion or a reordering breaks the
//! chain at the first row that follows it; without the key, nobody can re-seal the rows
//! after an edit so that their MACs agree.

mod bundle;
mod canonical;
mod chain;

pub use bundle::{FORMAT, Header, read_bundle, verify_bundle, write_bundle};
pub use canonical::{CanonicalError, canonical};
pub use chain::{
    Broken, Chain, Entry, GENESIS, Key, Sealed, Verified, digest_of, seal_after, sha256_hex, verify,
};
