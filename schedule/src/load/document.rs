//! From a position tree to a checked [`ScheduleSet`]: the document's header, each
//! member typed on its own (so one broken member does not hide another's problems),
//! validated, allow-list warnings, and relative `cwd`s made absolute. Every problem is
//! a [`Diagnostic`] at the offending value.

use std::{
    collections::BTreeMap,
    path::{Component, Path, PathBuf},
};

use serde::de::DeserializeOwned;

use super::{
    Diagnostic, Format, LoadOptions, Severity,
    tree::{self, Kind, Mark, Node},
};
use crate::{
    declaration::{API_VERSION, KIND, Metadata, ScheduleSet, valid_part},
    spec::{Action, FollowUp, ScheduleSpec, Trigger},
    validate::{Context, validate},
};

/// A document as far as it could be read: enough for the cross-file checks even when
/// it has errors; `set` only when it has none.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub file: PathBuf,
    /// The owner key and where `metadata.name` is.
    pub owner: Option<(String, Mark)>,
    /// Stored name, member key, and where the key is.
    pub members: Vec<(String, String, Mark)>,
    pub set: Option<ScheduleSet>,
}

const PART_RULE: &str =
    "use letters, digits, '-', '_' and '.' (1 to 64 characters, not starting with '.')";
/// Serde gives up on a member after this many structural repairs; far above any real file.
const MAX_REPAIRS: usize = 256;

struct Sink<'a> {
    file: &'a Path,
    diagnostics: Vec<Diagnostic>,
}

impl Sink<'_> {
    fn push(&mut self, severity: Severity, mark: Mark, path: &str, message: impl Into<String>) {
        self.diagnostics.push(Diagnostic {
            file: self.file.to_path_buf(),
            line: mark.line,
            column: mark.column,
            path: path.to_owned(),
            message: message.into(),
            severity,
        });
    }

    fn error(&mut self, mark: Mark, path: &str, message: impl Into<String>) {
        self.push(Severity::Error, mark, path, message);
    }

    fn has_errors(&self) -> bool {
        self.error_count() > 0
    }

    fn error_count(&self) -> usize {
        self.diagnostics.iter().filter(|d| d.is_error()).count()
    }
}

pub(crate) fn parse(
    text: &str,
    format: Format,
    file: &Path,
    opts: &LoadOptions<'_>,
) -> (Option<Parsed>, Vec<Diagnostic>) {
    let mut sink = Sink {
        file,
        diagnostics: Vec::new(),
    };
    let (root, problems) = match format {
        Format::Yaml => tree::parse_yaml(text),
        Format::Json => match json_syntax(text) {
            // serde_json words JSON syntax errors better than a YAML parser would.
            Some(problem) => (None, vec![problem]),
            None => tree::parse_yaml(text),
        },
        Format::Toml => tree::parse_toml(text),
    };
    for (mark, message) in problems {
        sink.error(mark, "", message);
    }
    let Some(root) = root else {
        return (None, sink.diagnostics);
    };
    let parsed = document(&root, format, opts, &mut sink);
    (Some(parsed), sink.diagnostics)
}

fn json_syntax(text: &str) -> Option<tree::Problem> {
    let e = serde_json::from_str::<serde::de::IgnoredAny>(text).err()?;
    let message = e.to_string();
    let message = message
        .split(" at line ")
        .next()
        .unwrap_or(&message)
        .to_owned();
    Some((
        Mark {
            line: e.line().max(1),
            column: e.column().max(1),
        },
        message,
    ))
}

fn document(root: &Node, format: Format, opts: &LoadOptions<'_>, sink: &mut Sink<'_>) -> Parsed {
    let mut parsed = Parsed {
        file: sink.file.to_path_buf(),
        owner: None,
        members: Vec::new(),
        set: None,
    };
    let Some(entries) = root.entries() else {
        sink.error(
            root.mark,
            "",
            "a document is a mapping of apiVersion, kind, metadata and schedules",
        );
        return parsed;
    };
    for entry in entries {
        if !matches!(
            entry.key.as_str(),
            "apiVersion" | "kind" | "metadata" | "schedules"
        ) {
            sink.error(
                entry.key_mark,
                &entry.key,
                format!(
                    "unknown field `{}`, expected one of `apiVersion`, `kind`, `metadata`, `schedules`",
                    entry.key
                ),
            );
        }
    }
    let api_version = fixed(root, "apiVersion", API_VERSION, sink);
    let kind = fixed(root, "kind", KIND, sink);
    let metadata = metadata(root, format, sink);
    if let Some(m) = &metadata
        && let Some(name) = root.get("metadata").and_then(|e| e.value.get("name"))
    {
        parsed.owner = Some((format!("{}/{}", m.project, m.name), name.value.mark));
    }
    let project = metadata.as_ref().map(|m| m.project.as_str());
    let schedules = schedules(root, format, project, opts, sink, &mut parsed.members);
    if !sink.has_errors()
        && let (Some(api_version), Some(kind), Some(metadata)) = (api_version, kind, metadata)
    {
        parsed.set = Some(ScheduleSet {
            api_version,
            kind,
            metadata,
            schedules,
        });
    }
    parsed
}

/// A header field that must have one value (`apiVersion: studio/v1`).
fn fixed(root: &Node, key: &str, want: &str, sink: &mut Sink<'_>) -> Option<String> {
    let Some(entry) = root.get(key) else {
        sink.error(root.mark, key, format!("is required ({want})"));
        return None;
    };
    let got = text_of(&entry.value);
    if got.as_deref() == Some(want) {
        return got;
    }
    let shown = got.map_or_else(|| "not text".to_owned(), |g| format!("{g:?}"));
    sink.error(
        entry.value.mark,
        key,
        format!("must be {want}, not {shown}"),
    );
    None
}

fn text_of(node: &Node) -> Option<String> {
    match &node.kind {
        Kind::Scalar { text: Some(t), .. } => Some(t.clone()),
        _ => node.as_str().map(str::to_owned),
    }
}

fn metadata(root: &Node, format: Format, sink: &mut Sink<'_>) -> Option<Metadata> {
    let Some(entry) = root.get("metadata") else {
        sink.error(root.mark, "metadata", "is required (name and project)");
        return None;
    };
    let metadata: Metadata = typed(&entry.value, "metadata", format, sink)?;
    let mut ok = true;
    for (field, value) in [("name", &metadata.name), ("project", &metadata.project)] {
        if !valid_part(value) {
            let path = format!("metadata.{field}");
            sink.error(entry.value.locate(field), &path, PART_RULE);
            ok = false;
        }
    }
    ok.then_some(metadata)
}

fn schedules(
    root: &Node,
    format: Format,
    project: Option<&str>,
    opts: &LoadOptions<'_>,
    sink: &mut Sink<'_>,
    members: &mut Vec<(String, String, Mark)>,
) -> BTreeMap<String, ScheduleSpec> {
    let mut out = BTreeMap::new();
    let Some(entry) = root.get("schedules") else {
        return out;
    };
    let entries = match &entry.value.kind {
        Kind::Map(entries) => entries,
        Kind::Scalar {
            value: serde_json::Value::Null,
            ..
        } => return out,
        _ => {
            sink.error(
                entry.value.mark,
                "schedules",
                "must be a mapping of member names to schedules",
            );
            return out;
        }
    };
    for member in entries {
        let path = format!("schedules.{}", member.key);
        if !valid_part(&member.key) {
            sink.error(member.key_mark, &path, format!("member name: {PART_RULE}"));
        } else if let Some(project) = project {
            members.push((
                format!("{project}/{}", member.key),
                member.key.clone(),
                member.key_mark,
            ));
        }
        if let Some(spec) = schedule(&member.value, &path, format, opts, sink) {
            out.insert(member.key.clone(), spec);
        }
    }
    out
}

/// One member: typed, validated, its allow-list checked and its `cwd` made absolute.
fn schedule(
    node: &Node,
    path: &str,
    format: Format,
    opts: &LoadOptions<'_>,
    sink: &mut Sink<'_>,
) -> Option<ScheduleSpec> {
    let mut node = node.clone();
    if let Kind::Map(entries) = &mut node.kind
        && let Some(i) = entries.iter().position(|e| e.key == "name")
    {
        let name = entries.remove(i);
        sink.error(
            name.key_mark,
            &format!("{path}.name"),
            "a member may not set name: its stored name is <project>/<member key>",
        );
    }
    if format == Format::Yaml {
        // An action is an internally tagged enum: serde buffers it untyped, so a plain
        // `8080` in `args` would reach the String field as a number. Every field of an
        // action is text, so its plain scalars are taken as written.
        text_actions(&mut node);
    }
    // The two required parts are typed on their own first; a broken one is replaced by
    // a stand-in that validates, so that the rest of the member is still checked.
    let errors_before = sink.error_count();
    let trigger = serde_json::json!({"every": "1h"});
    stand_in::<Trigger>(&mut node, "trigger", trigger, path, format, sink);
    let action = serde_json::json!({"kind": "command", "executable": "true"});
    stand_in::<Action>(&mut node, "action", action, path, format, sink);
    let mut spec: ScheduleSpec = typed(&node, path, format, sink)?;
    // Relative to the document's directory, made absolute before validation (which
    // takes only absolute ones); an empty one is left for validation to name.
    if let Some(cwd) = spec.cwd.take_if(|c| !c.is_empty()) {
        match absolute_cwd(&cwd, sink.file) {
            Ok(abs) => spec.cwd = Some(abs),
            Err(reason) => sink.error(node.locate("cwd"), &join(path, "cwd"), reason),
        }
    }
    let broken = sink.error_count() > errors_before;
    // Every problem at once: allow-list warnings do not wait for the member to be valid.
    if let Some(list) = opts.allowlist {
        for (field, exe) in commands(&spec) {
            if !list.iter().any(|e| e == exe) {
                sink.push(
                    Severity::Warning,
                    node.locate(&field),
                    &join(path, &field),
                    crate::validate::not_allowed(exe),
                );
            }
        }
    }
    // A past `at` is the daemon's call (it keeps one already stored unchanged, so an
    // exported one-shot re-applies), not a local error.
    if let (Trigger::At(text), Some(now)) = (&spec.trigger, opts.now_ms)
        && text
            .parse::<jiff::Timestamp>()
            .is_ok_and(|t| t.as_millisecond() <= now)
    {
        sink.push(
            Severity::Warning,
            node.locate("trigger.at"),
            &join(path, "trigger.at"),
            format!("{text} is in the past: the daemon accepts it only if it is already stored unchanged"),
        );
    }
    let ctx = Context {
        default_zone: opts.default_zone,
        allowlist: None,
        secrets: None,
        endpoints: None,
        now_ms: None,
        require_name: false,
    };
    let spec = match validate(spec, &ctx) {
        Ok(v) => v.spec,
        Err(errors) => {
            for e in errors {
                sink.error(node.locate(&e.path), &join(path, &e.path), e.reason);
            }
            return None;
        }
    };
    (!broken).then_some(spec)
}

fn stand_in<T: DeserializeOwned>(
    node: &mut Node,
    key: &str,
    stand_in: serde_json::Value,
    path: &str,
    format: Format,
    sink: &mut Sink<'_>,
) {
    let Kind::Map(entries) = &mut node.kind else {
        return;
    };
    let Some(entry) = entries.iter_mut().find(|e| e.key == key) else {
        return;
    };
    let before = sink.error_count();
    let typed = typed::<T>(&entry.value, &join(path, key), format, sink);
    if typed.is_none() || sink.error_count() > before {
        entry.value = Node::from_json(&stand_in, entry.value.mark);
    }
}

fn text_actions(node: &mut Node) {
    if let Kind::Map(entries) = &mut node.kind {
        for e in entries {
            match e.key.as_str() {
                "action" => {
                    e.value.all_to_text();
                }
                "on_success" | "on_fail" => text_actions(&mut e.value),
                _ => {}
            }
        }
    }
}

/// Every command executable of a spec and its chain, with its field path.
fn commands(spec: &ScheduleSpec) -> Vec<(String, &str)> {
    fn action<'a>(path: &str, a: &'a Action, out: &mut Vec<(String, &'a str)>) {
        if let Action::Command { executable, .. } = a {
            out.push((format!("{path}.executable"), executable));
        }
    }
    fn chain<'a>(path: String, f: Option<&'a FollowUp>, out: &mut Vec<(String, &'a str)>) {
        let Some(f) = f else { return };
        action(&format!("{path}.action"), &f.action, out);
        chain(format!("{path}.on_success"), f.on_success.as_deref(), out);
        chain(format!("{path}.on_fail"), f.on_fail.as_deref(), out);
    }
    let mut out = Vec::new();
    action("action", &spec.action, &mut out);
    chain("on_success".into(), spec.on_success.as_deref(), &mut out);
    chain("on_fail".into(), spec.on_fail.as_deref(), &mut out);
    out
}

/// A relative `cwd` is relative to the document's directory, which must exist (the
/// `cwd` itself need not, yet: the job may create it). The directory is canonical; the
/// relative part is normalised lexically (`.` dropped, `..` taken back), so the stored
/// path is the same however the document was reached.
fn absolute_cwd(cwd: &str, file: &Path) -> Result<String, String> {
    if Path::new(cwd).is_absolute() {
        return Ok(cwd.to_owned());
    }
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let base = std::fs::canonicalize(dir).map_err(|e| {
        format!(
            "a relative cwd needs the document's directory {}: {e}",
            dir.display()
        )
    })?;
    let mut abs = base;
    for c in Path::new(cwd).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                abs.pop();
            }
            other => abs.push(other),
        }
    }
    abs.into_os_string()
        .into_string()
        .map_err(|_| "the document's directory is not valid UTF-8".to_owned())
}

fn join(base: &str, sub: &str) -> String {
    match (base.is_empty(), sub.is_empty()) {
        (_, true) => base.to_owned(),
        (true, false) => sub.to_owned(),
        _ if sub.starts_with('[') => format!("{base}{sub}"),
        _ => format!("{base}.{sub}"),
    }
}

/// Deserializes a subtree, reporting each structural problem at its place. After a
/// problem the offending entry is dropped and serde tries again, so that several
/// unknown keys or bad values in one member are all reported; a missing field ends it.
fn typed<T: DeserializeOwned>(
    node: &Node,
    base: &str,
    format: Format,
    sink: &mut Sink<'_>,
) -> Option<T> {
    let mut node = node.clone();
    let mut removed: Vec<String> = Vec::new();
    for _ in 0..MAX_REPAIRS {
        // After a repair the value is still returned, so that validation can report
        // what is wrong besides; the sink's errors keep the document from loading.
        let err = match serde_path_to_error::deserialize::<_, T>(node.to_json()) {
            Ok(value) => return Some(value),
            Err(err) => err,
        };
        let at = err.path().to_string();
        let at = if at == "." { String::new() } else { at };
        let message = err.into_inner().to_string();
        let (steps, rest) = node.walk(&at);
        let exact = rest.is_empty();
        // YAML: a plain `8080` or `true` where text is wanted is that text.
        if format == Format::Yaml
            && exact
            && message.starts_with("invalid type:")
            && node.at_mut(&steps).is_some_and(Node::all_to_text)
        {
            continue;
        }
        // Dropping a value can break its holder (an enum left without its variant): an
        // error there is a consequence of the one already reported.
        if removed.iter().any(|r| holds(&at, r)) && !message.starts_with("missing field") {
            return None;
        }
        if let Some(field) = quoted(&message, "missing field `") {
            if !removed.contains(&join(&at, field)) {
                sink.error(node.at(&steps).mark, &join(base, &at), message);
            }
            return None;
        }
        let variant = message.starts_with("unknown variant `");
        let named = quoted(&message, "unknown field `")
            .or_else(|| quoted(&message, "unknown variant `"))
            .map(str::to_owned);
        let named = named.as_deref();
        if let Some((holder, i)) = named.and_then(|name| named_entry(&node, &steps, exact, name)) {
            let entry = node.at(&holder).entries().and_then(|e| e.get(i))?;
            let mark = if named == Some(entry.key.as_str()) {
                entry.key_mark
            } else {
                entry.value.mark
            };
            let key = join(&path_of(&node, &holder), &entry.key);
            sink.error(mark, &join(base, &key), message);
            if variant {
                // An enum with an unknown variant is unusable as a whole.
                removed.push(path_of(&node, &holder));
                if !drop_node(&mut node, &holder) {
                    return None;
                }
            } else {
                if let Some(Node {
                    kind: Kind::Map(entries),
                    ..
                }) = node.at_mut(&holder)
                {
                    entries.remove(i);
                }
                removed.push(key);
            }
            continue;
        }
        sink.error(node.at(&steps).mark, &join(base, &at), message);
        // Drop the bad value and look for more, unless it was the whole subtree.
        if !exact || !drop_node(&mut node, &steps) {
            return None;
        }
        removed.push(at);
    }
    None
}

/// Whether `inner` is a field path strictly inside `outer`.
fn holds(outer: &str, inner: &str) -> bool {
    outer.is_empty() && !inner.is_empty()
        || inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with(['.', '[']))
}

/// Removes the mapping entry `steps` lead to; false when they lead elsewhere (the root,
/// a sequence item: removing one would shift the positions of the next).
fn drop_node(node: &mut Node, steps: &[usize]) -> bool {
    let Some((&last, parent)) = steps.split_last() else {
        return false;
    };
    match node.at_mut(parent) {
        Some(Node {
            kind: Kind::Map(entries),
            ..
        }) if last < entries.len() => {
            entries.remove(last);
            true
        }
        _ => false,
    }
}

/// Where an unknown field or variant `name` is: the mapping holding it (as steps) and
/// the entry's index. Serde's path ends at that mapping, or (for a field of a plain
/// struct) at the entry itself; an unknown `kind` is the entry holding that text.
fn named_entry(
    node: &Node,
    steps: &[usize],
    exact: bool,
    name: &str,
) -> Option<(Vec<usize>, usize)> {
    if !exact {
        return None;
    }
    let here = node.at(steps).entries().and_then(|entries| {
        entries
            .iter()
            .position(|e| e.key == name)
            .or_else(|| entries.iter().position(|e| e.value.as_str() == Some(name)))
    });
    if let Some(i) = here {
        return Some((steps.to_vec(), i));
    }
    let (&last, parent) = steps.split_last()?;
    let entry = node.at(parent).entries()?.get(last)?;
    (entry.key == name).then(|| (parent.to_vec(), last))
}

/// The field path of the node reached by `steps`.
fn path_of(node: &Node, steps: &[usize]) -> String {
    let mut path = String::new();
    let mut here = node;
    for &i in steps {
        match &here.kind {
            Kind::Map(entries) => match entries.get(i) {
                Some(e) => {
                    path = join(&path, &e.key);
                    here = &e.value;
                }
                None => break,
            },
            Kind::Seq(items) => match items.get(i) {
                Some(item) => {
                    path.push_str(&format!("[{i}]"));
                    here = item;
                }
                None => break,
            },
            Kind::Scalar { .. } => break,
        }
    }
    path
}

fn quoted<'m>(message: &'m str, prefix: &str) -> Option<&'m str> {
    let rest = message.strip_prefix(prefix)?;
    rest.split_once('`').map(|(name, _)| name)
}
