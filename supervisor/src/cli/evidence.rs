//! `studio evidence export [--since T]`: the evidence log as a bundle on standard output
//! (`GET /api/evidence`).
//!
//! `studio evidence verify BUNDLE [--key FILE] [--archives DIR]`: checks an exported
//! evidence bundle offline (docs/DECISIONS.md) — no studiod, no database, no home. A
//! bundle that verifies prints one line saying how many rows and from which chain hash;
//! one that does not names its first broken row and exits 1; a file that cannot be read
//! or is no bundle, or a key file that is no key, is bad input (exit 2).
//!
//! With `--archives`, the evidence archives retention wrote into DIR come first: each is
//! verified, and together with the bundle they must make one chain from the log's first
//! row — the first archive from genesis, each next one from where the one before ends,
//! and the bundle (exported after the prune) from where the last archive ends.

use std::{
    fs::File,
    io::{BufReader, Write},
    path::{Path, PathBuf},
};

use studio_archive::{EvidenceSpan, Kind};
use studio_contract::secret::{hex, unhex};
use studio_evidence::{GENESIS, Key, digest_of, read_bundle, verify_bundle};

use studio_contract::home::Home;

use super::{
    EvidenceCommand, Remote,
    client::{connect, encode},
};
use crate::Error;

pub(crate) async fn run(home: &Home, command: EvidenceCommand) -> Result<u8, Error> {
    match command {
        EvidenceCommand::Verify {
            bundle,
            key,
            archives,
        } => verify(&bundle, key.as_deref(), archives.as_deref()).map(|()| 0),
        EvidenceCommand::Export { since, daemon } => export(home, since, daemon).await.map(|()| 0),
    }
}

/// Streams the bundle studiod writes to standard output, as it arrives.
async fn export(home: &Home, since: Option<String>, daemon: Option<String>) -> Result<(), Error> {
    if let Some(t) = &since
        && t.parse::<jiff::Timestamp>().is_err()
    {
        return Err(Error::Usage(format!(
            "--since {t:?} is not an RFC 3339 instant (like 2026-12-01T00:00:00Z)"
        )));
    }
    let remote = Remote {
        daemon,
        ..Remote::default()
    };
    let client = connect(home, &remote).await?;
    let path = match &since {
        Some(t) => format!("/api/evidence?since={}", encode(t)),
        None => "/api/evidence".to_owned(),
    };
    let mut resp = client.get_raw(&path).await?;
    let mut out = std::io::stdout().lock();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| Error::Failed(format!("the bundle was cut short: {e}")))?
    {
        out.write_all(&chunk).map_err(Error::Output)?;
    }
    out.flush().map_err(Error::Output)
}

/// The key in `path`: 64 hex digits (surrounding whitespace ignored).
pub(crate) fn read_key(path: &Path) -> Result<Key, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Usage(format!("cannot read the key {}: {e}", path.display())))?;
    match unhex(text.trim()) {
        Some(bytes) if bytes.len() == 32 => Ok(Key::new(&bytes)),
        _ => Err(Error::Usage(format!(
            "{} is not an evidence key (64 hex digits)",
            path.display()
        ))),
    }
}

pub(crate) fn verify(
    bundle: &Path,
    key: Option<&Path>,
    archives: Option<&Path>,
) -> Result<(), Error> {
    let key = key.map(read_key).transpose()?;
    let macs = if key.is_some() {
        "hashes and MACs checked"
    } else {
        "hashes checked; pass --key to check the MACs too"
    };
    if let Some(dir) = archives {
        let c = chained(bundle, dir, key.as_ref())?;
        return outln!(
            "{}: {} rows from {} evidence archives and {} rows from the bundle verified as one \
             chain from the first row, ending at chain hash {} ({macs})",
            bundle.display(),
            c.archived_rows,
            c.archives,
            c.bundle_rows,
            hex(&c.head)
        );
    }
    let file = File::open(bundle)
        .map_err(|e| Error::Usage(format!("cannot read {}: {e}", bundle.display())))?;
    let v = verify_bundle(BufReader::new(file), key.as_ref()).map_err(|b| {
        let line = format!("{}: {b}", bundle.display());
        if b.not_a_bundle {
            Error::Usage(line)
        } else {
            Error::Failed(line)
        }
    })?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{}: {} rows verified, ending at chain hash {} ({macs})",
        bundle.display(),
        v.rows,
        hex(&v.head)
    )
    .map_err(Error::Output)
}

/// What a bundle behind its archives holds, once all of it verified as one chain.
#[derive(Debug, PartialEq, Eq)]
struct Chained {
    archives: usize,
    archived_rows: u64,
    bundle_rows: usize,
    /// The chain hash of the last row.
    head: [u8; 32],
}

/// Verifies the evidence archives in `dir` and `bundle` after them as one chain from
/// genesis. The first break in the chain's order is the answer, naming the archive or
/// the bundle row.
fn chained(bundle: &Path, dir: &Path, key: Option<&Key>) -> Result<Chained, Error> {
    let archives = evidence_archives(dir)?;
    let mut head = GENESIS;
    let mut next_seq = 1;
    let mut archived_rows = 0;
    for (path, listed) in &archives {
        let name = path.display();
        let verified = studio_archive::verify(path, key).map_err(|e| archive_failure(path, e))?;
        let span = verified.evidence.as_ref().unwrap_or(listed);
        if span.first_seq != next_seq {
            return Err(Error::Failed(format!(
                "{name}: starts at seq {}, where the chain goes on at seq {next_seq}: {}",
                span.first_seq,
                if span.first_seq > next_seq {
                    "an archive is missing before it"
                } else {
                    "it overlaps the one before it"
                }
            )));
        }
        if digest_of(&span.previous_chain_sha256) != Some(head) {
            return Err(Error::Failed(format!(
                "{name}: follows chain hash {}, where the chain before it ends at {}",
                span.previous_chain_sha256,
                hex(&head)
            )));
        }
        head = digest_of(&span.last_chain_sha256).unwrap_or_default();
        archived_rows += span
            .last_seq
            .saturating_sub(span.first_seq)
            .saturating_add(1) as u64;
        next_seq = span.last_seq.saturating_add(1);
    }
    let shown = bundle.display();
    let open = || {
        File::open(bundle)
            .map(BufReader::new)
            .map_err(|e| Error::Usage(format!("cannot read {shown}: {e}")))
    };
    let (header, rows) = read_bundle(open()?).map_err(|b| Error::Usage(format!("{shown}: {b}")))?;
    if digest_of(&header.previous_chain_sha256) != Some(head) {
        let end = match archives.last() {
            Some((path, span)) => format!(
                "the archives end at {} (seq {}, {})",
                hex(&head),
                span.last_seq,
                path.display()
            ),
            None => "there is no evidence archive, so it must start from genesis".to_owned(),
        };
        return Err(Error::Failed(format!(
            "{shown}: the bundle starts after chain hash {}, but {end}: rows are missing \
             between them, or the bundle was exported before they were pruned",
            header.previous_chain_sha256
        )));
    }
    if let Some(first) = rows.first()
        && first.entry.seq != next_seq
    {
        return Err(Error::Failed(format!(
            "{shown}: row 1 (seq {}): the chain goes on at seq {next_seq}",
            first.entry.seq
        )));
    }
    let verified = verify_bundle(open()?, key).map_err(|b| {
        let line = format!("{shown}: {b}");
        if b.not_a_bundle {
            Error::Usage(line)
        } else {
            Error::Failed(line)
        }
    })?;
    Ok(Chained {
        archives: archives.len(),
        archived_rows,
        bundle_rows: verified.rows,
        head: verified.head,
    })
}

/// The evidence archives in `dir` with the spans their manifests state, ordered by
/// their first seq. An archive whose manifest cannot be read is an error too: nobody
/// can tell whether it holds evidence.
fn evidence_archives(dir: &Path) -> Result<Vec<(PathBuf, EvidenceSpan)>, Error> {
    let listed = studio_archive::list(dir)
        .map_err(|e| Error::Usage(format!("cannot read {}: {e}", dir.display())))?;
    let mut archives = Vec::new();
    for (path, manifest) in listed {
        let manifest = manifest.map_err(|e| archive_failure(&path, e))?;
        if let Some(span) = manifest
            .evidence
            .filter(|_| manifest.kind == Kind::Evidence)
        {
            archives.push((path, span));
        }
    }
    archives.sort_by_key(|(_, span)| span.first_seq);
    Ok(archives)
}

/// An archive that was read and does not verify breaks the chain (exit 1); one that
/// cannot be read, or is no ZIP, is bad input.
pub(crate) fn archive_failure(path: &Path, e: studio_archive::Error) -> Error {
    let line = format!("{}: {e}", path.display());
    if e.is_invalid() {
        Error::Failed(line)
    } else {
        Error::Usage(line)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value, json};
    use studio_archive::Chunk;
    use studio_evidence::{Chain, Entry, Sealed, canonical, write_bundle};

    use super::*;
    use crate::testdir::TestDir;

    const KEY: [u8; 32] = [9; 32];

    /// `n` rows sealed from genesis.
    fn sealed(n: i64) -> Vec<Sealed> {
        let mut chain = Chain::new(GENESIS, Key::new(&KEY));
        (1..=n)
            .map(|seq| {
                chain
                    .seal(Entry {
                        seq,
                        at_ms: 1_000 * seq,
                        kind: "granted".into(),
                        content: json!({"approval_id": format!("a{seq}")}),
                    })
                    .expect("sealed")
            })
            .collect()
    }

    /// A sealed row as the `evidence` table holds it.
    fn table_row(s: &Sealed) -> Map<String, Value> {
        let content =
            String::from_utf8(canonical(&s.entry.content).expect("canonical")).expect("utf-8");
        json!({
            "seq": s.entry.seq, "at_ms": s.entry.at_ms, "kind": s.entry.kind,
            "content": content, "content_sha256": s.content_sha256,
            "chain_sha256": s.chain_sha256, "mac": s.mac, "approval_id": null, "run_id": null,
        })
        .as_object()
        .cloned()
        .expect("object")
    }

    /// An evidence archive in `dir` of `rows`, which follow `previous`.
    fn archive(dir: &Path, rows: &[Sealed], previous: [u8; 32]) -> PathBuf {
        let (first, last) = (rows.first().expect("rows"), rows.last().expect("rows"));
        let chunk = Chunk {
            kind: Kind::Evidence,
            created_at_ms: 1_796_120_430_456 + first.entry.seq,
            studio_version: "0.1.0".into(),
            tables: vec![("evidence".into(), rows.iter().map(table_row).collect())],
            preimages: vec![],
            logs: vec![],
            evidence: Some(EvidenceSpan {
                previous_chain_sha256: hex(&previous),
                first_seq: first.entry.seq,
                last_seq: last.entry.seq,
                last_chain_sha256: last.chain_sha256.clone(),
            }),
        };
        studio_archive::write(dir, &chunk).expect("written").path
    }

    fn bundle(dir: &Path, rows: &[Sealed], previous: [u8; 32]) -> PathBuf {
        let path = dir.join("bundle.jsonl");
        let mut out = Vec::new();
        write_bundle(&mut out, previous, rows, &Key::new(&KEY)).expect("bundle");
        std::fs::write(&path, out).expect("write bundle");
        path
    }

    fn head_of(row: &Sealed) -> [u8; 32] {
        digest_of(&row.chain_sha256).expect("a digest")
    }

    /// Rows 1–3 and 4–6 in two archives (and a runs archive beside them), 7–9 in a
    /// bundle exported after the prune: one chain.
    #[test]
    fn archives_and_a_bundle_make_one_chain() {
        let dir = TestDir::new("chain-ok");
        let rows = sealed(9);
        let archives = dir.path().join("archives");
        std::fs::create_dir(&archives).expect("archives");
        // Written second-first: the order is by seq, not by file name.
        archive(&archives, &rows[3..6], head_of(&rows[2]));
        archive(&archives, &rows[..3], GENESIS);
        let runs = Chunk {
            kind: Kind::Runs,
            created_at_ms: 0,
            studio_version: "0.1.0".into(),
            tables: vec![("runs".into(), vec![])],
            preimages: vec![],
            logs: vec![],
            evidence: None,
        };
        studio_archive::write(&archives, &runs).expect("runs archive");
        let bundle = bundle(dir.path(), &rows[6..], head_of(&rows[5]));
        let key = Key::new(&KEY);
        assert_eq!(
            chained(&bundle, &archives, Some(&key)).expect("one chain"),
            Chained {
                archives: 2,
                archived_rows: 6,
                bundle_rows: 3,
                head: head_of(&rows[8]),
            }
        );
        verify(&bundle, None, Some(&archives)).expect("verifies");
        // Without --archives the bundle alone still verifies from its own start.
        verify(&bundle, None, None).expect("alone");
        // The wrong key breaks the first archive's first row.
        let e = chained(&bundle, &archives, Some(&Key::new(&[1; 32]))).expect_err("wrong key");
        assert_eq!(e.exit_code(), 1);
        assert!(
            e.to_string()
                .contains("rows/evidence.jsonl line 1 (seq 1): its MAC does not match"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_archive_breaks_the_chain_where_it_was() {
        let dir = TestDir::new("chain-gap");
        let rows = sealed(9);
        let bundle = bundle(dir.path(), &rows[6..], head_of(&rows[5]));
        let archives = dir.path().join("archives");
        std::fs::create_dir(&archives).expect("archives");
        let first = archive(&archives, &rows[..3], GENESIS);
        // Rows 4–6 missing: the bundle does not follow the first archive.
        let e = chained(&bundle, &archives, None).expect_err("a gap");
        assert_eq!(e.exit_code(), 1);
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "{}: the bundle starts after chain hash",
                bundle.display()
            )),
            "{text}"
        );
        assert!(text.contains("(seq 3, "), "{text}");
        // Rows 5–6 archived without row 4.
        let third = archive(&archives, &rows[4..6], head_of(&rows[3]));
        let e = chained(&bundle, &archives, None).expect_err("a gap");
        assert_eq!(
            e.to_string(),
            format!(
                "{}: starts at seq 5, where the chain goes on at seq 4: an archive is missing before it",
                third.display()
            )
        );
        // Without the first archive, the chain does not start at genesis.
        std::fs::remove_file(&first).expect("remove");
        let e = chained(&bundle, &archives, None).expect_err("no start");
        assert!(
            e.to_string()
                .contains("starts at seq 5, where the chain goes on at seq 1"),
            "{e}"
        );
    }

    #[test]
    fn a_bundle_that_starts_elsewhere_is_refused() {
        let dir = TestDir::new("chain-start");
        let rows = sealed(6);
        let archives = dir.path().join("archives");
        std::fs::create_dir(&archives).expect("archives");
        archive(&archives, &rows[..3], GENESIS);
        // Exported before the prune: from genesis, not from the checkpoint.
        let whole = bundle(dir.path(), &rows, GENESIS);
        let e = chained(&whole, &archives, None).expect_err("wrong start");
        assert_eq!(e.exit_code(), 1);
        assert!(
            e.to_string().contains(&format!(
                "the bundle starts after chain hash {}, but the archives end at {}",
                "0".repeat(64),
                rows[2].chain_sha256
            )),
            "{e}"
        );
        // With no evidence archive, a bundle must start from genesis.
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).expect("empty");
        chained(&whole, &empty, None).expect("from genesis");
        let tail = bundle(dir.path(), &rows[3..], head_of(&rows[2]));
        let e = chained(&tail, &empty, None).expect_err("not from genesis");
        assert!(
            e.to_string().contains("there is no evidence archive"),
            "{e}"
        );
    }

    #[test]
    fn what_cannot_be_read_is_bad_input() {
        let dir = TestDir::new("chain-input");
        let rows = sealed(2);
        let bundle = bundle(dir.path(), &rows, GENESIS);
        let e = verify(&bundle, None, Some(&dir.path().join("absent"))).expect_err("no dir");
        assert_eq!(e.exit_code(), 2);
        let archives = dir.path().join("archives");
        std::fs::create_dir(&archives).expect("archives");
        std::fs::write(archives.join("garbage.zip"), b"no zip").expect("garbage");
        let e = chained(&bundle, &archives, None).expect_err("garbage");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(!e.to_string().contains('\n'));
        std::fs::remove_file(archives.join("garbage.zip")).expect("remove");
        let e = chained(&dir.path().join("absent.jsonl"), &archives, None).expect_err("no bundle");
        assert_eq!(e.exit_code(), 2);
    }
}
