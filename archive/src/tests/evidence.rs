//! Evidence archives: a stretch of the chain verifies, with the key its MACs too; an
//! edited, removed or misplaced row is refused when the archive is written.

use serde_json::{Map, Value, json};
use studio_evidence::{Chain, Entry, GENESIS, Key, Sealed, canonical};

use super::{CREATED, TestDir, dir_names, invalid};
use crate::{Archive, Chunk, Error, EvidenceSpan, Kind, verify, write};

const KEY: [u8; 32] = [7; 32];

/// `n` rows sealed from genesis.
fn sealed(n: i64) -> Vec<Sealed> {
    let mut chain = Chain::new(GENESIS, Key::new(&KEY));
    (1..=n)
        .map(|seq| {
            chain
                .seal(Entry {
                    seq,
                    at_ms: 1_000 + seq,
                    kind: "granted".into(),
                    content: json!({"approval_id": format!("a{seq}"), "by": "ops"}),
                })
                .expect("sealed")
        })
        .collect()
}

/// A sealed row as the `evidence` table holds it.
fn table_row(s: &Sealed) -> Map<String, Value> {
    let content =
        String::from_utf8(canonical(&s.entry.content).expect("canonical")).expect("utf-8");
    super::object(json!({
        "seq": s.entry.seq, "at_ms": s.entry.at_ms, "kind": s.entry.kind, "content": content,
        "content_sha256": s.content_sha256, "chain_sha256": s.chain_sha256, "mac": s.mac,
        "approval_id": null, "run_id": "0190aa",
    }))
}

fn chunk(rows: &[Sealed], span: EvidenceSpan) -> Chunk {
    Chunk {
        kind: Kind::Evidence,
        created_at_ms: CREATED,
        studio_version: "0.1.0".into(),
        tables: vec![("evidence".into(), rows.iter().map(table_row).collect())],
        preimages: vec![],
        logs: vec![],
        evidence: Some(span),
    }
}

fn span_of(rows: &[Sealed], previous: &str) -> EvidenceSpan {
    EvidenceSpan {
        previous_chain_sha256: previous.to_owned(),
        first_seq: rows.first().map_or(0, |r| r.entry.seq),
        last_seq: rows.last().map_or(0, |r| r.entry.seq),
        last_chain_sha256: rows
            .last()
            .map(|r| r.chain_sha256.clone())
            .unwrap_or_default(),
    }
}

#[test]
fn a_stretch_of_the_chain_verifies_with_its_macs() {
    let dir = TestDir::new("evidence");
    let rows = sealed(5);
    // The second stretch: rows 3..=5, following row 2.
    let tail = &rows[2..];
    let written = write(
        dir.path(),
        &chunk(tail, span_of(tail, &rows[1].chain_sha256)),
    )
    .expect("written");
    assert!(written.path.file_name().is_some_and(|n| {
        n.to_string_lossy()
            .starts_with("evidence-20261201T102030Z-")
    }));
    verify(&written.path, Some(&Key::new(&KEY))).expect("MACs hold");
    let what = invalid(verify(&written.path, Some(&Key::new(&[8; 32]))));
    assert!(
        what.starts_with("rows/evidence.jsonl line 1 (seq 3): its MAC does not match"),
        "{what}"
    );
    let mut archive = Archive::open(&written.path).expect("opens");
    let (span, back) = archive.evidence().expect("read").expect("evidence");
    assert_eq!(span, span_of(tail, &rows[1].chain_sha256));
    assert_eq!(back, tail);
}

/// Each bad stretch is refused by `write`'s own check, and leaves no file behind.
#[test]
fn an_edited_removed_or_misplaced_row_is_refused() {
    let dir = TestDir::new("evidence-broken");
    let rows = sealed(4);
    let genesis = "0".repeat(64);
    let mut edited = rows.clone();
    edited[1].entry.content = json!({"approval_id": "a2", "by": "mallory"});
    let mut removed = rows.clone();
    removed.remove(1);
    let cases = [
        (
            chunk(&edited, span_of(&rows, &genesis)),
            "rows/evidence.jsonl line 2 (seq 2): its content does not match its hash: the row was edited",
        ),
        (
            chunk(&removed, span_of(&rows, &genesis)),
            "rows/evidence.jsonl line 2 (seq 3): it follows seq 1: a row was deleted, inserted or moved here",
        ),
        (
            chunk(&rows[1..], span_of(&rows[1..], &genesis)),
            "rows/evidence.jsonl line 1 (seq 2): its chain hash does not follow the row before it: a row was deleted, inserted or moved here",
        ),
        (
            chunk(
                &rows,
                EvidenceSpan {
                    first_seq: 2,
                    ..span_of(&rows, &genesis)
                },
            ),
            "rows/evidence.jsonl line 1: seq 1, where the manifest says the span starts at seq 2",
        ),
        (
            chunk(
                &rows,
                EvidenceSpan {
                    last_seq: 5,
                    ..span_of(&rows, &genesis)
                },
            ),
            "rows/evidence.jsonl line 4: seq 4, where the manifest says the span ends at seq 5",
        ),
        (
            chunk(&rows[..3], span_of(&rows, &genesis)),
            "rows/evidence.jsonl line 3: seq 3, where the manifest says the span ends at seq 4",
        ),
    ];
    for (chunk, what) in cases {
        assert_eq!(invalid(write(dir.path(), &chunk)), what);
        assert!(
            dir_names(dir.path()).is_empty(),
            "{:?}",
            dir_names(dir.path())
        );
    }
    let mut wrong_end = chunk(&rows, span_of(&rows, &genesis));
    if let Some(span) = wrong_end.evidence.as_mut() {
        span.last_chain_sha256 = rows[2].chain_sha256.clone();
    }
    assert!(
        invalid(write(dir.path(), &wrong_end))
            .starts_with("rows/evidence.jsonl ends at chain hash")
    );
    let mut no_rows = chunk(&rows, span_of(&rows, &genesis));
    no_rows.tables.clear();
    assert_eq!(
        invalid(write(dir.path(), &no_rows)),
        "an evidence archive without rows/evidence.jsonl"
    );
    let mut not_sealed = chunk(&rows, span_of(&rows, &genesis));
    not_sealed.tables[0].1[0].insert("content".into(), json!(7));
    assert_eq!(
        invalid(write(dir.path(), &not_sealed)),
        "rows/evidence.jsonl line 1: content is not a string"
    );
    assert!(matches!(
        write(
            dir.path(),
            &Chunk {
                evidence: None,
                ..chunk(&rows, span_of(&rows, &genesis))
            }
        ),
        Err(Error::Input(_))
    ));
    assert!(dir_names(dir.path()).is_empty());
}
