//! Reading an archive: opening it checks every member name, the manifest against the
//! members, and every member's size and SHA-256 (and, for an evidence archive, its rows
//! as a stretch of the chain) before anything is handed out. Every member is read
//! through a bound (16 MiB for the manifest, 1 GiB for a `.jsonl` member, the listed
//! size for a log) and hashed as it streams, whatever the ZIP headers claim.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs::File,
    io::{self, BufRead, BufReader, Read},
    path::{Path, PathBuf},
};

use serde_json::{Map, Value};
use studio_evidence::{Key, Sealed};
use zip::{ZipArchive, ZipReadOptions, result::ZipError};

use crate::{
    Error, FORMAT, FORMAT_VERSION, JSONL_CAP, MANIFEST_CAP,
    evidence::{self, ROWS},
    hashing::HashingReader,
    manifest::{EvidenceSpan, Kind, Manifest},
    member::{MANIFEST, Member},
};

/// Opens and checks the archive at `path` whole: names, manifest, every member's size,
/// SHA-256 and rows, and for an evidence archive its chain (with `key`, every MAC).
pub fn verify(path: &Path, key: Option<&Key>) -> Result<Manifest, Error> {
    Ok(Archive::open_checked(path, key)?.manifest)
}

/// The archives in `dir` (files ending `.zip`, not starting with `.`) by file name, each
/// with its manifest or why it cannot be read. Only the manifests are checked against
/// the members' names, not the members' contents: [`verify`] does that.
pub fn list(dir: &Path) -> io::Result<Vec<(PathBuf, Result<Manifest, Error>)>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".zip") && !name.starts_with('.') {
            paths.push(entry.path());
        }
    }
    paths.sort();
    Ok(paths
        .into_iter()
        .map(|path| {
            let manifest = Archive::open_listed(&path).map(|a| a.manifest);
            (path, manifest)
        })
        .collect())
}

/// An archive opened and verified, to read back for a restore.
pub struct Archive {
    zip: ZipArchive<BufReader<File>>,
    manifest: Manifest,
    /// Each member's index in the ZIP, by name.
    index: BTreeMap<String, usize>,
}

/// Why streaming a member stopped early: a fault of the member, or of where it went.
enum Fault {
    Bad(String),
    Io(io::Error),
}

impl Archive {
    /// Opens the archive at `path` and checks it whole, as [`verify`] does without a key.
    pub fn open(path: &Path) -> Result<Self, Error> {
        Self::open_checked(path, None)
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The rows of `rows/<table>.jsonl`, in order (none when the archive has no such
    /// table); read again, and checked again, from the file.
    pub fn rows(&mut self, table: &str) -> Result<Vec<Map<String, Value>>, Error> {
        self.jsonl(Member::Rows(table.to_owned()))
    }

    /// The rows of `preimages/<table>.jsonl`, as [`Archive::rows`].
    pub fn preimages(&mut self, table: &str) -> Result<Vec<Map<String, Value>>, Error> {
        self.jsonl(Member::Preimages(table.to_owned()))
    }

    /// The log files it holds, as `(run_id, file)`: both checked names, never a path.
    pub fn log_files(&self) -> Vec<(String, String)> {
        self.manifest
            .members
            .iter()
            .filter_map(|m| match Member::parse(&m.name) {
                Some(Member::Log { run_id, file }) => Some((run_id, file)),
                _ => None,
            })
            .collect()
    }

    /// Copies log file `file` of run `run_id` to `out` and returns its size. The copy is
    /// checked as it streams: on an error, discard what `out` received.
    pub fn read_log(
        &mut self,
        run_id: &str,
        file: &str,
        out: &mut impl io::Write,
    ) -> Result<u64, Error> {
        let name = Member::Log {
            run_id: run_id.to_owned(),
            file: file.to_owned(),
        }
        .name();
        if self.manifest.member(&name).is_none() {
            return Err(Error::Input(format!("the archive holds no log {name}")));
        }
        self.stream(&name, |r| io::copy(r, out).map_err(Fault::Io))
    }

    /// For an evidence archive, its span and sealed rows (checked: the archive verified
    /// when it was opened, and the rows are hashed again as they are read).
    pub fn evidence(&mut self) -> Result<Option<(EvidenceSpan, Vec<Sealed>)>, Error> {
        let Some(span) = self.manifest.evidence.clone() else {
            return Ok(None);
        };
        let rows = self.sealed()?;
        Ok(Some((span, rows)))
    }

    fn open_checked(path: &Path, key: Option<&Key>) -> Result<Self, Error> {
        let mut archive = Self::open_listed(path)?;
        for member in archive.manifest.members.clone() {
            let parsed = Member::parse(&member.name);
            if parsed.as_ref().is_some_and(Member::is_jsonl) {
                let name = &member.name;
                let count = archive.stream(name, |r| each_row(name, r, |_| Ok(())))?;
                if member.rows != Some(count) {
                    return Err(Error::Invalid(format!(
                        "manifest lists {name} with {} rows, the member has {count}",
                        member.rows.unwrap_or_default()
                    )));
                }
            } else {
                archive.stream(&member.name, |r| {
                    io::copy(r, &mut io::sink()).map_err(Fault::Io)
                })?;
            }
        }
        if let Some(span) = archive.manifest.evidence.clone() {
            let rows = archive.sealed()?;
            evidence::check(&span, &rows, key)?;
        }
        Ok(archive)
    }

    /// Opens the archive at `path` and checks its names and its manifest against them,
    /// without reading the members.
    fn open_listed(path: &Path) -> Result<Self, Error> {
        let file = File::open(path).map_err(|e| Error::io("cannot open the archive", e))?;
        let mut zip = ZipArchive::new(BufReader::new(file)).map_err(not_a_zip)?;
        if zip.has_duplicate_names() {
            return Err(Error::Invalid("two members have the same name".to_owned()));
        }
        let mut index = BTreeMap::new();
        for i in 0..zip.len() {
            let entry = zip.by_index_data(i).map_err(|e| invalid("a member", e))?;
            let raw = entry.name_raw();
            let Some(name) = std::str::from_utf8(raw)
                .ok()
                .filter(|n| Member::parse(n).is_some())
            else {
                return Err(Error::Invalid(format!(
                    "member {}: not a valid member name",
                    String::from_utf8_lossy(raw).escape_debug()
                )));
            };
            if entry.is_dir() || entry.is_symlink() || entry.encrypted() {
                return Err(Error::Invalid(format!(
                    "member {name}: not a plain, unencrypted file"
                )));
            }
            index.insert(name.to_owned(), i);
        }
        zip.validate_header_consistency()
            .map_err(|e| invalid("the ZIP headers", e))?;
        let manifest = read_manifest(&mut zip, &index)?;
        check_listing(&manifest, &index)?;
        Ok(Self {
            zip,
            manifest,
            index,
        })
    }

    fn jsonl(&mut self, member: Member) -> Result<Vec<Map<String, Value>>, Error> {
        let name = member.name();
        if self.manifest.member(&name).is_none() {
            return Ok(Vec::new());
        }
        let mut rows = Vec::new();
        self.stream(&name, |r| {
            each_row(&name, r, |row| {
                rows.push(row);
                Ok(())
            })
        })?;
        Ok(rows)
    }

    fn sealed(&mut self) -> Result<Vec<Sealed>, Error> {
        self.jsonl(Member::Rows("evidence".to_owned()))?
            .iter()
            .enumerate()
            .map(|(i, row)| evidence::sealed(i + 1, row))
            .collect()
    }

    /// Streams the listed member `name` through `consume`, bounded by its listed size,
    /// then checks its size and SHA-256 against the manifest. Those checks come before
    /// `consume`'s own verdict: a row edited into bad JSON is reported as the edit.
    fn stream<T>(
        &mut self,
        name: &str,
        consume: impl FnOnce(&mut dyn BufRead) -> Result<T, Fault>,
    ) -> Result<T, Error> {
        let (Some(entry), Some(&at)) = (self.manifest.member(name), self.index.get(name)) else {
            return Err(Error::Invalid(format!("{name} is not a listed member")));
        };
        let (expected, sha256) = (entry.bytes, entry.sha256.clone());
        let cap = match Member::parse(name) {
            Some(m) if m.is_jsonl() => JSONL_CAP,
            _ => u64::MAX,
        };
        if expected > cap {
            return Err(Error::Invalid(format!(
                "manifest lists {name} with {expected} bytes, more than the {cap} a member of its kind may hold"
            )));
        }
        let file = self
            .zip
            .by_index_with_options(at, ZipReadOptions::new().enforce_header_consistency(true))
            .map_err(|e| invalid(name, e))?;
        let mut reader = HashingReader::new(file.take(expected.saturating_add(1)));
        let mut buffered = BufReader::with_capacity(64 * 1024, &mut reader);
        let consumed = consume(&mut buffered);
        // What `consume` left is read too, so that the size and hash cover it all.
        let drained = io::copy(&mut buffered, &mut io::sink());
        drop(buffered);
        if let Some(e) = reader.failed() {
            return Err(Error::Invalid(format!("member {name} cannot be read: {e}")));
        }
        let (bytes, digest) = reader.finish();
        if bytes > expected {
            return Err(Error::Invalid(format!(
                "member {name} holds more than the {expected} bytes the manifest lists"
            )));
        }
        if bytes != expected {
            return Err(Error::Invalid(format!(
                "manifest lists {name} with {expected} bytes, the member has {bytes}"
            )));
        }
        if digest != sha256 {
            return Err(Error::Invalid(format!(
                "manifest lists {name} with SHA-256 {}…, the member has {}…",
                short(&sha256),
                short(&digest)
            )));
        }
        drained.map_err(|e| Error::io(format!("cannot read {name}"), e))?;
        consumed.map_err(|f| match f {
            Fault::Bad(what) => Error::Invalid(what),
            Fault::Io(e) => Error::io(format!("cannot copy {name} out"), e),
        })
    }
}

/// Reads `manifest.json`, at most [`MANIFEST_CAP`] bytes of it, and checks its format.
fn read_manifest(
    zip: &mut ZipArchive<BufReader<File>>,
    index: &BTreeMap<String, usize>,
) -> Result<Manifest, Error> {
    let Some(&at) = index.get(MANIFEST) else {
        return Err(Error::Invalid(format!("the archive has no {MANIFEST}")));
    };
    let file = zip
        .by_index_with_options(at, ZipReadOptions::new().enforce_header_consistency(true))
        .map_err(|e| invalid(MANIFEST, e))?;
    let mut text = Vec::new();
    file.take(MANIFEST_CAP + 1)
        .read_to_end(&mut text)
        .map_err(|e| Error::Invalid(format!("{MANIFEST} cannot be read: {e}")))?;
    if text.len() as u64 > MANIFEST_CAP {
        return Err(Error::Invalid(format!(
            "{MANIFEST} is larger than {} MiB",
            MANIFEST_CAP >> 20
        )));
    }
    let bad = |what: String| Error::Invalid(format!("{MANIFEST}: {what}"));
    let value: Value = serde_json::from_slice(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let format = value.get("format").and_then(Value::as_str);
    let version = value.get("format_version").and_then(Value::as_u64);
    if format != Some(FORMAT) || version != Some(u64::from(FORMAT_VERSION)) {
        return Err(bad(format!(
            "format {} version {}, not {FORMAT} version {FORMAT_VERSION}",
            format.unwrap_or("?"),
            version.map_or_else(|| "?".to_owned(), |v| v.to_string())
        )));
    }
    serde_json::from_value(value).map_err(|e| bad(e.to_string()))
}

/// Checks the manifest against itself and against the members the ZIP holds: exactly
/// the same names, counts that add up, an evidence span for an evidence archive only.
fn check_listing(manifest: &Manifest, index: &BTreeMap<String, usize>) -> Result<(), Error> {
    let bad = |what: String| Err(Error::Invalid(what));
    if manifest.archive_id.len() != 32
        || !manifest
            .archive_id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return bad(format!(
            "{MANIFEST}: archive_id {:?} is not 32 lowercase hex digits",
            manifest.archive_id
        ));
    }
    let mut listed = BTreeSet::new();
    let (mut tables, mut preimages, mut logs) = (BTreeMap::new(), BTreeMap::new(), 0);
    for m in &manifest.members {
        let name = &m.name;
        let member = match Member::parse(name) {
            Some(Member::Manifest) | None => {
                return bad(format!("manifest lists {name:?}: not a valid member name"));
            }
            Some(member) => member,
        };
        if !listed.insert(name.as_str()) {
            return bad(format!("manifest lists {name} twice"));
        }
        if m.sha256.len() != 64 || !m.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return bad(format!(
                "manifest lists {name} with a SHA-256 that is not 64 hex digits"
            ));
        }
        if !index.contains_key(name) {
            return bad(format!(
                "manifest lists {name}, the archive has no such member"
            ));
        }
        match (&member, m.rows) {
            (Member::Rows(t), Some(n)) => {
                tables.insert(t.clone(), n);
            }
            (Member::Preimages(t), Some(n)) => {
                preimages.insert(t.clone(), n);
            }
            (Member::Log { .. }, None) => logs += 1,
            (Member::Log { .. }, Some(_)) => {
                return bad(format!(
                    "manifest gives {name} a row count; it holds no rows"
                ));
            }
            _ => return bad(format!("manifest gives {name} no row count")),
        }
    }
    if let Some(extra) = index
        .keys()
        .find(|n| *n != MANIFEST && !listed.contains(n.as_str()))
    {
        return bad(format!("member {extra} is not listed in the manifest"));
    }
    for (part, counted, stated) in [
        ("tables", &tables, &manifest.tables),
        ("preimages", &preimages, &manifest.preimages),
    ] {
        if counted != stated {
            return bad(format!(
                "{MANIFEST}: {part} {stated:?} do not match its members' row counts {counted:?}"
            ));
        }
    }
    if logs != manifest.log_files {
        return bad(format!(
            "{MANIFEST}: log_files is {}, it lists {logs} log members",
            manifest.log_files
        ));
    }
    match (manifest.kind, &manifest.evidence) {
        (Kind::Evidence, None) => bad(format!("{MANIFEST}: an evidence archive without its span")),
        (Kind::Evidence, Some(_)) if !listed.contains(ROWS) => {
            bad(format!("an evidence archive without {ROWS}"))
        }
        (kind, Some(_)) if kind != Kind::Evidence => bad(format!(
            "{MANIFEST}: a {kind} archive with an evidence span"
        )),
        _ => Ok(()),
    }
}

/// Calls `row` with each line of a `.jsonl` member as a JSON object; returns how many
/// there were. Every line, the last too, ends with `\n`.
fn each_row(
    name: &str,
    reader: &mut dyn BufRead,
    mut row: impl FnMut(Map<String, Value>) -> Result<(), Fault>,
) -> Result<u64, Fault> {
    let mut line = Vec::new();
    let mut n = 0;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(Fault::Io)? == 0 {
            return Ok(n);
        }
        n += 1;
        if line.pop() != Some(b'\n') {
            return Err(Fault::Bad(format!(
                "{name} line {n}: does not end with a newline"
            )));
        }
        match serde_json::from_slice::<Value>(&line) {
            Ok(Value::Object(map)) => row(map)?,
            _ => return Err(Fault::Bad(format!("{name} line {n}: not a JSON object"))),
        }
    }
}

/// A ZIP error while opening: the file is no ZIP (or it could not be read).
fn not_a_zip(e: ZipError) -> Error {
    match e {
        ZipError::Io(e) if e.kind() != io::ErrorKind::UnexpectedEof => {
            Error::io("cannot read the archive", e)
        }
        other => Error::NotAZip(other.to_string()),
    }
}

/// A ZIP error on one member of a readable ZIP: the archive is not valid.
fn invalid(what: &str, e: ZipError) -> Error {
    Error::Invalid(format!("{what} cannot be read: {e}"))
}

/// The start of a hex digest, enough to tell two apart in a message.
fn short(hex: &str) -> &str {
    hex.get(..16).unwrap_or(hex)
}
