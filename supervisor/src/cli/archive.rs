//! `studio archive list DIR`, `studio archive verify FILE [--key FILE]` and
//! `studio archive restore FILE` (docs/OPERATIONS.md, "Retention and archives").
//!
//! `list` and `verify` read retention archives offline, with no studiod, no home and no
//! database: `studio-archive` checks them. An archive that does not verify is named
//! with what is wrong and exits 1; a file that is no archive at all, or cannot be read,
//! is bad input (exit 2). `restore` asks studiod to put an archive back
//! (`POST /api/admin/archives/restore`, with the daemon token); studiod reads the file
//! itself, and this CLI verifies it first, so a broken file is refused before anything
//! is sent.

use std::path::Path;

use serde::Serialize;
use studio_api::{ArchiveRestoreRequest, ArchiveRestored};
use studio_archive::Manifest;
use studio_contract::{home::Home, time::rfc3339};

use crate::{
    Error,
    cli::{
        ArchiveCommand, Remote,
        client::Client,
        evidence::{archive_failure, read_key},
        table::{Style, Table, Tone, human_bytes},
    },
    output::print_json,
};

pub(crate) async fn run(home: &Home, command: ArchiveCommand) -> Result<u8, Error> {
    match command {
        ArchiveCommand::List { dir, json } => list(&dir, json),
        ArchiveCommand::Verify { file, key } => verify(&file, key.as_deref()),
        ArchiveCommand::Restore { file, remote } => restore(home, &file, &remote).await,
    }
}

/// One archive of `studio archive list --json`: its manifest, or why it has none.
#[derive(Debug, Serialize)]
struct Listed {
    file: String,
    bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    manifest: Option<Manifest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// `studio archive list DIR [--json]`.
pub(crate) fn list(dir: &Path, json: bool) -> Result<u8, Error> {
    let found = studio_archive::list(dir)
        .map_err(|e| Error::Usage(format!("cannot read {}: {e}", dir.display())))?;
    let listed: Vec<Listed> = found
        .into_iter()
        .map(|(path, manifest)| {
            let (manifest, error) = match manifest {
                Ok(m) => (Some(m), None),
                Err(e) => (None, Some(e.to_string())),
            };
            Listed {
                file: file_name(&path),
                bytes: std::fs::metadata(&path).ok().map(|m| m.len()),
                manifest,
                error,
            }
        })
        .collect();
    if json {
        print_json(&listed)?;
        return Ok(0);
    }
    if listed.is_empty() {
        errln!("no archives in {}", dir.display());
        return Ok(0);
    }
    let mut table = Table::new(&["FILE", "KIND", "CREATED", "SIZE", "LOGS", "ROWS"]);
    for l in &listed {
        let size = l.bytes.map_or_else(|| "-".to_owned(), human_bytes);
        let cells = match (&l.manifest, &l.error) {
            (Some(m), _) => vec![
                (l.file.clone(), Tone::Plain),
                (m.kind.to_string(), Tone::Plain),
                (rfc3339(m.created_at_ms), Tone::Plain),
                (size, Tone::Plain),
                (m.log_files.to_string(), Tone::Plain),
                (rows(m), Tone::Plain),
            ],
            (None, error) => vec![
                (l.file.clone(), Tone::Plain),
                ("invalid".to_owned(), Tone::Bad),
                ("-".to_owned(), Tone::Dim),
                (size, Tone::Plain),
                ("-".to_owned(), Tone::Dim),
                (error.clone().unwrap_or_default(), Tone::Bad),
            ],
        };
        table.row(cells);
    }
    out!("{}", table.render(Style::detect()))?;
    Ok(0)
}

/// `runs 3, run_transitions 41`, and an evidence archive's seqs.
fn rows(m: &Manifest) -> String {
    let mut text = m
        .tables
        .iter()
        .map(|(table, n)| format!("{table} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    if let Some(span) = &m.evidence {
        text.push_str(&format!(" (seq {}..{})", span.first_seq, span.last_seq));
    }
    if text.is_empty() {
        "-".to_owned()
    } else {
        text
    }
}

/// `studio archive verify FILE [--key FILE]`.
pub(crate) fn verify(file: &Path, key: Option<&Path>) -> Result<u8, Error> {
    let key = key.map(read_key).transpose()?;
    let manifest =
        studio_archive::verify(file, key.as_ref()).map_err(|e| archive_failure(file, e))?;
    let detail = match &manifest.evidence {
        Some(span) => {
            let macs = if key.is_some() {
                "hashes and MACs checked"
            } else {
                "hashes checked; pass --key to check the MACs too"
            };
            let after = if span.previous_chain_sha256.bytes().all(|b| b == b'0') {
                "genesis".to_owned()
            } else {
                format!("chain hash {}", span.previous_chain_sha256)
            };
            format!(
                "evidence seq {}..{} chained after {after}, {macs}",
                span.first_seq, span.last_seq
            )
        }
        None => format!(
            "{} rows, {} log files, sizes and SHA-256 checked",
            manifest.row_count(),
            manifest.log_files
        ),
    };
    outln!(
        "{}: {} archive {}, {} members verified ({detail})",
        file.display(),
        manifest.kind,
        manifest.archive_id,
        manifest.members.len()
    )?;
    Ok(0)
}

/// `studio archive restore FILE`: studiod puts the archive back.
async fn restore(home: &Home, file: &Path, remote: &Remote) -> Result<u8, Error> {
    let request = restore_request(file)?;
    let client = Client::connect(home, remote.daemon.as_deref()).await?;
    let restored: ArchiveRestored = client.post("/api/admin/archives/restore", &request).await?;
    if remote.json {
        print_json(&restored)?;
        return Ok(0);
    }
    let counts = |by_table: &std::collections::BTreeMap<String, u64>| {
        let total: u64 = by_table.values().sum();
        let each: Vec<String> = by_table.iter().map(|(t, n)| format!("{t} {n}")).collect();
        if each.is_empty() {
            "0".to_owned()
        } else {
            format!("{total} ({})", each.join(", "))
        }
    };
    outln!(
        "restored {} archive {}: rows {}; kept rows put back as they were {}; {} log files",
        restored.kind,
        restored.archive_id,
        counts(&restored.rows),
        counts(&restored.preimages),
        restored.log_files
    )?;
    Ok(0)
}

/// The request for `file`, once it verifies here: its absolute path.
fn restore_request(file: &Path) -> Result<ArchiveRestoreRequest, Error> {
    let path =
        std::path::absolute(file).map_err(|e| Error::Usage(format!("{}: {e}", file.display())))?;
    studio_archive::verify(&path, None).map_err(|e| {
        Error::Usage(format!(
            "{}: {e}: nothing was sent to studiod",
            path.display()
        ))
    })?;
    let text = path
        .to_str()
        .ok_or_else(|| Error::Usage(format!("{}: the path is not UTF-8", path.display())))?;
    Ok(ArchiveRestoreRequest {
        file: text.to_owned(),
    })
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use studio_archive::{Chunk, Kind};

    use super::*;
    use crate::testdir::TestDir;

    fn runs_archive(dir: &Path) -> std::path::PathBuf {
        let row = json!({"id": "0190aa", "cost_usd": 0.25})
            .as_object()
            .cloned()
            .expect("object");
        let chunk = Chunk {
            kind: Kind::Runs,
            created_at_ms: 1_796_120_430_456,
            studio_version: "0.1.0".into(),
            tables: vec![("runs".into(), vec![row])],
            preimages: vec![],
            logs: vec![],
            evidence: None,
        };
        studio_archive::write(dir, &chunk).expect("written").path
    }

    fn one_line(e: &Error) -> String {
        let text = e.to_string();
        assert!(!text.contains('\n'), "{text}");
        text
    }

    #[test]
    fn a_good_archive_verifies_and_lists() {
        let dir = TestDir::new("arch-ok");
        let path = runs_archive(dir.path());
        assert_eq!(verify(&path, None).expect("verifies"), 0);
        assert_eq!(list(dir.path(), false).expect("lists"), 0);
        assert_eq!(list(dir.path(), true).expect("lists"), 0);
        let request = restore_request(&path).expect("a request");
        assert_eq!(std::path::Path::new(&request.file), path);
        assert!(std::path::Path::new(&request.file).is_absolute());
    }

    #[test]
    fn what_is_no_archive_is_bad_input_and_a_broken_one_fails() {
        let dir = TestDir::new("arch-bad");
        let garbage = dir.path().join("garbage.zip");
        std::fs::write(&garbage, b"not a zip").expect("garbage");
        for e in [
            verify(&garbage, None).expect_err("no zip"),
            verify(&dir.path().join("absent.zip"), None).expect_err("absent"),
            list(&dir.path().join("absent"), false).expect_err("no dir"),
            restore_request(&garbage).expect_err("not sent"),
        ] {
            assert_eq!(e.exit_code(), 2, "{e}");
            one_line(&e);
        }
        let key = dir.path().join("key");
        std::fs::write(&key, "not hex").expect("key");
        let path = runs_archive(dir.path());
        let e = verify(&path, Some(&key)).expect_err("bad key");
        assert_eq!(e.exit_code(), 2, "{e}");

        // Cut one byte off the end: still no ZIP.
        let raw = std::fs::read(&path).expect("read");
        std::fs::write(&path, &raw[..raw.len() - 1]).expect("cut");
        assert_eq!(verify(&path, None).expect_err("cut").exit_code(), 2);

        // A ZIP whose manifest lists a member it lacks: read, and broken.
        let broken = archive_failure(
            &path,
            studio_archive::Error::Invalid(
                "manifest lists logs/r/f, the archive has no such member".into(),
            ),
        );
        assert_eq!(broken.exit_code(), 1);
        assert!(one_line(&broken).ends_with("the archive has no such member"));
    }
}
