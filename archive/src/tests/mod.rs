//! The crate's tests: real archives in temporary directories, written, read back, and
//! rewritten through the `zip` writer as someone tampering with them would.

mod evidence;
mod hostile;

use std::{
    fs::{self, File},
    io::{Read, Write},
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
};

use serde_json::{Map, Value, json};
use zip::{CompressionMethod, ZipArchive, ZipWriter, write::SimpleFileOptions};

use crate::{Archive, Chunk, Error, Kind, LogFile, Manifest, list, verify, write};

/// A temporary directory, removed on drop.
pub(crate) struct TestDir(PathBuf);

impl TestDir {
    pub(crate) fn new(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("archive-{name}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create test dir");
        Self(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn object(value: Value) -> Map<String, Value> {
    value.as_object().cloned().expect("an object")
}

/// 2026-12-01T10:20:30.456Z
pub(crate) const CREATED: i64 = 1_796_120_430_456;

/// A runs chunk: rows of every JSON type a column holds, a preimage, and two logs
/// written under `dir/src`.
pub(crate) fn runs_chunk(dir: &TestDir) -> Chunk {
    let src = dir.path().join("src");
    fs::create_dir_all(&src).expect("src dir");
    let big: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(src.join("stdout.log"), &big).expect("log");
    fs::write(src.join("stderr.log"), b"").expect("log");
    let mut reversed = Map::new();
    for key in ["z", "m", "a"] {
        reversed.insert(key.into(), json!(key));
    }
    Chunk {
        kind: Kind::Runs,
        created_at_ms: CREATED,
        studio_version: "0.1.0".into(),
        tables: vec![
            (
                "runs".into(),
                vec![
                    object(json!({
                        "id": "0190aa", "attempt": 1, "big": i64::MIN, "huge": u64::MAX,
                        "cost_usd": 0.1 + 0.2, "tiny": 5e-324, "max": f64::MAX, "neg": -0.0,
                        "half": 12.5, "small": 1e-300, "error": null,
                        "name": "héllo — 日本語 🎉", "ctl": "a\u{1}\n\t\"\\/b", "ключ": "значение",
                    })),
                    reversed,
                ],
            ),
            (
                "run_transitions".into(),
                vec![object(json!({"run_id": "0190aa", "seq": 1}))],
            ),
            ("approvals".into(), vec![]),
        ],
        preimages: vec![(
            "runs".into(),
            vec![object(json!({"id": "0190ab", "chain_parent_id": "0190aa"}))],
        )],
        logs: vec![
            LogFile {
                run_id: "0190aa".into(),
                file: "stdout.log".into(),
                path: src.join("stdout.log"),
            },
            LogFile {
                run_id: "0190aa".into(),
                file: "stderr.log".into(),
                path: src.join("stderr.log"),
            },
        ],
        evidence: None,
    }
}

/// Every member of the ZIP at `path`, raw (test archives are small).
pub(crate) fn members(path: &Path) -> Vec<(String, Vec<u8>)> {
    let mut zip = ZipArchive::new(File::open(path).expect("open")).expect("a zip");
    (0..zip.len())
        .map(|i| {
            let mut file = zip.by_index(i).expect("member");
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).expect("read member");
            (file.name().expect("name").into_owned(), bytes)
        })
        .collect()
}

pub(crate) fn zip_options() -> SimpleFileOptions {
    SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .large_file(true)
}

/// Rewrites the ZIP at `path`: each member through `edit` (`None` drops it), then
/// `extra` members after them.
pub(crate) fn rebuild(
    path: &Path,
    mut edit: impl FnMut(&str, Vec<u8>) -> Option<(String, Vec<u8>)>,
    extra: &[(&str, &[u8])],
) {
    let old = members(path);
    let mut zip = ZipWriter::new(File::create(path).expect("rewrite"));
    for (name, bytes) in old {
        if let Some((name, bytes)) = edit(&name, bytes) {
            zip.start_file(name, zip_options()).expect("start");
            zip.write_all(&bytes).expect("write");
        }
    }
    for (name, bytes) in extra {
        zip.start_file(*name, zip_options()).expect("start");
        zip.write_all(bytes).expect("write");
    }
    zip.finish().expect("finish");
}

/// An archive at `path` of `members`, with an honest manifest (sizes, hashes, line
/// counts) that `tweak` may then change.
pub(crate) fn forge(path: &Path, files: &[(&str, &[u8])], tweak: impl FnOnce(&mut Value)) {
    let mut entries = Vec::new();
    let (mut tables, mut preimages, mut logs) = (Map::new(), Map::new(), 0);
    for (name, bytes) in files {
        let mut entry = json!({
            "name": name, "bytes": bytes.len(),
            "sha256": studio_evidence::sha256_hex(bytes),
        });
        let lines = bytes.iter().filter(|b| **b == b'\n').count();
        if let Some(t) = name
            .strip_prefix("rows/")
            .and_then(|n| n.strip_suffix(".jsonl"))
        {
            tables.insert(t.into(), json!(lines));
            entry["rows"] = json!(lines);
        } else if let Some(t) = name
            .strip_prefix("preimages/")
            .and_then(|n| n.strip_suffix(".jsonl"))
        {
            preimages.insert(t.into(), json!(lines));
            entry["rows"] = json!(lines);
        } else {
            logs += 1;
        }
        entries.push(entry);
    }
    let mut manifest = json!({
        "format": "studio-archive/1", "format_version": 1,
        "archive_id": "0123456789abcdef0123456789abcdef", "kind": "runs",
        "created_at_ms": CREATED, "studio_version": "0.1.0",
        "tables": tables, "preimages": preimages, "log_files": logs,
        "members": entries, "evidence": null,
    });
    tweak(&mut manifest);
    let mut zip = ZipWriter::new(File::create(path).expect("forge"));
    for (name, bytes) in files {
        zip.start_file(*name, zip_options()).expect("start");
        zip.write_all(bytes).expect("write");
    }
    zip.start_file("manifest.json", zip_options())
        .expect("start");
    zip.write_all(manifest.to_string().as_bytes())
        .expect("write");
    zip.finish().expect("finish");
}

/// The message of an `Error::Invalid`.
pub(crate) fn invalid<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    match result {
        Err(Error::Invalid(what)) => what,
        other => panic!("not Invalid: {other:?}"),
    }
}

#[test]
fn rows_logs_and_counts_come_back_as_written() {
    let dir = TestDir::new("round-trip");
    let out = dir.path().join("out");
    fs::create_dir(&out).expect("out dir");
    let chunk = runs_chunk(&dir);
    let written = write(&out, &chunk).expect("written");

    let name = written
        .path
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    let id = &written.manifest.archive_id;
    assert_eq!(name, format!("runs-20261201T102030Z-{id}.zip"));
    assert_eq!(id.len(), 32);
    assert_eq!(
        fs::metadata(&written.path)
            .expect("stat")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    assert_eq!(
        fs::metadata(&written.path).expect("stat").len(),
        written.bytes
    );
    assert_eq!(
        dir_names(&out),
        [name.as_str()],
        "no temporary file is left"
    );

    let m = &written.manifest;
    assert_eq!(
        (m.format.as_str(), m.format_version),
        ("studio-archive/1", 1)
    );
    assert_eq!(m.kind, Kind::Runs);
    assert_eq!(
        m.tables,
        [
            ("approvals".into(), 0),
            ("run_transitions".into(), 1),
            ("runs".into(), 2)
        ]
        .into()
    );
    assert_eq!(m.preimages, [("runs".into(), 1)].into());
    assert_eq!(m.log_files, 2);
    assert_eq!(m.row_count(), 3);
    let names: Vec<&str> = m.members.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "rows/runs.jsonl",
            "rows/run_transitions.jsonl",
            "rows/approvals.jsonl",
            "preimages/runs.jsonl",
            "logs/0190aa/stdout.log",
            "logs/0190aa/stderr.log",
        ]
    );
    assert_eq!(m.members[4].bytes, 300_000);

    let mut archive = Archive::open(&written.path).expect("opens");
    assert_eq!(archive.manifest(), m);
    for (table, rows) in &chunk.tables {
        assert_eq!(&archive.rows(table).expect("rows"), rows, "{table}");
    }
    assert_eq!(
        archive.preimages("runs").expect("preimages"),
        chunk.preimages[0].1
    );
    assert!(archive.rows("absent").expect("none").is_empty());
    assert_eq!(
        archive.log_files(),
        [
            ("0190aa".to_owned(), "stdout.log".to_owned()),
            ("0190aa".to_owned(), "stderr.log".to_owned())
        ]
    );
    for log in &chunk.logs {
        let mut copy = Vec::new();
        let n = archive
            .read_log(&log.run_id, &log.file, &mut copy)
            .expect("log");
        assert_eq!(copy, fs::read(&log.path).expect("source"));
        assert_eq!(n, copy.len() as u64);
    }
    assert!(matches!(
        archive.read_log("0190aa", "other.log", &mut Vec::new()),
        Err(Error::Input(_))
    ));
    assert_eq!(archive.evidence().expect("no evidence"), None);
    assert_eq!(&verify(&written.path, None).expect("verifies"), m);
}

pub(crate) fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn rows_and_the_manifest_are_canonical_json_lines() {
    let dir = TestDir::new("canonical");
    let written = write(dir.path(), &runs_chunk(&dir)).expect("written");
    let members = members(&written.path);
    let text = |name: &str| {
        let bytes = &members.iter().find(|(n, _)| n == name).expect(name).1;
        String::from_utf8(bytes.clone()).expect("utf-8")
    };
    let runs = text("rows/runs.jsonl");
    let lines: Vec<&str> = runs.split_inclusive('\n').collect();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l.ends_with('\n')));
    assert_eq!(lines[1], "{\"a\":\"a\",\"m\":\"m\",\"z\":\"z\"}\n");
    assert!(
        lines[0].starts_with(
            "{\"attempt\":1,\"big\":-9223372036854775808,\"cost_usd\":0.30000000000000004,"
        ),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains("\"ctl\":\"a\\u0001\\n\\t\\\"\\\\/b\""),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].ends_with(",\"ключ\":\"значение\"}\n"),
        "{}",
        lines[0]
    );
    assert_eq!(text("rows/approvals.jsonl"), "");
    let manifest = text("manifest.json");
    assert!(manifest.starts_with("{\"archive_id\":"), "{manifest}");
    assert!(
        !manifest.contains(' ') && !manifest.contains('\n'),
        "{manifest}"
    );
    assert_eq!(
        members.last().map(|(n, _)| n.as_str()),
        Some("manifest.json")
    );
    let parsed: Manifest = serde_json::from_str(&manifest).expect("a manifest");
    assert_eq!(parsed, written.manifest);
}

/// Every entry's local header is ZIP64: version 4.5 needed and a ZIP64 extra field.
#[test]
fn every_member_is_zip64() {
    let dir = TestDir::new("zip64");
    let written = write(dir.path(), &runs_chunk(&dir)).expect("written");
    let raw = fs::read(&written.path).expect("read");
    let zip = ZipArchive::new(File::open(&written.path).expect("open")).expect("zip");
    let u16_at = |at: usize| u16::from_le_bytes([raw[at], raw[at + 1]]);
    for i in 0..zip.len() {
        let entry = zip.by_index_data(i).expect("entry");
        let at = usize::try_from(entry.header_start()).expect("offset");
        assert_eq!(raw[at..at + 4], [0x50, 0x4b, 0x03, 0x04], "a local header");
        assert!(u16_at(at + 4) >= 45, "version needed {}", u16_at(at + 4));
        assert_eq!(u16_at(at + 8), 8, "deflated");
        let name_len = usize::from(u16_at(at + 26));
        let extra_len = usize::from(u16_at(at + 28));
        let mut field = at + 30 + name_len;
        let end = field + extra_len;
        let mut ids = Vec::new();
        while field + 4 <= end {
            ids.push(u16_at(field));
            field += 4 + usize::from(u16_at(field + 2));
        }
        assert!(
            ids.contains(&0x0001),
            "{:?}: extra fields {ids:?}",
            entry.name_raw()
        );
    }
}

#[test]
fn a_name_taken_is_refused_and_left_alone() {
    let dir = TestDir::new("exists");
    let chunk = runs_chunk(&dir);
    let id = "0192f3a4b5c6d7e8f90a1b2c3d4e5f60".to_owned();
    let taken = dir.path().join(format!("runs-20261201T102030Z-{id}.zip"));
    fs::write(&taken, b"precious").expect("taken");
    let before = dir_names(dir.path());
    match crate::write::write_as(dir.path(), &chunk, id) {
        Err(Error::Exists(path)) => assert_eq!(path, taken),
        other => panic!("not refused: {other:?}"),
    }
    assert_eq!(fs::read(&taken).expect("still there"), b"precious");
    assert_eq!(dir_names(dir.path()), before, "no temporary file is left");
}

#[test]
fn a_chunk_the_format_cannot_hold_is_refused_before_any_file() {
    let dir = TestDir::new("bad-chunk");
    let out = dir.path().join("out");
    fs::create_dir(&out).expect("out dir");
    let good = runs_chunk(&dir);
    let mut bad = Vec::new();
    for table in ["Runs", "runs/x", "", "../runs"] {
        let mut c = good.clone();
        c.tables[0].0 = table.into();
        bad.push(c);
    }
    for (run_id, file) in [
        ("..", "f"),
        ("a/b", "f"),
        ("r", ".hidden"),
        ("r", "a/b"),
        ("r", ".."),
    ] {
        let mut c = good.clone();
        c.logs[0].run_id = run_id.into();
        c.logs[0].file = file.into();
        bad.push(c);
    }
    let mut twice = good.clone();
    twice.tables.push(twice.tables[0].clone());
    bad.push(twice);
    let mut span = good.clone();
    span.evidence = Some(crate::EvidenceSpan {
        previous_chain_sha256: "0".repeat(64),
        first_seq: 1,
        last_seq: 1,
        last_chain_sha256: "0".repeat(64),
    });
    bad.push(span);
    let mut before_1970 = good.clone();
    before_1970.created_at_ms = -1;
    bad.push(before_1970);
    for chunk in bad {
        assert!(
            matches!(write(&out, &chunk), Err(Error::Input(_))),
            "{:?} {:?}",
            chunk.tables[0].0,
            chunk.logs[0]
        );
    }
    let mut missing = good.clone();
    missing.logs[0].path = dir.path().join("no-such.log");
    assert!(matches!(write(&out, &missing), Err(Error::Io { .. })));
    assert!(dir_names(&out).is_empty(), "{:?}", dir_names(&out));
}

#[test]
fn list_shows_each_archive_or_why_not() {
    let dir = TestDir::new("list");
    let written = write(dir.path(), &runs_chunk(&dir)).expect("written");
    fs::write(dir.path().join("garbage.zip"), b"not a zip at all").expect("garbage");
    fs::write(dir.path().join(".hidden.zip.tmp"), b"x").expect("tmp");
    fs::write(dir.path().join(".hidden.zip"), b"x").expect("hidden");
    fs::write(dir.path().join("notes.txt"), b"x").expect("notes");
    let listed = list(dir.path()).expect("listed");
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0].0, dir.path().join("garbage.zip"));
    assert!(
        matches!(listed[0].1, Err(Error::NotAZip(_))),
        "{:?}",
        listed[0].1
    );
    assert_eq!(listed[1].0, written.path);
    assert_eq!(listed[1].1.as_ref().expect("good"), &written.manifest);
    assert!(list(&dir.path().join("absent")).is_err());
}
