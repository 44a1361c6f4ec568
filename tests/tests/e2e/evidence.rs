//! `studio evidence verify`, the real binary on real files, without any studiod: a
//! bundle verifies, with and without the key; an edited one is named at its row (exit
//! 1); one checked with another key fails on its MACs; a file that is no bundle and a
//! key file that is no key are bad input (exit 2, one line).

use std::process::{Command, Output};

use serde_json::json;
use studio_contract::secret::hex;
use studio_evidence::{Chain, Entry, GENESIS, Key, write_bundle};
use studio_tests::{TempDir, bins};

const KEY: [u8; 32] = [7; 32];

fn verify(args: &[&std::path::Path]) -> Output {
    Command::new(&bins().studio)
        .args(["evidence", "verify"])
        .args(args)
        .env_remove("STUDIO_HOME")
        .output()
        .expect("run studio evidence verify")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn studio_evidence_verify_checks_a_bundle_offline() {
    let dir = TempDir::new("evidence");
    let mut chain = Chain::new(GENESIS, Key::new(&KEY));
    let rows: Vec<_> = (1..=6)
        .map(|seq| {
            chain
                .seal(Entry {
                    seq,
                    at_ms: 1_700_000_000_000 + seq,
                    kind: "requested".into(),
                    content: json!({"approval_id": format!("ap-{seq}")}),
                })
                .expect("seal")
        })
        .collect();
    let mut bytes = Vec::new();
    write_bundle(&mut bytes, GENESIS, &rows, &Key::new(&KEY)).expect("bundle");
    let bundle = dir.path().join("bundle.jsonl");
    std::fs::write(&bundle, &bytes).expect("write the bundle");
    let key = dir.path().join("evidence.key");
    std::fs::write(&key, format!("{}\n", hex(&KEY))).expect("write the key");

    let out = verify(&[&bundle, "--key".as_ref(), &key]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("6 rows verified") && text(&out.stdout).contains("MACs checked"),
        "{}",
        text(&out.stdout)
    );
    let out = verify(&[&bundle]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // An edit: exit 1, the row named.
    let edited = text(&bytes).replace("ap-4", "ap-9");
    let tampered = dir.path().join("edited.jsonl");
    std::fs::write(&tampered, edited).expect("write");
    let out = verify(&[&tampered]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("row 4 (seq 4)") && err.contains("edited"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // Another key: the MACs do not hold.
    let other = dir.path().join("other.key");
    std::fs::write(&other, hex(&[9; 32])).expect("write");
    let out = verify(&[&bundle, "--key".as_ref(), &other]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("MAC"), "{}", text(&out.stderr));

    // Bad input: no bundle, no key, no file.
    let junk = dir.path().join("junk.jsonl");
    std::fs::write(&junk, "hello\n").expect("write");
    for args in [
        vec![junk.as_path()],
        vec![bundle.as_path(), "--key".as_ref(), junk.as_path()],
        vec![dir.path().join("missing.jsonl").as_path()],
    ] {
        let out = verify(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(
            text(&out.stderr).trim().lines().count(),
            1,
            "{}",
            text(&out.stderr)
        );
    }
}
