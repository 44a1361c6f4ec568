//! A bundle verifies as exported, from genesis or from any row; an edit, a deletion, an
//! insertion and a reordering are each caught at the first row they break, and rows
//! re-sealed without the key are caught by their MACs.

use serde_json::json;
use studio_evidence::{Broken, Chain, Entry, GENESIS, Key, Sealed, verify_bundle, write_bundle};

const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

fn entry(seq: i64) -> Entry {
    Entry {
        seq,
        at_ms: 1_700_000_000_000 + seq,
        kind: if seq % 2 == 0 { "granted" } else { "requested" }.into(),
        content: json!({"approval_id": format!("ap-{seq}"), "action_sha256": "ab".repeat(32)}),
    }
}

/// Ten rows from genesis.
fn log() -> Vec<Sealed> {
    let mut chain = Chain::new(GENESIS, Key::new(KEY));
    (1..=10)
        .map(|seq| chain.seal(entry(seq)).expect("seal"))
        .collect()
}

fn bundle(previous: [u8; 32], rows: &[Sealed]) -> Vec<u8> {
    let mut out = Vec::new();
    write_bundle(&mut out, previous, rows, &Key::new(KEY)).expect("write");
    out
}

fn check(bytes: &[u8], key: Option<&[u8]>) -> Result<usize, Broken> {
    let key = key.map(Key::new);
    verify_bundle(bytes, key.as_ref()).map(|v| v.rows)
}

#[test]
fn an_exported_bundle_verifies_with_and_without_the_key() {
    let rows = log();
    let bytes = bundle(GENESIS, &rows);
    assert_eq!(check(&bytes, Some(KEY)), Ok(10));
    assert_eq!(check(&bytes, None), Ok(10));
    let first = String::from_utf8(bytes).expect("utf-8");
    assert!(
        first
            .lines()
            .next()
            .expect("a header")
            .contains(&"0".repeat(64))
    );
}

#[test]
fn a_bundle_that_starts_after_genesis_verifies_from_the_hash_it_states() {
    let rows = log();
    let previous: [u8; 32] = studio_contract::secret::unhex(&rows[3].chain_sha256)
        .expect("hex")
        .try_into()
        .expect("32 bytes");
    assert_eq!(check(&bundle(previous, &rows[4..]), Some(KEY)), Ok(6));
    // Stated from elsewhere, it does not.
    assert_eq!(
        check(&bundle(GENESIS, &rows[4..]), Some(KEY)).map_err(|b| b.position),
        Err(1)
    );
}

#[test]
fn an_edit_is_caught_at_the_edited_row() {
    let mut rows = log();
    rows[4].entry.content["approval_id"] = json!("ap-forged");
    let broken = check(&bundle(GENESIS, &rows), None).expect_err("caught");
    assert_eq!((broken.position, broken.seq), (5, 5));
    assert!(broken.what.contains("edited"), "{broken}");
}

#[test]
fn a_deletion_is_caught_at_the_row_after_it() {
    let mut rows = log();
    rows.remove(4);
    let broken = check(&bundle(GENESIS, &rows), None).expect_err("caught");
    assert_eq!((broken.position, broken.seq), (5, 6), "{broken}");
}

#[test]
fn an_insertion_is_caught_where_it_was_put() {
    let mut rows = log();
    // A row sealed by someone without the key, onto the right predecessor.
    let previous: [u8; 32] = studio_contract::secret::unhex(&rows[3].chain_sha256)
        .expect("hex")
        .try_into()
        .expect("32 bytes");
    let mut forger = Chain::new(previous, Key::new(b"not the key"));
    let forged = forger.seal(entry(5)).expect("seal");
    rows.insert(4, forged);
    let broken = check(&bundle(GENESIS, &rows), Some(KEY)).expect_err("caught");
    assert_eq!(broken.position, 5, "{broken}");
    // Without the key the forged row itself passes; the original after it does not.
    let broken = check(&bundle(GENESIS, &rows), None).expect_err("caught");
    assert_eq!(broken.position, 6, "{broken}");
}

#[test]
fn a_reordering_is_caught_at_the_first_row_out_of_place() {
    let mut rows = log();
    rows.swap(3, 6);
    let broken = check(&bundle(GENESIS, &rows), None).expect_err("caught");
    assert_eq!((broken.position, broken.seq), (4, 7), "{broken}");
}

#[test]
fn rows_resealed_after_an_edit_without_the_key_fail_their_macs() {
    let rows = log();
    let mut forger = Chain::new(GENESIS, Key::new(b"a guess"));
    let resealed: Vec<Sealed> = rows
        .iter()
        .map(|r| {
            let mut e = r.entry.clone();
            if e.seq == 3 {
                e.content["approval_id"] = json!("ap-forged");
            }
            forger.seal(e).expect("seal")
        })
        .collect();
    let mut bytes = Vec::new();
    write_bundle(&mut bytes, GENESIS, &resealed, &Key::new(b"a guess")).expect("write");
    // Consistent without the key: hashes need no secret.
    assert_eq!(check(&bytes, None), Ok(10));
    let broken = check(&bytes, Some(KEY)).expect_err("caught");
    assert_eq!(broken.position, 0, "the header's MAC first: {broken}");
}

#[test]
fn a_bundle_cut_short_is_caught_by_its_header() {
    let rows = log();
    let text = String::from_utf8(bundle(GENESIS, &rows)).expect("utf-8");
    let cut: String = text.lines().take(8).map(|l| format!("{l}\n")).collect();
    let broken = check(cut.as_bytes(), None).expect_err("caught");
    assert_eq!(broken.position, 0);
    assert!(broken.what.contains("header says 10"), "{broken}");
}
