//! Writing an archive, crash-safe: it is built in a hidden temporary file beside its
//! final name (`.<name>.tmp`, mode 0600), each member hashed as it streams, synced,
//! read back and verified whole; then linked to its final name, which fails rather than
//! replace a file, and verified again there. Whatever fails, the temporary file goes and
//! no final-named file that does not verify is left behind.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs::{self, File, OpenOptions},
    io::{self, BufWriter, Write},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

use serde_json::{Map, Value};
use studio_evidence::digest_of;
use zip::{CompressionMethod, ZipWriter, result::ZipError, write::SimpleFileOptions};

use crate::{
    Error, FORMAT, FORMAT_VERSION,
    canonical::{to_vec, write_object},
    hashing::HashingWriter,
    manifest::{EvidenceSpan, Kind, Manifest, MemberEntry},
    member::{MANIFEST, Member, valid_file_name, valid_run_id, valid_table},
    read::verify,
};

/// What one retention chunk deleted, to be archived before the delete commits.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub kind: Kind,
    pub created_at_ms: i64,
    /// The version of Studio writing it.
    pub studio_version: String,
    /// The rows deleted, by table (`[a-z_]{1,64}`, each table once), in the order to
    /// write them; each row maps a column to an integer, a real, a text or null.
    pub tables: Vec<(String, Vec<Map<String, Value>>)>,
    /// The rows kept but changed by the prune (a reference nulled, a log mark set), as
    /// they were before the change, by table.
    pub preimages: Vec<(String, Vec<Map<String, Value>>)>,
    /// Log files to copy in, read from disk while the archive is written.
    pub logs: Vec<LogFile>,
    /// For an evidence chunk (and only for one): the stretch of the chain its
    /// `evidence` rows hold.
    pub evidence: Option<EvidenceSpan>,
}

/// One of a run's log files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFile {
    /// `[A-Za-z0-9_-]{1,64}`
    pub run_id: String,
    /// `[A-Za-z0-9._-]{1,128}`, not starting with `.`.
    pub file: String,
    /// Where it is now.
    pub path: PathBuf,
}

/// An archive written and verified in its final place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub path: PathBuf,
    /// The archive file's size.
    pub bytes: u64,
    pub manifest: Manifest,
}

/// Writes `chunk` as a new archive in the existing directory `dir`, named
/// `<kind>-<yyyymmddThhmmssZ>-<archive_id>.zip`, and returns it once it verifies there.
pub fn write(dir: &Path, chunk: &Chunk) -> Result<Written, Error> {
    write_as(dir, chunk, uuid::Uuid::now_v7().simple().to_string())
}

/// [`write`] with the archive id given.
pub(crate) fn write_as(dir: &Path, chunk: &Chunk, archive_id: String) -> Result<Written, Error> {
    check(chunk)?;
    let name = file_name(chunk.kind, chunk.created_at_ms, &archive_id)?;
    let path = dir.join(&name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| Error::io(format!("cannot create {}", tmp.display()), e))?;
    let mut linked = false;
    let placed = build(file, &tmp, chunk, archive_id)
        .and_then(|manifest| place(dir, &tmp, &path, manifest, &mut linked));
    if placed.is_err() {
        let _ = fs::remove_file(&tmp);
        if linked {
            // The final name was made by this call; it must not outlive a failure.
            let _ = fs::remove_file(&path);
        }
    }
    placed
}

/// The archive's file name: sorts by kind, then by when it was made.
fn file_name(kind: Kind, created_at_ms: i64, archive_id: &str) -> Result<String, Error> {
    let at = utc(created_at_ms)?;
    Ok(format!(
        "{kind}-{:04}{:02}{:02}T{:02}{:02}{:02}Z-{archive_id}.zip",
        at.year(),
        at.month(),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    ))
}

fn utc(ms: i64) -> Result<jiff::civil::DateTime, Error> {
    let ts = jiff::Timestamp::from_millisecond(ms)
        .ok()
        .filter(|_| ms >= 0)
        .ok_or_else(|| Error::Input(format!("created_at_ms {ms} is not an instant since 1970")))?;
    Ok(jiff::tz::TimeZone::UTC.to_datetime(ts))
}

/// Refuses a chunk the format cannot hold, before any file is made.
fn check(chunk: &Chunk) -> Result<(), Error> {
    let bad = |what: String| Err(Error::Input(what));
    for (part, tables) in [("tables", &chunk.tables), ("preimages", &chunk.preimages)] {
        let mut seen = BTreeSet::new();
        for (table, _) in tables {
            if !valid_table(table) {
                return bad(format!(
                    "{part}: {table:?} is not a table name ([a-z_]{{1,64}})"
                ));
            }
            if !seen.insert(table) {
                return bad(format!("{part}: table {table} is given twice"));
            }
        }
    }
    let mut seen = BTreeSet::new();
    for log in &chunk.logs {
        if !valid_run_id(&log.run_id) {
            return bad(format!(
                "log run id {:?} is not [A-Za-z0-9_-]{{1,64}}",
                log.run_id
            ));
        }
        if !valid_file_name(&log.file) {
            return bad(format!(
                "log file name {:?} is not [A-Za-z0-9._-]{{1,128}} without a leading dot",
                log.file
            ));
        }
        if !seen.insert((&log.run_id, &log.file)) {
            return bad(format!("log {}/{} is given twice", log.run_id, log.file));
        }
    }
    match (chunk.kind, &chunk.evidence) {
        (Kind::Evidence, None) => bad("an evidence chunk needs its evidence span".into()),
        (Kind::Evidence, Some(span)) => {
            let hashes = [&span.previous_chain_sha256, &span.last_chain_sha256];
            if hashes
                .iter()
                .any(|h| digest_of(h).is_none() || h.len() != 64)
            {
                return bad("the evidence span's chain hashes must be 64 hex digits".into());
            }
            Ok(())
        }
        (kind, Some(_)) => bad(format!("a {kind} chunk has no evidence span")),
        (_, None) => Ok(()),
    }
}

/// Writes the whole archive into `file` and syncs it; returns its manifest.
fn build(file: File, tmp: &Path, chunk: &Chunk, archive_id: String) -> Result<Manifest, Error> {
    let mut out = Builder {
        zip: ZipWriter::new(BufWriter::new(file)),
        options: options(chunk.created_at_ms),
        tmp,
        members: Vec::new(),
    };
    let mut counts = [BTreeMap::new(), BTreeMap::new()];
    let parts = [(&chunk.tables, true), (&chunk.preimages, false)];
    for ((tables, deleted), counts) in parts.into_iter().zip(&mut counts) {
        for (table, rows) in tables {
            let member = if deleted {
                Member::Rows(table.clone())
            } else {
                Member::Preimages(table.clone())
            };
            let n = rows.len() as u64;
            out.member(member, Some(n), |w| put_rows(rows, w))?;
            counts.insert(table.clone(), n);
        }
    }
    for log in &chunk.logs {
        let mut input = File::open(&log.path)
            .map_err(|e| Error::io(format!("cannot read {}", log.path.display()), e))?;
        let member = Member::Log {
            run_id: log.run_id.clone(),
            file: log.file.clone(),
        };
        out.member(member, None, |w| io::copy(&mut input, w).map(drop))?;
    }
    let [tables, preimages] = counts;
    let manifest = Manifest {
        format: FORMAT.to_owned(),
        format_version: FORMAT_VERSION,
        archive_id,
        kind: chunk.kind,
        created_at_ms: chunk.created_at_ms,
        studio_version: chunk.studio_version.clone(),
        tables,
        preimages,
        log_files: chunk.logs.len() as u64,
        members: out.members.clone(),
        evidence: chunk.evidence.clone(),
    };
    out.finish(&manifest)?;
    Ok(manifest)
}

/// An archive being written: its ZIP and the members written so far.
struct Builder<'a> {
    zip: ZipWriter<BufWriter<File>>,
    options: SimpleFileOptions,
    tmp: &'a Path,
    members: Vec<MemberEntry>,
}

impl Builder<'_> {
    /// Writes `member` with what `fill` writes, counted and hashed as it streams.
    fn member(
        &mut self,
        member: Member,
        rows: Option<u64>,
        fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> Result<(), Error> {
        let name = member.name();
        let failed = |e: io::Error| {
            Error::io(
                format!("cannot archive {name} in {}", self.tmp.display()),
                e,
            )
        };
        self.zip
            .start_file(name.as_str(), self.options)
            .map_err(|e| failed(io_error(e)))?;
        let mut out = HashingWriter::new(&mut self.zip);
        fill(&mut out).map_err(failed)?;
        let (bytes, sha256) = out.finish();
        self.members.push(MemberEntry {
            name,
            bytes,
            sha256,
            rows,
        });
        Ok(())
    }

    /// Writes `manifest` last, closes the ZIP and syncs the file.
    fn finish(mut self, manifest: &Manifest) -> Result<(), Error> {
        let failed = |e: io::Error| Error::io(format!("cannot write {}", self.tmp.display()), e);
        let text = serde_json::to_value(manifest)
            .map_err(io::Error::from)
            .and_then(|v| to_vec(&v))
            .map_err(failed)?;
        self.zip
            .start_file(MANIFEST, self.options)
            .map_err(|e| failed(io_error(e)))?;
        self.zip.write_all(&text).map_err(failed)?;
        let out = self.zip.finish().map_err(|e| failed(io_error(e)))?;
        out.into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .map_err(failed)
    }
}

/// Deflate, ZIP64 on every member, owner-only, dated when the chunk was made.
fn options(created_at_ms: i64) -> SimpleFileOptions {
    let mut options = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .large_file(true)
        .unix_permissions(0o600);
    if let Ok(at) = utc(created_at_ms) {
        let date = zip::DateTime::from_date_and_time(
            u16::try_from(at.year()).unwrap_or(1980),
            u8::try_from(at.month()).unwrap_or(1),
            u8::try_from(at.day()).unwrap_or(1),
            u8::try_from(at.hour()).unwrap_or(0),
            u8::try_from(at.minute()).unwrap_or(0),
            u8::try_from(at.second()).unwrap_or(0),
        );
        // Before 1980 a ZIP cannot say: the default date stands.
        if let Ok(date) = date {
            options = options.last_modified_time(date);
        }
    }
    options
}

/// One canonical JSON object per row, each followed by `\n`.
fn put_rows(rows: &[Map<String, Value>], out: &mut dyn Write) -> io::Result<()> {
    let mut line = Vec::with_capacity(1024);
    for row in rows {
        line.clear();
        write_object(row, &mut line)?;
        line.push(b'\n');
        out.write_all(&line)?;
    }
    Ok(())
}

/// Checks the synced temporary file, links it to its final name (never over a file),
/// syncs the directory and checks the final file again.
fn place(
    dir: &Path,
    tmp: &Path,
    path: &Path,
    manifest: Manifest,
    linked: &mut bool,
) -> Result<Written, Error> {
    let read_back = verify(tmp, None)?;
    if read_back != manifest {
        return Err(Error::Invalid(format!(
            "{} reads back with another manifest than the one written",
            tmp.display()
        )));
    }
    fs::hard_link(tmp, path).map_err(|e| match e.kind() {
        io::ErrorKind::AlreadyExists => Error::Exists(path.to_owned()),
        _ => Error::io(format!("cannot link {} into place", path.display()), e),
    })?;
    *linked = true;
    fs::remove_file(tmp).map_err(|e| Error::io(format!("cannot remove {}", tmp.display()), e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("cannot sync {}", dir.display()), e))?;
    let manifest = verify(path, None)?;
    let bytes = fs::metadata(path)
        .map_err(|e| Error::io(format!("cannot stat {}", path.display()), e))?
        .len();
    Ok(Written {
        path: path.to_owned(),
        bytes,
        manifest,
    })
}

/// A ZIP writer's error as the I/O error it mostly is.
fn io_error(e: ZipError) -> io::Error {
    match e {
        ZipError::Io(e) => e,
        other => io::Error::other(other),
    }
}
