//! Archives changed after they were written, or made by someone else: each is refused,
//! naming what is wrong, and none can name a path outside its own members.

use std::fs;

use serde_json::json;

use super::{TestDir, forge, invalid, rebuild, runs_chunk};
use crate::{Archive, Error, list, verify, write};

fn written(dir: &TestDir) -> std::path::PathBuf {
    write(dir.path(), &runs_chunk(dir)).expect("written").path
}

#[test]
fn a_row_changed_inside_the_zip_names_its_member() {
    let dir = TestDir::new("tamper");
    let path = written(&dir);
    rebuild(
        &path,
        |name, mut bytes| {
            if name == "rows/run_transitions.jsonl" {
                let at = bytes.iter().position(|b| *b == b'1').expect("a digit");
                bytes[at] = b'2';
            }
            Some((name.to_owned(), bytes))
        },
        &[],
    );
    let what = invalid(verify(&path, None));
    assert!(
        what.starts_with("manifest lists rows/run_transitions.jsonl with SHA-256 "),
        "{what}"
    );
    assert!(what.contains(", the member has "), "{what}");
    assert!(Archive::open(&path).is_err());
}

#[test]
fn a_row_edited_into_bad_json_is_reported_as_the_edit() {
    let dir = TestDir::new("tamper-json");
    let path = written(&dir);
    rebuild(
        &path,
        |name, mut bytes| {
            if name == "rows/runs.jsonl" {
                bytes[0] = b'[';
            }
            Some((name.to_owned(), bytes))
        },
        &[],
    );
    let what = invalid(verify(&path, None));
    assert!(what.contains("rows/runs.jsonl with SHA-256"), "{what}");
}

#[test]
fn a_member_longer_than_listed_is_cut_off_at_its_bound() {
    let dir = TestDir::new("longer");
    let path = written(&dir);
    rebuild(
        &path,
        |name, mut bytes| {
            if name == "logs/0190aa/stdout.log" {
                bytes.extend(std::iter::repeat_n(0u8, 10 << 20));
            }
            Some((name.to_owned(), bytes))
        },
        &[],
    );
    assert_eq!(
        invalid(verify(&path, None)),
        "member logs/0190aa/stdout.log holds more than the 300000 bytes the manifest lists"
    );
}

#[test]
fn a_listed_member_missing_is_refused() {
    let dir = TestDir::new("missing");
    let path = written(&dir);
    rebuild(
        &path,
        |name, bytes| (name != "logs/0190aa/stderr.log").then(|| (name.to_owned(), bytes)),
        &[],
    );
    assert_eq!(
        invalid(verify(&path, None)),
        "manifest lists logs/0190aa/stderr.log, the archive has no such member"
    );
}

#[test]
fn a_member_the_manifest_does_not_list_is_refused() {
    let dir = TestDir::new("extra");
    let path = written(&dir);
    rebuild(
        &path,
        |n, b| Some((n.to_owned(), b)),
        &[("logs/0190aa/more.log", b"x")],
    );
    assert_eq!(
        invalid(verify(&path, None)),
        "member logs/0190aa/more.log is not listed in the manifest"
    );
    let listed = list(dir.path()).expect("listed");
    assert!(matches!(listed[0].1, Err(Error::Invalid(_))));
}

#[test]
fn names_that_leave_the_archive_are_refused() {
    for bad in [
        "logs/../../etc/passwd",
        "/abs",
        "logs/a/.hidden",
        "logs\\a\\b",
        "logs/a/b\0c",
        "rows/../x.jsonl",
    ] {
        let dir = TestDir::new("traversal");
        let path = written(&dir);
        rebuild(
            &path,
            |n, b| Some((n.to_owned(), b)),
            &[(bad, b"root::0:0")],
        );
        let what = invalid(verify(&path, None));
        assert!(
            what.ends_with(": not a valid member name"),
            "{bad:?}: {what}"
        );
        assert!(what.starts_with("member "), "{bad:?}: {what}");
    }
}

#[test]
fn a_listed_name_that_leaves_the_archive_is_refused_too() {
    let dir = TestDir::new("listed-traversal");
    let path = dir.path().join("forged.zip");
    forge(&path, &[("rows/runs.jsonl", b"{}\n")], |m| {
        m["members"][0]["name"] = json!("logs/a/../../x");
    });
    assert_eq!(
        invalid(verify(&path, None)),
        "manifest lists \"logs/a/../../x\": not a valid member name"
    );
}

#[test]
fn a_directory_entry_is_refused() {
    let dir = TestDir::new("directory");
    let path = written(&dir);
    let old = super::members(&path);
    let mut zip = zip::ZipWriter::new(fs::File::create(&path).expect("rewrite"));
    for (name, bytes) in old {
        zip.start_file(name, super::zip_options()).expect("start");
        std::io::Write::write_all(&mut zip, &bytes).expect("write");
    }
    zip.add_directory("logs/0190aa/", super::zip_options())
        .expect("directory");
    zip.finish().expect("finish");
    let what = invalid(verify(&path, None));
    assert_eq!(what, "member logs/0190aa/: not a valid member name");
}

#[test]
fn two_members_of_one_name_are_refused() {
    let dir = TestDir::new("duplicate");
    let path = dir.path().join("forged.zip");
    forge(
        &path,
        &[("rows/aa.jsonl", b"{}\n"), ("rows/ab.jsonl", b"{}\n")],
        |_| {},
    );
    // Same length, so every offset stays right: only the second name changes.
    let raw = fs::read(&path).expect("read");
    let patched = replace_all(&raw, b"rows/ab.jsonl", b"rows/aa.jsonl");
    fs::write(&path, patched).expect("write");
    assert_eq!(
        invalid(verify(&path, None)),
        "two members have the same name"
    );
}

fn replace_all(haystack: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = haystack.to_vec();
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            i += from.len();
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn every_line_must_be_a_json_object_ending_in_a_newline() {
    let dir = TestDir::new("lines");
    let path = dir.path().join("forged.zip");
    for (rows, what) in [
        (
            &b"{}\n[1]\n"[..],
            "rows/runs.jsonl line 2: not a JSON object",
        ),
        (b"{}\n\n", "rows/runs.jsonl line 2: not a JSON object"),
        (
            b"{}\n{\"a\":",
            "rows/runs.jsonl line 2: does not end with a newline",
        ),
        (b"{}", "rows/runs.jsonl line 1: does not end with a newline"),
        (
            b"{\"a\":1} x\n",
            "rows/runs.jsonl line 1: not a JSON object",
        ),
    ] {
        forge(&path, &[("rows/runs.jsonl", rows)], |_| {});
        assert_eq!(invalid(verify(&path, None)), what, "{rows:?}");
    }
    forge(&path, &[("rows/runs.jsonl", b"{}\n{}\n")], |_| {});
    verify(&path, None).expect("two rows verify");
}

/// A change made to an honest manifest.
type Tweak = Box<dyn Fn(&mut serde_json::Value)>;

#[test]
fn counts_that_do_not_add_up_are_refused() {
    let dir = TestDir::new("counts");
    let path = dir.path().join("forged.zip");
    let files: &[(&str, &[u8])] = &[("rows/runs.jsonl", b"{}\n{}\n"), ("logs/r/f", b"x")];
    let cases: Vec<(Tweak, &str)> = vec![
        (
            Box::new(|m| m["members"][0]["rows"] = json!(3)),
            "manifest.json: tables {\"runs\": 2} do not match its members' row counts {\"runs\": 3}",
        ),
        (
            Box::new(|m| {
                m["members"][0]["rows"] = json!(3);
                m["tables"]["runs"] = json!(3);
            }),
            "manifest lists rows/runs.jsonl with 3 rows, the member has 2",
        ),
        (
            Box::new(|m| m["log_files"] = json!(2)),
            "manifest.json: log_files is 2, it lists 1 log members",
        ),
        (
            Box::new(|m| m["members"][1]["bytes"] = json!(0)),
            "member logs/r/f holds more than the 0 bytes the manifest lists",
        ),
        (
            Box::new(|m| m["members"][1]["bytes"] = json!(5)),
            "manifest lists logs/r/f with 5 bytes, the member has 1",
        ),
        (
            Box::new(|m| m["members"][0]["bytes"] = json!(2u64 << 30)),
            "manifest lists rows/runs.jsonl with 2147483648 bytes, more than the 1073741824 a member of its kind may hold",
        ),
        (
            Box::new(|m| m["format"] = json!("studio-archive/2")),
            "manifest.json: format studio-archive/2 version 1, not studio-archive/1 version 1",
        ),
        (
            Box::new(|m| m["kind"] = json!("evidence")),
            "manifest.json: an evidence archive without its span",
        ),
        (
            Box::new(|m| m["archive_id"] = json!("../x")),
            "manifest.json: archive_id \"../x\" is not 32 lowercase hex digits",
        ),
        (
            Box::new(|m| m["members"][1] = m["members"][0].clone()),
            "manifest lists rows/runs.jsonl twice",
        ),
    ];
    for (tweak, what) in cases {
        forge(&path, files, tweak);
        assert_eq!(invalid(verify(&path, None)), what);
    }
    forge(&path, files, |m| m["surprise"] = json!(1));
    assert!(invalid(verify(&path, None)).starts_with("manifest.json: unknown field `surprise`"));
    forge(&path, files, |_| {});
    verify(&path, None).expect("the honest one verifies");
}

#[test]
fn a_zip_cut_short_or_no_zip_at_all_fails_cleanly() {
    let dir = TestDir::new("truncated");
    let path = written(&dir);
    let raw = fs::read(&path).expect("read");
    for keep in [raw.len() / 2, raw.len() - 10, 3, 0] {
        let cut = dir.path().join("cut.zip");
        fs::write(&cut, &raw[..keep]).expect("cut");
        assert!(
            matches!(verify(&cut, None), Err(Error::NotAZip(_))),
            "{keep}: {:?}",
            verify(&cut, None)
        );
    }
    assert!(matches!(
        verify(&dir.path().join("absent.zip"), None),
        Err(Error::Io { .. })
    ));
}

#[test]
fn a_flipped_byte_in_the_compressed_data_is_refused() {
    let dir = TestDir::new("flipped");
    let path = written(&dir);
    let mut raw = fs::read(&path).expect("read");
    // Inside the big log's compressed data, well past its local header.
    let at = raw.len() / 3;
    raw[at] ^= 0x55;
    fs::write(&path, raw).expect("write");
    let err = verify(&path, None).expect_err("refused");
    assert!(err.is_invalid(), "{err:?}");
    assert!(err.to_string().contains("logs/0190aa/stdout.log"), "{err}");
}
