//! The position-carrying tree a declaration file is parsed into before it is typed:
//! every node knows its line and column, so any problem found later (by serde or by
//! validation, both of which speak in field paths) can be pointed at in the source.
//!
//! YAML and JSON are read with the YAML 1.2 event parser (JSON is YAML 1.2); TOML with
//! the `toml` crate's spanned document. Scalars are resolved with the YAML 1.2 core
//! schema; what would make a file mean different things to different readers (merge
//! keys, duplicate keys, custom tags, several documents) is refused here.

use std::collections::BTreeMap;

use serde_json::{Number, Value};
use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle, Span};

/// A 1-based line and column (columns count characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct Mark {
    pub line: usize,
    pub column: usize,
}

impl Mark {
    pub(crate) const START: Mark = Mark { line: 1, column: 1 };
}

#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub mark: Mark,
    pub kind: Kind,
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// `text` is set for a YAML plain scalar that resolved to something other than a
    /// string (`8080`, `true`): where a type wants text, that text is what was meant.
    Scalar {
        value: Value,
        text: Option<String>,
    },
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub key: String,
    pub key_mark: Mark,
    pub value: Node,
}

/// A problem found while building the tree.
pub(crate) type Problem = (Mark, String);

impl Node {
    pub(crate) fn entries(&self) -> Option<&[Entry]> {
        match &self.kind {
            Kind::Map(entries) => Some(entries),
            _ => None,
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Entry> {
        self.entries()?.iter().find(|e| e.key == key)
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::Scalar {
                value: Value::String(s),
                ..
            } => Some(s),
            _ => None,
        }
    }

    /// A tree for a JSON value, every node at `mark`.
    pub(crate) fn from_json(value: &Value, mark: Mark) -> Node {
        let kind = match value {
            Value::Array(items) => {
                Kind::Seq(items.iter().map(|v| Node::from_json(v, mark)).collect())
            }
            Value::Object(map) => Kind::Map(
                map.iter()
                    .map(|(k, v)| Entry {
                        key: k.clone(),
                        key_mark: mark,
                        value: Node::from_json(v, mark),
                    })
                    .collect(),
            ),
            scalar => Kind::Scalar {
                value: scalar.clone(),
                text: None,
            },
        };
        Node { mark, kind }
    }

    /// The tree as JSON, for serde.
    pub(crate) fn to_json(&self) -> Value {
        match &self.kind {
            Kind::Scalar { value, .. } => value.clone(),
            Kind::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Kind::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|e| (e.key.clone(), e.value.to_json()))
                    .collect(),
            ),
        }
    }

    /// Turns every plain scalar below (and at) this node into its text; true when
    /// anything changed.
    pub(crate) fn all_to_text(&mut self) -> bool {
        match &mut self.kind {
            Kind::Scalar { value, text } => match text.take() {
                Some(t) => {
                    *value = Value::String(t);
                    true
                }
                None => false,
            },
            Kind::Seq(items) => items.iter_mut().fold(false, |c, n| n.all_to_text() | c),
            Kind::Map(entries) => entries
                .iter_mut()
                .fold(false, |c, e| e.value.all_to_text() | c),
        }
    }

    /// Follows a field path (`policies.max_runs`, `action.args[2]`, `env.A.B`) as far as
    /// the tree goes: the indices taken (map entry or sequence item) and the part of the
    /// path left unmatched. Map keys may contain dots, so the longest key that fits wins.
    pub(crate) fn walk<'p>(&self, path: &'p str) -> (Vec<usize>, &'p str) {
        let mut node = self;
        let mut rest = path.trim_start_matches('.');
        let mut steps = Vec::new();
        loop {
            if rest.is_empty() {
                return (steps, rest);
            }
            let next = match &node.kind {
                Kind::Map(entries) => entries
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| {
                        rest.strip_prefix(e.key.as_str())
                            .is_some_and(|r| r.is_empty() || r.starts_with(['.', '[']))
                    })
                    .max_by_key(|(_, e)| e.key.len())
                    .map(|(i, e)| (i, &e.value, e.key.len())),
                Kind::Seq(items) => rest
                    .strip_prefix('[')
                    .and_then(|r| r.split_once(']'))
                    .and_then(|(digits, _)| Some((digits.parse::<usize>().ok()?, digits.len())))
                    .and_then(|(i, len)| Some((i, items.get(i)?, len + 2))),
                Kind::Scalar { .. } => None,
            };
            let Some((index, child, consumed)) = next else {
                return (steps, rest);
            };
            steps.push(index);
            node = child;
            rest = rest[consumed..].trim_start_matches('.');
        }
    }

    pub(crate) fn at(&self, steps: &[usize]) -> &Node {
        steps.iter().fold(self, |node, &i| match &node.kind {
            Kind::Map(entries) => entries.get(i).map_or(node, |e| &e.value),
            Kind::Seq(items) => items.get(i).unwrap_or(node),
            Kind::Scalar { .. } => node,
        })
    }

    pub(crate) fn at_mut(&mut self, steps: &[usize]) -> Option<&mut Node> {
        let Some((&first, rest)) = steps.split_first() else {
            return Some(self);
        };
        let child = match &mut self.kind {
            Kind::Map(entries) => &mut entries.get_mut(first)?.value,
            Kind::Seq(items) => items.get_mut(first)?,
            Kind::Scalar { .. } => return None,
        };
        child.at_mut(rest)
    }

    /// Where a field path points: the value when it exists, else the nearest enclosing
    /// node that does.
    pub(crate) fn locate(&self, path: &str) -> Mark {
        let (steps, _) = self.walk(path);
        self.at(&steps).mark
    }
}

/// Parses YAML (or JSON) text into one tree; every problem found is returned.
pub(crate) fn parse_yaml(text: &str) -> (Option<Node>, Vec<Problem>) {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    let mut documents = 0;
    while let Some(next) = parser.next_event() {
        let (event, span) = match next {
            Ok(pair) => pair,
            Err(e) => {
                let info = e.info();
                let message = if info.is_empty() {
                    "syntax error".to_owned()
                } else {
                    info
                };
                builder.problems.push((marker(e.marker()), message));
                return (None, builder.problems);
            }
        };
        let mark = start(&span);
        let tag_mark = span.tag_start.as_ref().map_or(mark, marker);
        match event {
            Event::DocumentStart(..) => {
                documents += 1;
                if documents > 1 {
                    builder
                        .problems
                        .push((mark, "a file holds one document; start another file".into()));
                    break;
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                let tag = tag.map(|t| {
                    t.core_suffix()
                        .map(str::to_owned)
                        .ok_or_else(|| t.original())
                });
                let node = builder.scalar(&text, style, tag, mark, tag_mark);
                builder.finish(node, anchor);
            }
            Event::Alias(id) => match builder.anchors.get(&id) {
                Some(node) => {
                    let node = node.clone();
                    builder.finish(node, 0);
                }
                None => builder.problems.push((mark, "unknown alias".into())),
            },
            Event::SequenceStart(_, anchor, tag) => {
                builder.refuse_tag(tag.map(|t| t.original()), tag_mark);
                builder
                    .stack
                    .push(Frame::new(mark, anchor, Kind::Seq(Vec::new())));
            }
            Event::MappingStart(_, anchor, tag) => {
                builder.refuse_tag(tag.map(|t| t.original()), tag_mark);
                builder
                    .stack
                    .push(Frame::new(mark, anchor, Kind::Map(Vec::new())));
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(frame) = builder.stack.pop() {
                    let node = Node {
                        mark: frame.mark,
                        kind: frame.kind,
                    };
                    builder.finish(node, frame.anchor);
                }
            }
            _ => {}
        }
    }
    if builder.root.is_none() && builder.problems.is_empty() {
        builder
            .problems
            .push((Mark::START, "the file is empty".into()));
    }
    (builder.root, builder.problems)
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    anchors: BTreeMap<usize, Node>,
    root: Option<Node>,
    problems: Vec<Problem>,
}

struct Frame {
    mark: Mark,
    anchor: usize,
    kind: Kind,
    /// A mapping's key waiting for its value; `None` inside it when the key was refused.
    pending: Option<Option<(String, Mark)>>,
}

impl Frame {
    fn new(mark: Mark, anchor: usize, kind: Kind) -> Self {
        Self {
            mark,
            anchor,
            kind,
            pending: None,
        }
    }
}

impl Builder {
    /// `tag`: `Ok(core suffix)` for a YAML core tag (`!!str`), `Err(spelling)` otherwise.
    fn scalar(
        &mut self,
        text: &str,
        style: ScalarStyle,
        tag: Option<Result<String, String>>,
        mark: Mark,
        tag_mark: Mark,
    ) -> Node {
        let kind = match (tag, style) {
            (Some(Ok(core)), _) if core == "str" => string(text),
            (Some(Err(spelling)), _) => {
                self.problems
                    .push((tag_mark, format!("tag {spelling} is not supported")));
                string(text)
            }
            (_, ScalarStyle::Plain) => match resolve_plain(text) {
                Value::String(s) => string(&s),
                value => Kind::Scalar {
                    value,
                    text: Some(text.to_owned()),
                },
            },
            _ => string(text),
        };
        Node { mark, kind }
    }

    fn refuse_tag(&mut self, spelling: Option<String>, mark: Mark) {
        if let Some(spelling) = spelling {
            self.problems
                .push((mark, format!("tag {spelling} is not supported")));
        }
    }

    /// Places a finished node: as the root, a sequence item, a mapping key or value.
    fn finish(&mut self, node: Node, anchor: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        let Some(frame) = self.stack.last_mut() else {
            self.root = Some(node);
            return;
        };
        match (&mut frame.kind, frame.pending.take()) {
            (Kind::Seq(items), _) => items.push(node),
            (Kind::Map(_), None) => {
                let key = match &node.kind {
                    Kind::Scalar { value, text } => Some(match (value, text) {
                        (_, Some(t)) => t.clone(),
                        (Value::String(s), None) => s.clone(),
                        (other, None) => other.to_string(),
                    }),
                    _ => None,
                };
                let key = match key {
                    Some(k)
                        if k == "<<" && matches!(&node.kind, Kind::Scalar { text: None, .. }) =>
                    {
                        // `<<` only merges in YAML 1.1 readers; others take it as a key.
                        // Either reading would be surprising somewhere, so neither is allowed.
                        self.problems.push((
                            node.mark,
                            "merge keys (<<) are not supported: write the keys out".into(),
                        ));
                        None
                    }
                    Some(k) => Some((k, node.mark)),
                    None => {
                        self.problems
                            .push((node.mark, "a mapping key must be a plain value".into()));
                        None
                    }
                };
                frame.pending = Some(key);
            }
            // The key was refused; so is its value.
            (Kind::Map(_), Some(None)) => {}
            (Kind::Map(entries), Some(Some((key, key_mark)))) => {
                if let Some(first) = entries.iter().find(|e| e.key == key) {
                    let message = format!(
                        "duplicate key {key:?} (first at line {}, column {})",
                        first.key_mark.line, first.key_mark.column
                    );
                    self.problems.push((key_mark, message));
                } else {
                    entries.push(Entry {
                        key,
                        key_mark,
                        value: node,
                    });
                }
            }
            (Kind::Scalar { .. }, _) => {}
        }
    }
}

fn string(text: &str) -> Kind {
    Kind::Scalar {
        value: Value::String(text.to_owned()),
        text: None,
    }
}

/// The YAML 1.2 core schema for plain scalars. Infinities and NaN stay text: JSON has
/// no such numbers, and no field of a schedule wants them.
fn resolve_plain(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    let int = if let Some(oct) = text.strip_prefix("0o") {
        u64::from_str_radix(oct, 8).ok().map(Number::from)
    } else if let Some(hex) = text.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok().map(Number::from)
    } else if is_decimal_int(text) {
        text.parse::<u64>()
            .map(Number::from)
            .or_else(|_| text.parse::<i64>().map(Number::from))
            .ok()
    } else {
        None
    };
    if let Some(n) = int {
        return Value::Number(n);
    }
    if is_core_float(text)
        && let Some(n) = text.parse::<f64>().ok().and_then(Number::from_f64)
    {
        return Value::Number(n);
    }
    Value::String(text.to_owned())
}

fn is_decimal_int(text: &str) -> bool {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`
fn is_core_float(text: &str) -> bool {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match body.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (body, None),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((whole, frac)) => {
            digits(whole) && digits(frac) && (!whole.is_empty() || !frac.is_empty())
        }
        None => !mantissa.is_empty() && digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

fn marker(m: &serde_saphyr::granit_parser::Marker) -> Mark {
    Mark {
        line: m.line(),
        column: m.col() + 1,
    }
}

fn start(span: &Span) -> Mark {
    marker(&span.start)
}

/// Parses TOML text into a tree; positions come from the byte spans of the parser.
pub(crate) fn parse_toml(text: &str) -> (Option<Node>, Vec<Problem>) {
    let lines = LineIndex::new(text);
    match toml::de::DeTable::parse(text) {
        Ok(table) => {
            let mark = Mark::START;
            let node = toml_table(table.get_ref(), mark, &lines);
            (Some(node), Vec::new())
        }
        Err(e) => {
            let mark = e.span().map_or(Mark::START, |s| lines.mark(s.start));
            (None, vec![(mark, e.message().trim().to_owned())])
        }
    }
}

fn toml_table(table: &toml::de::DeTable<'_>, mark: Mark, lines: &LineIndex) -> Node {
    let entries = table
        .iter()
        .map(|(key, value)| Entry {
            key: key.get_ref().to_string(),
            key_mark: lines.mark(key.span().start),
            value: toml_value(value, lines),
        })
        .collect();
    Node {
        mark,
        kind: Kind::Map(entries),
    }
}

fn toml_value(value: &toml::Spanned<toml::de::DeValue<'_>>, lines: &LineIndex) -> Node {
    use toml::de::DeValue;
    let mark = lines.mark(value.span().start);
    let scalar = |value: Value| Node {
        mark,
        kind: Kind::Scalar { value, text: None },
    };
    match value.get_ref() {
        DeValue::String(s) => scalar(Value::String(s.to_string())),
        DeValue::Integer(i) => scalar(
            i64::from_str_radix(i.as_str(), i.radix())
                .map(|n| Value::Number(n.into()))
                .unwrap_or_else(|_| Value::String(i.to_string())),
        ),
        DeValue::Float(f) => scalar(
            f.as_str()
                .parse::<f64>()
                .ok()
                .and_then(Number::from_f64)
                .map_or_else(|| Value::String(f.to_string()), Value::Number),
        ),
        DeValue::Boolean(b) => scalar(Value::Bool(*b)),
        // An offset date-time is what `at` wants; it is passed on as its RFC 3339 text.
        DeValue::Datetime(d) => scalar(Value::String(d.to_string())),
        DeValue::Array(items) => Node {
            mark,
            kind: Kind::Seq(items.iter().map(|v| toml_value(v, lines)).collect()),
        },
        DeValue::Table(table) => toml_table(table, mark, lines),
    }
}

/// Byte offsets to lines and character columns.
struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    fn new(text: &'a str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self { text, starts }
    }

    fn mark(&self, offset: usize) -> Mark {
        let line = self.starts.partition_point(|&s| s <= offset).max(1);
        let start = self.starts.get(line - 1).copied().unwrap_or(0);
        let column = self
            .text
            .get(start..offset.min(self.text.len()))
            .map_or(0, |s| s.chars().count());
        Mark {
            line,
            column: column + 1,
        }
    }
}
