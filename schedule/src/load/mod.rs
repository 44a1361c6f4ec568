//! Declaration files to validated documents, or to diagnostics that point at the line and
//! column of the offending value: what `studio schedule validate|plan|apply` read.
//!
//! A file is parsed into a position-carrying tree first ([`tree`]), so that every
//! structural and semantic problem can be reported where it is, all of them at once;
//! the typed [`ScheduleSet`] is deserialized from that tree ([`document`]).

mod document;
mod render;
mod tree;

use std::{
    collections::BTreeMap,
    fmt,
    path::{Path, PathBuf},
};

use crate::{declaration::ScheduleSet, zone::Zone};

pub use render::render_yaml;

/// How bad a [`Diagnostic`] is: errors stop a file from loading, warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Error,
    Warning,
}

/// One problem, where it is: 1-based line and column (columns count characters), the
/// dotted field path (`schedules.reindex.trigger.cron.expression`, empty for the whole
/// file) and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    pub path: String,
    pub message: String,
    pub severity: Severity,
}

impl Diagnostic {
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file.display(), self.line, self.column)?;
        if self.severity == Severity::Warning {
            f.write_str("warning: ")?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// What loading needs besides the text.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions<'a> {
    /// The zone for cron triggers that name none.
    pub default_zone: &'a Zone,
    /// The command allow-list; when set, executables not on it are warnings (the
    /// daemon's list decides).
    pub allowlist: Option<&'a [String]>,
    /// When set, an `at` instant must lie after it.
    pub now_ms: Option<i64>,
}

/// A document that loaded without errors; relative `cwd`s are already absolute.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub file: PathBuf,
    pub set: ScheduleSet,
}

/// The notation of a file, chosen by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
    Toml,
}

impl Format {
    /// `.yaml`/`.yml`, `.json`, `.toml` (any case); anything else is `None`.
    pub fn from_path(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "yaml" | "yml" => Some(Self::Yaml),
            "json" => Some(Self::Json),
            "toml" => Some(Self::Toml),
            _ => None,
        }
    }
}

/// Reads and checks one file. The document is `Some` only when there is no error;
/// diagnostics (warnings included) are sorted by line and column.
pub fn load_file(path: &Path, opts: &LoadOptions<'_>) -> (Option<Loaded>, Vec<Diagnostic>) {
    let (parsed, diagnostics) = load_one(path, opts);
    let loaded = parsed.and_then(|p| p.set).map(|set| Loaded {
        file: path.to_path_buf(),
        set,
    });
    (loaded, diagnostics)
}

/// Reads and checks every file, then what only the files together can break: a stored
/// name (`<project>/<member>`) declared twice, two documents with one owner key. All
/// diagnostics are returned sorted by file, line and column; a document with an error
/// (its own or a cross-file one) is left out of the result.
pub fn load_all(paths: &[PathBuf], opts: &LoadOptions<'_>) -> (Vec<Loaded>, Vec<Diagnostic>) {
    let mut diagnostics = Vec::new();
    let mut parsed = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for path in paths {
        // The same file named twice (`jobs/*.yaml jobs/a.yaml`) is read once, not
        // reported as clashing with itself.
        let identity = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        if !seen.insert(identity) {
            continue;
        }
        let (doc, mut diags) = load_one(path, opts);
        diagnostics.append(&mut diags);
        if let Some(doc) = doc {
            parsed.push(doc);
        }
    }
    let blocked = cross_file(&parsed, &mut diagnostics);
    let loaded = parsed
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !blocked.contains(i))
        .filter_map(|(_, p)| p.set.map(|set| Loaded { file: p.file, set }))
        .collect();
    sort(&mut diagnostics);
    (loaded, diagnostics)
}

/// Parses and checks text as if read from `file` (whose directory anchors relative
/// `cwd`s): what [`load_file`] does after reading.
pub fn parse_str(
    text: &str,
    format: Format,
    file: &Path,
    opts: &LoadOptions<'_>,
) -> (Option<ScheduleSet>, Vec<Diagnostic>) {
    let (parsed, mut diagnostics) = document::parse(text, format, file, opts);
    sort(&mut diagnostics);
    (parsed.and_then(|p| p.set), diagnostics)
}

fn load_one(path: &Path, opts: &LoadOptions<'_>) -> (Option<document::Parsed>, Vec<Diagnostic>) {
    let at_start = |message: String| Diagnostic {
        file: path.to_path_buf(),
        line: 1,
        column: 1,
        path: String::new(),
        message,
        severity: Severity::Error,
    };
    let Some(format) = Format::from_path(path) else {
        return (
            None,
            vec![at_start(
                "unknown file type: use .yaml, .yml, .json or .toml".to_owned(),
            )],
        );
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => return (None, vec![at_start(format!("cannot read the file: {e}"))]),
    };
    let (parsed, mut diagnostics) = document::parse(&text, format, path, opts);
    sort(&mut diagnostics);
    (parsed, diagnostics)
}

/// Reports names declared twice across documents, at every occurrence after the first;
/// returns the indices of the documents that must not load because of it.
fn cross_file(
    parsed: &[document::Parsed],
    diagnostics: &mut Vec<Diagnostic>,
) -> std::collections::BTreeSet<usize> {
    let mut blocked = std::collections::BTreeSet::new();
    let mut owners: BTreeMap<String, (PathBuf, tree::Mark)> = BTreeMap::new();
    let mut members: BTreeMap<String, (PathBuf, tree::Mark)> = BTreeMap::new();
    for (i, doc) in parsed.iter().enumerate() {
        let mut clash =
            |first: &(PathBuf, tree::Mark), mark: tree::Mark, path: String, what: String| {
                diagnostics.push(Diagnostic {
                    file: doc.file.clone(),
                    line: mark.line,
                    column: mark.column,
                    path,
                    message: format!(
                        "{what} is also declared at {}:{}:{}",
                        first.0.display(),
                        first.1.line,
                        first.1.column
                    ),
                    severity: Severity::Error,
                });
                blocked.insert(i);
            };
        if let Some((owner, mark)) = &doc.owner {
            match owners.get(owner) {
                Some(first) => clash(
                    first,
                    *mark,
                    "metadata.name".into(),
                    format!("document {owner}"),
                ),
                None => {
                    owners.insert(owner.clone(), (doc.file.clone(), *mark));
                }
            }
        }
        for (name, member, mark) in &doc.members {
            match members.get(name) {
                Some(first) => clash(
                    first,
                    *mark,
                    format!("schedules.{member}"),
                    format!("schedule {name}"),
                ),
                None => {
                    members.insert(name.clone(), (doc.file.clone(), *mark));
                }
            }
        }
    }
    blocked
}

fn sort(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by(|a, b| {
        (&a.file, a.line, a.column, a.severity).cmp(&(&b.file, b.line, b.column, b.severity))
    });
}

#[cfg(test)]
mod tests;
