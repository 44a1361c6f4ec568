//! studio-archive: the archives retention writes before it deletes a chunk of rows
//! (docs/OPERATIONS.md, "Retention and archives"), and their offline check. No database
//! and no runtime: studiod calls [`write`] from a blocking task, and the CLI reads
//! archives with no studiod at all.
//!
//! Format `studio-archive/1`: one ZIP file, every member deflated and flagged ZIP64.
//! `rows/<table>.jsonl` holds the deleted rows of a table and `preimages/<table>.jsonl`
//! the kept rows a prune changed, as they were before, one canonical JSON object per
//! line; `logs/<run_id>/<file>` holds a run's log files byte for byte; `manifest.json`,
//! written last, lists every other member with its size and SHA-256.
//!
//! Invariant: nothing is trusted before it is checked. A member name is one of those
//! three shapes or the archive is refused, so a hostile archive cannot name a path; a
//! member is read through a bound and hashed as it streams, so a lying ZIP header
//! cannot exhaust memory; an archive is renamed into place only once it verifies.

mod canonical;
mod error;
mod evidence;
mod hashing;
mod manifest;
mod member;
mod read;
mod write;

#[cfg(test)]
mod tests;

pub use error::Error;
pub use manifest::{EvidenceSpan, Kind, Manifest, MemberEntry};
pub use member::{valid_file_name, valid_run_id, valid_table};
pub use read::{Archive, list, verify};
pub use write::{Chunk, LogFile, Written, write};

/// The manifest's `format`.
pub const FORMAT: &str = "studio-archive/1";
/// The manifest's `format_version`.
pub const FORMAT_VERSION: u32 = 1;
/// The most `manifest.json` may hold.
pub const MANIFEST_CAP: u64 = 16 << 20;
/// The most a `.jsonl` member may hold, uncompressed.
pub const JSONL_CAP: u64 = 1 << 30;
