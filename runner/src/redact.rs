//! Redaction of a job's output (docs/OPERATIONS.md, "Redaction").
//!
//! Owns: the known values' patterns ([`Patterns`]: each value, its base64 forms at the
//! three alignments, its percent-encoded forms), the token shapes masked whatever a job
//! received, and the per-stream [`Redactor`] that holds a partial line so that a value
//! split across writes is still caught.
//!
//! Invariant: a byte leaves a [`Redactor`] only once no known value can still complete
//! over it; what it holds stays below [`HOLD_BOUND`] plus the longest pattern.

use std::sync::{Arc, LazyLock};

use aho_corasick::{
    AhoCorasick, AhoCorasickKind, Anchored, Input, MatchKind,
    automaton::Automaton,
    nfa::contiguous::{self, NFA},
};
use base64::{
    Engine as _,
    engine::general_purpose::{STANDARD, STANDARD_NO_PAD},
};
use regex::bytes::{CaptureLocations, Regex};
use serde::{Deserialize, Serialize};

/// A secret a job received: its output never shows `value`, only `[redacted:NAME]`. Its
/// `Debug` shows the name only.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redaction {
    pub name: String,
    pub value: String,
}

impl std::fmt::Debug for Redaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redaction")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The names of an environment, for `Debug` output that must not show values.
pub(crate) fn names(env: &[(String, String)]) -> Vec<&str> {
    env.iter().map(|(name, _)| name.as_str()).collect()
}

/// A partial line longer than this is written (but for a possible start of a value).
pub const HOLD_BOUND: usize = 16 * 1024;
/// Values shorter than this get no encoded forms: a 1-byte value's base64 fragment is
/// one character, which would mask ordinary output. (Secrets are at least 6 bytes.)
pub const MIN_ENCODED_LEN: usize = 6;
/// Values longer than this get no encoded forms either: their automata would grow with
/// every form (a 64 KiB value's take about 16 MB in each job's shim), and a credential
/// that long (a key file, a certificate) is printed raw if at all.
pub const MAX_ENCODED_LEN: usize = 4 * 1024;
/// What a token shape becomes.
const SHAPE_LABEL: &[u8] = b"[redacted]";

/// Token shapes that start with a literal, ASCII only (job output need not be UTF-8):
/// the whole match is masked.
static TOKENS: LazyLock<Regex> = LazyLock::new(|| {
    let shapes = [
        // OpenAI (sk-…, sk-proj-…) and Anthropic (sk-ant-…) keys.
        r"sk-[A-Za-z0-9_-]{20,}",
        r"gh[pousr]_[A-Za-z0-9]{36,}",
        r"github_pat_[A-Za-z0-9_]{22,}",
        r"xox[abprs]-[A-Za-z0-9-]{10,}",
        // AWS access key ids, long-lived (AKIA) and temporary (ASIA).
        r"(?:AKIA|ASIA)[0-9A-Z]{16}",
        // JWTs: header and payload are base64url JSON objects; the signature may be empty.
        r"eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*",
    ];
    compile(&format!(r"\b(?:{})", shapes.join("|")))
});

/// Shapes named by what precedes them, which is kept (`bearer`, `keep`):
/// `Authorization: Bearer`, and a `NAME=value` or `NAME: value` whose name looks like a
/// secret's. Matching starts at the keyword (`kw`): what precedes it in the name is kept
/// anyway. (Apart from [`TOKENS`]: together they lose its fast literal search.)
static NAMED: LazyLock<Regex> = LazyLock::new(|| {
    let named = [
        r#"(?P<bearer>(?i:authorization)["']?[ \t]*[:=][ \t]*["']?(?i:bearer)[ \t]+)[^\s"']+"#,
        r#"(?P<keep>(?i:(?P<kw>token|secret|passw(?:or)?d|api[_-]?key|private[_-]?key|credential))[A-Za-z0-9_.-]*["']?[ \t]*[:=][ \t]*["']?)(?P<value>[^\s"']+)"#,
    ];
    compile(&named.join("|"))
});

fn compile(pattern: &str) -> Regex {
    // Constant patterns, compiled by the tests.
    Regex::new(&format!("(?-u){pattern}")).expect("a token shape compiles")
}

#[derive(Debug, thiserror::Error)]
#[error("cannot compile the redaction patterns: {0}")]
pub struct PatternError(#[from] aho_corasick::BuildError);

/// The compiled known values of one job: shared by its streams' redactors. Its `Debug`
/// shows counts only (the automata spell the values out).
pub struct Patterns {
    automata: Option<Automata>,
    /// Per pattern, the index of its label.
    owner: Vec<u32>,
    /// Per redaction, `[redacted:NAME]`.
    labels: Vec<Vec<u8>>,
    longest: usize,
    /// A pattern holds a newline (so a value may span lines).
    multiline: bool,
}

/// Compact NFAs: DFAs were no faster here (the prefilter does the work) and took 30
/// times the memory (over 1 MiB for three secrets), in every job's shim.
struct Automata {
    /// Leftmost-longest, so that it gets a fast literal prefilter: where values may be.
    finder: AhoCorasick,
    /// Every occurrence, overlapping ones too, and whether a text may start one.
    exact: NFA,
}

/// A stretch of held bytes to replace by `labels[label]`.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
    label: u32,
}

impl std::fmt::Debug for Patterns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Patterns")
            .field("values", &self.labels.len())
            .field("patterns", &self.owner.len())
            .field("longest", &self.longest)
            .finish_non_exhaustive()
    }
}

impl Patterns {
    /// Every form of every value: the raw value (if not empty, whatever its length), and
    /// from [`MIN_ENCODED_LEN`] bytes its base64 and percent-encoded forms.
    pub fn new(redactions: &[Redaction]) -> Result<Self, PatternError> {
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut owner = Vec::new();
        let mut labels = Vec::new();
        for r in redactions.iter().filter(|r| !r.value.is_empty()) {
            let label = u32::try_from(labels.len()).unwrap_or(u32::MAX);
            labels.push(format!("[redacted:{}]", r.name).into_bytes());
            for form in forms(r.value.as_bytes()) {
                // A form two values share keeps its first name.
                if !patterns.contains(&form) {
                    patterns.push(form);
                    owner.push(label);
                }
            }
        }
        let longest = patterns.iter().map(Vec::len).max().unwrap_or(0);
        let multiline = patterns.iter().any(|p| p.contains(&b'\n'));
        let automata = if patterns.is_empty() {
            None
        } else {
            Some(Automata {
                finder: AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .kind(Some(AhoCorasickKind::ContiguousNFA))
                    .build(&patterns)?,
                exact: contiguous::Builder::new()
                    .match_kind(MatchKind::Standard)
                    .build(&patterns)?,
            })
        };
        Ok(Self {
            automata,
            owner,
            labels,
            longest,
            multiline,
        })
    }

    /// No known value: only shapes are masked.
    pub fn is_empty(&self) -> bool {
        self.automata.is_none()
    }

    /// The longest pattern, in bytes.
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// The heap bytes of the automata.
    pub fn memory_usage(&self) -> usize {
        self.automata
            .as_ref()
            .map_or(0, |a| a.finder.memory_usage() + a.exact.memory_usage())
    }

    /// `text` redacted as a whole (no value can continue past its end).
    pub fn redact(self: &Arc<Self>, text: &[u8]) -> Vec<u8> {
        let mut r = Redactor::new(self.clone());
        let mut out = r.feed(text);
        r.finish_into(&mut out);
        out
    }

    /// The union of every occurrence in `hay` that ends after `from`, cut to start there,
    /// sorted; overlapping occurrences become one span (so no part of either shows).
    fn spans(&self, hay: &[u8], from: usize, spans: &mut Vec<Span>) {
        spans.clear();
        let Some(a) = &self.automata else {
            return;
        };
        // Every occurrence starts inside a leftmost-longest match (none starts before the
        // leftmost, and the search resumes at each match's end): look only around those.
        let mut window: Option<(usize, usize)> = None;
        for m in a.finder.find_iter(hay) {
            let end = (m.end() - 1 + self.longest).min(hay.len());
            window = match window {
                Some((start, until)) if m.start() < until => Some((start, until.max(end))),
                Some(w) => {
                    self.occurrences(&a.exact, hay, w, from, spans);
                    Some((m.start(), end))
                }
                None => Some((m.start(), end)),
            };
        }
        if let Some(w) = window {
            self.occurrences(&a.exact, hay, w, from, spans);
        }
        spans.sort_unstable_by_key(|s| (s.start, std::cmp::Reverse(s.end)));
        let mut kept = 0;
        for i in 1..spans.len() {
            if spans[i].start < spans[kept].end {
                spans[kept].end = spans[kept].end.max(spans[i].end);
            } else {
                kept += 1;
                spans[kept] = spans[i];
            }
        }
        spans.truncate(kept + 1);
    }

    fn occurrences(
        &self,
        exact: &NFA,
        hay: &[u8],
        (start, end): (usize, usize),
        from: usize,
        spans: &mut Vec<Span>,
    ) {
        let Ok(found) = exact.try_find_overlapping_iter(Input::new(hay).span(start..end)) else {
            // Unreachable (an unanchored overlapping search of a Standard automaton):
            // should it happen, the window is masked rather than anything shown.
            spans.push(Span {
                start: start.max(from),
                end,
                label: 0,
            });
            return;
        };
        for m in found.filter(|m| m.end() > from) {
            spans.push(Span {
                start: m.start().max(from),
                end: m.end(),
                label: self.owner.get(m.pattern().as_usize()).copied().unwrap_or(0),
            });
        }
    }

    /// Where the earliest suffix of `hay` starts that a later byte could make a known
    /// value (a proper prefix of a pattern); `hay.len()` if none.
    fn partial_start(&self, hay: &[u8]) -> usize {
        match &self.automata {
            None => hay.len(),
            Some(a) => partial_start(&a.exact, hay, self.longest),
        }
    }

    fn label(&self, span: &Span) -> &[u8] {
        self.labels
            .get(span.label as usize)
            .map_or(SHAPE_LABEL, Vec::as_slice)
    }
}

/// Anchored walks from each start a proper prefix could have. Their total work is
/// bounded: past it the earliest start not yet ruled out is held, which is safe.
fn partial_start(a: &NFA, hay: &[u8], longest: usize) -> usize {
    let first = hay.len().saturating_sub(longest.saturating_sub(1));
    let Ok(start) = a.start_state(Anchored::Yes) else {
        return first;
    };
    let mut budget = 4 * longest + 4096;
    for s in first..hay.len() {
        let mut sid = start;
        let mut alive = true;
        for &b in &hay[s..] {
            sid = a.next_state(Anchored::Yes, sid, b);
            budget = budget.saturating_sub(1);
            if a.is_dead(sid) {
                alive = false;
                break;
            }
        }
        // A complete pattern that nothing extends is found whole, not held.
        if alive && (0..=255u8).any(|b| !a.is_dead(a.next_state(Anchored::Yes, sid, b))) {
            return s;
        }
        if budget == 0 {
            // `s` was ruled out; the next start was not.
            return s + 1;
        }
    }
    hay.len()
}

/// The raw value, and (from [`MIN_ENCODED_LEN`] to [`MAX_ENCODED_LEN`] bytes) its
/// standard and URL-safe base64 forms and its percent-encoded forms, without duplicates.
fn forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut forms = vec![value.to_vec()];
    let mut add = |form: Vec<u8>| {
        if !form.is_empty() && !forms.contains(&form) {
            forms.push(form);
        }
    };
    if (MIN_ENCODED_LEN..=MAX_ENCODED_LEN).contains(&value.len()) {
        for b64 in base64_forms(value) {
            add(url_safe(&b64));
            add(b64);
        }
        for pct in percent_forms(value) {
            add(pct);
        }
    }
    forms
}

/// The value alone (padded and not), and inside a longer text at each of the three
/// alignments: for `o` in 0..3 the encoding of `o` zero bytes then the value, keeping
/// only the characters whose 6 bits all come from the value.
fn base64_forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![
        STANDARD.encode(value).into_bytes(),
        STANDARD_NO_PAD.encode(value).into_bytes(),
    ];
    for o in 0..3 {
        let mut shifted = vec![0u8; o];
        shifted.extend_from_slice(value);
        let encoded = STANDARD_NO_PAD.encode(&shifted).into_bytes();
        let from = (8 * o).div_ceil(6);
        let to = 8 * (o + value.len()) / 6;
        out.push(encoded[from..to].to_vec());
    }
    out
}

fn url_safe(b64: &[u8]) -> Vec<u8> {
    b64.iter()
        .map(|&c| match c {
            b'+' => b'-',
            b'/' => b'_',
            c => c,
        })
        .collect()
}

/// What common encoders make of the value: every byte but the unreserved ones as `%XX`
/// (upper and lower case hex); JavaScript's `encodeURIComponent` (also leaves
/// `!'()*`); a form body (space as `+`). Forms equal to the value are dropped.
fn percent_forms(value: &[u8]) -> Vec<Vec<u8>> {
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~');
    let encode = |keep: &dyn Fn(u8) -> bool, space_plus: bool, hex: &[u8; 16]| {
        let mut out = Vec::with_capacity(value.len() * 3);
        for &b in value {
            if keep(b) {
                out.push(b);
            } else if space_plus && b == b' ' {
                out.push(b'+');
            } else {
                out.extend([b'%', hex[usize::from(b >> 4)], hex[usize::from(b & 15)]]);
            }
        }
        out
    };
    const UPPER: &[u8; 16] = b"0123456789ABCDEF";
    const LOWER: &[u8; 16] = b"0123456789abcdef";
    let component = |b: u8| unreserved(b) || matches!(b, b'!' | b'\'' | b'(' | b')' | b'*');
    [
        encode(&unreserved, false, UPPER),
        encode(&unreserved, false, LOWER),
        encode(&component, false, UPPER),
        encode(&unreserved, true, UPPER),
    ]
    .into_iter()
    .filter(|f| f != value)
    .collect()
}

/// Masks the token shapes in `text` into `out` (`scratch` holds the first pass).
fn mask_shapes(text: &[u8], scratch: &mut Vec<u8>, locs: &mut CaptureLocations, out: &mut Vec<u8>) {
    let mut tokens = TOKENS.find_iter(text).peekable();
    if tokens.peek().is_none() {
        return mask_named(text, locs, out);
    }
    scratch.clear();
    let mut written = 0;
    for m in tokens {
        scratch.extend_from_slice(&text[written..m.start()]);
        scratch.extend_from_slice(SHAPE_LABEL);
        written = m.end();
    }
    scratch.extend_from_slice(&text[written..]);
    // A label in a named value (`TOKEN=[redacted]`) is masked again, as the same label.
    mask_named(scratch, locs, out);
}

fn mask_named(text: &[u8], locs: &mut CaptureLocations, out: &mut Vec<u8>) {
    // The groups of NAMED, in order.
    let (bearer, keep, kw, value) = (1, 2, 3, 4);
    let mut written = 0;
    let mut at = 0;
    while let Some(m) = NAMED.captures_read_at(locs, text, at) {
        let (start, end) = (m.start(), m.end());
        at = end.max(start + 1);
        // A count is no secret: `prompt_tokens=12`, `"tokens": 1500,`.
        let is_count = locs.get(kw).is_some_and(|(s, e)| {
            text[s..e].eq_ignore_ascii_case(b"token")
                && locs.get(value).is_some_and(|(s, e)| {
                    let v = &text[s..e];
                    v.iter().any(u8::is_ascii_digit) && !v.iter().any(u8::is_ascii_alphabetic)
                })
        });
        if is_count {
            continue;
        }
        let kept = locs
            .get(bearer)
            .or(locs.get(keep))
            .map_or(start, |(_, e)| e);
        out.extend_from_slice(&text[written..kept]);
        out.extend_from_slice(SHAPE_LABEL);
        written = end;
    }
    out.extend_from_slice(&text[written..]);
}

/// Redacts one stream of one job as it comes: a line at a time; a partial line is held
/// until its newline, until it is long, or until [`Redactor::idle`], and then all of it
/// is written but for a possible start of a known value. Its `Debug` shows no byte held.
pub struct Redactor {
    patterns: Arc<Patterns>,
    buf: Vec<u8>,
    /// `buf[..start]` was written already; it is kept only while a known value starting
    /// in it may still complete.
    start: usize,
    /// Bytes came since the last cut.
    fresh: bool,
    spans: Vec<Span>,
    scratch: Vec<u8>,
    locs: CaptureLocations,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("patterns", &self.patterns)
            .field("held", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl Redactor {
    pub fn new(patterns: Arc<Patterns>) -> Self {
        Self {
            patterns,
            buf: Vec::new(),
            start: 0,
            fresh: false,
            spans: Vec::new(),
            scratch: Vec::new(),
            locs: NAMED.capture_locations(),
        }
    }

    /// What may be written now that `chunk` came.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.feed_into(chunk, &mut out);
        out
    }

    /// [`Redactor::feed`], appending to `out`.
    pub fn feed_into(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        if chunk.is_empty() {
            return;
        }
        self.buf.extend_from_slice(chunk);
        self.fresh = true;
        let len = self.buf.len();
        let line_end = chunk
            .iter()
            .rposition(|&b| b == b'\n')
            .map(|i| len - chunk.len() + i + 1);
        if len - line_end.unwrap_or(self.start) > HOLD_BOUND {
            // A long line: cut after its last blank near the end, if any, so that a shape
            // is less likely split.
            let near = len - 1024;
            let want = self.buf[near..]
                .iter()
                .rposition(|b| b.is_ascii_whitespace())
                .map_or(len, |i| near + i + 1);
            self.cut(want, Cut::Anywhere, out);
        } else if let Some(end) = line_end {
            self.cut(end, Cut::AfterNewline, out);
        }
    }

    /// The job has been quiet: what may be written now.
    pub fn idle(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.idle_into(&mut out);
        out
    }

    /// [`Redactor::idle`], appending to `out`.
    pub fn idle_into(&mut self, out: &mut Vec<u8>) {
        if self.fresh {
            self.cut(self.buf.len(), Cut::Anywhere, out);
        }
    }

    /// The stream ended: everything held, redacted.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.finish_into(&mut out);
        out
    }

    /// [`Redactor::finish`], appending to `out`.
    pub fn finish_into(&mut self, out: &mut Vec<u8>) {
        self.cut(self.buf.len(), Cut::End, out);
        self.buf.clear();
        self.start = 0;
    }

    /// Whether bytes came that [`Redactor::idle`] may write.
    pub fn pending(&self) -> bool {
        self.fresh
    }

    /// Bytes held (including those written but kept while a value may complete).
    pub fn held(&self) -> usize {
        self.buf.len()
    }

    /// Writes `buf[start..]` up to about `want`: never past a possible start of a value
    /// (unless at the end), never inside a value found, which is written whole.
    fn cut(&mut self, want: usize, how: Cut, out: &mut Vec<u8>) {
        let p = &*self.patterns;
        let len = self.buf.len();
        // What lies past `want` (a partial line) is still for `idle` to write.
        self.fresh = want < len;
        // Unless a value holds a newline, none found or to come crosses one: a cut after a
        // newline needs only the bytes before it (`len` stands for "not before `want`").
        let at_newline = how == Cut::AfterNewline && !p.multiline;
        let partial = if how == Cut::End || at_newline || p.is_empty() {
            len
        } else {
            p.partial_start(&self.buf)
        };
        let scan = if at_newline { want } else { len };
        p.spans(&self.buf[..scan], self.start, &mut self.spans);
        let mut cut = want.min(partial).max(self.start);
        if let Some(s) = self.spans.iter().find(|s| s.start < cut && cut < s.end) {
            cut = s.end;
        }
        let mut from = self.start;
        for span in self.spans.iter().take_while(|s| s.end <= cut) {
            let text = &self.buf[from..span.start];
            mask_shapes(text, &mut self.scratch, &mut self.locs, out);
            out.extend_from_slice(p.label(span));
            from = span.end;
        }
        mask_shapes(&self.buf[from..cut], &mut self.scratch, &mut self.locs, out);
        // A value may start in what was written and end in what comes: keep it.
        let keep = partial.min(cut);
        self.buf.drain(..keep);
        self.start = cut - keep;
    }
}

/// Where a cut is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Just after a newline.
    AfterNewline,
    /// Anywhere (a long line, a quiet job).
    Anywhere,
    /// At the end of the stream: nothing more will come.
    End,
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};

    use super::*;

    const VALUE: &str = "hunter2-Sup3r?S3cret>>";

    fn patterns(list: &[(&str, &str)]) -> Arc<Patterns> {
        let list: Vec<Redaction> = list
            .iter()
            .map(|(name, value)| Redaction {
                name: (*name).into(),
                value: (*value).into(),
            })
            .collect();
        Arc::new(Patterns::new(&list).expect("patterns"))
    }

    fn api() -> Arc<Patterns> {
        patterns(&[("API", VALUE), ("OTHER", "an0ther-v4lue"), ("PIN", "4711")])
    }

    fn redact(p: &Arc<Patterns>, text: &[u8]) -> String {
        String::from_utf8_lossy(&p.redact(text)).into_owned()
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    /// Feeds `pieces` with an idle pause after each, then finishes.
    fn stream(p: &Arc<Patterns>, pieces: &[&[u8]]) -> Vec<u8> {
        let mut r = Redactor::new(p.clone());
        let mut out = Vec::new();
        for piece in pieces {
            r.feed_into(piece, &mut out);
            assert!(!contains(&out, VALUE.as_bytes()));
            r.idle_into(&mut out);
            assert!(!contains(&out, VALUE.as_bytes()));
        }
        r.finish_into(&mut out);
        out
    }

    #[test]
    fn a_value_split_anywhere_across_pauses_is_caught() {
        let p = api();
        let line = format!("login with {VALUE} now\n");
        let want = b"login with [redacted:API] now\n";
        let bytes = line.as_bytes();
        for i in 0..=bytes.len() {
            assert_eq!(
                stream(&p, &[&bytes[..i], &bytes[i..]]),
                want,
                "split at {i}"
            );
            for j in i..=bytes.len() {
                let three = stream(&p, &[&bytes[..i], &bytes[i..j], &bytes[j..]]);
                assert_eq!(three, want, "split at {i} and {j}");
            }
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(stream(&p, &singles), want);
    }

    #[test]
    fn a_quiet_job_gets_its_partial_line_but_not_a_possible_start() {
        let p = api();
        let mut r = Redactor::new(p.clone());
        assert_eq!(r.feed(b"progress 40% hunter2-S"), b"");
        assert_eq!(r.idle(), b"progress 40% ");
        assert_eq!(r.idle(), b"", "nothing new");
        assert_eq!(r.feed(b"up3r?S3cret>> done"), b"");
        assert_eq!(r.idle(), b"[redacted:API] done");
        // A whole value at the end is written on idle, not held for ever.
        assert_eq!(r.feed(format!("again {VALUE}").as_bytes()), b"");
        assert_eq!(r.idle(), b"again [redacted:API]");
        assert_eq!(r.finish(), b"");
        // The partial line after a whole one is written on idle too.
        assert_eq!(r.feed(b"line\nwaiting"), b"line\n");
        assert!(r.pending());
        assert_eq!(r.idle(), b"waiting");
        assert!(!r.pending());
    }

    #[test]
    fn base64_at_every_alignment_inside_a_longer_text_is_caught() {
        let p = api();
        for prefix in ["", "u", "us", "use", "user:", "a-user:"] {
            for suffix in ["", "!", "!!", "!!!"] {
                let inner = format!("{prefix}{VALUE}{suffix}");
                for b64 in [
                    STANDARD.encode(&inner),
                    STANDARD_NO_PAD.encode(&inner),
                    URL_SAFE.encode(&inner),
                    URL_SAFE_NO_PAD.encode(&inner),
                ] {
                    let out = p.redact(format!("Authorization: Basic {b64}\n").as_bytes());
                    assert!(contains(&out, b"[redacted:API]"), "{inner:?} {b64}");
                    // No run of characters that encode only the value survives.
                    for form in base64_forms(VALUE.as_bytes()) {
                        for window in form.windows(8) {
                            assert!(!contains(&out, window), "{inner:?} {b64}");
                            assert!(!contains(&out, &url_safe(window)), "{inner:?} {b64}");
                        }
                    }
                }
            }
        }
        // Padding of the value alone goes with it.
        let alone = STANDARD.encode(VALUE);
        assert_eq!(redact(&p, alone.as_bytes()), "[redacted:API]");
    }

    #[test]
    fn percent_encoded_forms_are_caught() {
        let p = patterns(&[("DB", "p@ss w/rd:1&x=y(z)")]);
        for form in [
            "p%40ss%20w%2Frd%3A1%26x%3Dy%28z%29",
            "p%40ss%20w%2frd%3a1%26x%3dy%28z%29",
            "p%40ss%20w%2Frd%3A1%26x%3Dy(z)",
            "p%40ss+w%2Frd%3A1%26x%3Dy%28z%29",
        ] {
            assert_eq!(
                redact(&p, format!("GET /?db={form}&a=1\n").as_bytes()),
                "GET /?db=[redacted:DB]&a=1\n"
            );
        }
    }

    #[test]
    fn short_values_are_matched_raw_only_and_empty_ones_never() {
        let p = patterns(&[("PIN", "4711"), ("NONE", "")]);
        assert_eq!(
            redact(&p, b"pin 4711, NDcxMQ== stays\n"),
            "pin [redacted:PIN], NDcxMQ== stays\n"
        );
        assert!(patterns(&[("NONE", "")]).is_empty());
    }

    #[test]
    fn long_values_are_matched_raw_only_and_stay_small() {
        let long = "k".repeat(MAX_ENCODED_LEN) + "ey-material";
        let p = patterns(&[("KEY", &long)]);
        assert_eq!(
            redact(&p, format!("key {long}\n").as_bytes()),
            "key [redacted:KEY]\n"
        );
        // 64 values of 64 KiB, the most a job receives: no encoded forms, small automata.
        let big: Vec<String> = (0..64)
            .map(|i| format!("{i:02}{}", "v".repeat(64 * 1024 - 2)))
            .collect();
        let named: Vec<(String, &str)> = big
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("S{i}"), v.as_str()))
            .collect();
        let refs: Vec<(&str, &str)> = named.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let p = patterns(&refs);
        assert!(
            p.memory_usage() < 256 * 1024 * 1024,
            "{} bytes of automata",
            p.memory_usage()
        );
    }

    #[test]
    fn overlapping_values_show_no_part_of_either() {
        let p = patterns(&[("A", "abcdef12"), ("B", "ef12ghij")]);
        let out = redact(&p, b"x abcdef12ghij y\n");
        assert_eq!(out, "x [redacted:A] y\n");
    }

    #[test]
    fn a_value_inside_another_is_one_label() {
        let p = patterns(&[("LONG", "abcdefghij"), ("SHORT", "cdefgh")]);
        assert_eq!(
            redact(&p, b"x abcdefghij cdefgh\n"),
            "x [redacted:LONG] [redacted:SHORT]\n"
        );
    }

    #[test]
    fn debug_shows_no_value_nor_held_byte() {
        let p = api();
        let mut r = Redactor::new(p.clone());
        r.feed(b"hunter2-Sup3r");
        let shown = format!("{p:?} {r:?}");
        assert!(
            !shown.contains("hunter") && !shown.contains("aHVudGVy"),
            "{shown}"
        );
    }

    #[test]
    fn a_value_with_a_newline_split_at_it_is_caught() {
        let p = patterns(&[("KEY", "line one\nline two")]);
        let out = stream(&p, &[b"key: line one\n", b"line two\nnext\n"]);
        assert_eq!(out, b"key: [redacted:KEY]\nnext\n");
    }

    #[test]
    fn token_shapes_are_masked() {
        let p = patterns(&[]);
        let gh = format!("ghp_{}", "A1b2".repeat(9));
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl";
        let cases = [
            (
                "key sk-abcdefghijklmnopqrstuvwx end",
                "key [redacted] end".to_owned(),
            ),
            ("sk-ant-api03-abcdefghijklmnopqrst", "[redacted]".to_owned()),
            (&format!("token {gh}."), "token [redacted].".to_owned()),
            (
                "github_pat_11ABCDEFG0123456789_abcdefghij",
                "[redacted]".to_owned(),
            ),
            (
                "slack xoxb-1234567890-abcdef",
                "slack [redacted]".to_owned(),
            ),
            ("id AKIAIOSFODNN7EXAMPLE.", "id [redacted].".to_owned()),
            (&format!("jwt={jwt} ok"), "jwt=[redacted] ok".to_owned()),
            (
                "authorization: bearer abc.def-123 x",
                "authorization: bearer [redacted] x".to_owned(),
            ),
            (
                r#""Authorization": "Bearer abc""#,
                r#""Authorization": "Bearer [redacted]""#.to_owned(),
            ),
            (
                "GITHUB_TOKEN=abc123 next",
                "GITHUB_TOKEN=[redacted] next".to_owned(),
            ),
            (
                "export DB_PASSWORD='hunter2'",
                "export DB_PASSWORD='[redacted]'".to_owned(),
            ),
            (
                r#"{"client_secret":"s3","x":1}"#,
                r#"{"client_secret":"[redacted]","x":1}"#.to_owned(),
            ),
            (
                "Api-Key: k3y passwd=x Credentials: y",
                "Api-Key: [redacted] passwd=[redacted] Credentials: [redacted]".to_owned(),
            ),
            (
                "PRIVATE_KEY=-----BEGIN",
                "PRIVATE_KEY=[redacted]".to_owned(),
            ),
            // Counts of tokens, a task id and prose stay.
            (
                r#"prompt_tokens=12 "tokens": 1500, done"#,
                r#"prompt_tokens=12 "tokens": 1500, done"#.to_owned(),
            ),
            (
                "task-abcdefghijklmnopqrstuvwxyz risk-assessment-of-the-quarter",
                "task-abcdefghijklmnopqrstuvwxyz risk-assessment-of-the-quarter".to_owned(),
            ),
            (
                "the token expired; see the secret docs",
                "the token expired; see the secret docs".to_owned(),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                redact(&p, format!("{input}\n").as_bytes()),
                format!("{want}\n"),
                "{input}"
            );
        }
    }

    #[test]
    fn a_value_after_a_secret_looking_name_keeps_its_label() {
        let p = api();
        let out = redact(
            &p,
            format!("API_TOKEN={VALUE} Authorization: Bearer {VALUE}\n").as_bytes(),
        );
        assert_eq!(
            out,
            "API_TOKEN=[redacted:API] Authorization: Bearer [redacted:API]\n"
        );
    }

    #[test]
    fn output_without_matches_is_unchanged_bytes_and_all() {
        let p = api();
        let text: &[u8] = b"plain \xff\xfe bytes\nline \xc3\x28 two\n\tpartial hunter2 \x00 end";
        for size in [1, 3, 7, 64, text.len()] {
            let pieces: Vec<&[u8]> = text.chunks(size).collect();
            assert_eq!(stream(&p, &pieces), text, "chunks of {size}");
        }
        assert_eq!(patterns(&[]).redact(text), text);
    }

    #[test]
    fn a_long_line_is_written_but_never_a_value_at_its_cut() {
        let p = api();
        for at in (HOLD_BOUND - 40..HOLD_BOUND + 40).chain([HOLD_BOUND - 1024, 3 * HOLD_BOUND]) {
            let mut text = vec![b'x'; at];
            text.extend_from_slice(VALUE.as_bytes());
            text.extend(std::iter::repeat_n(b'y', HOLD_BOUND + 100));
            for size in [1000, 4096, HOLD_BOUND + 1] {
                let mut r = Redactor::new(p.clone());
                let mut out = Vec::new();
                for piece in text.chunks(size) {
                    r.feed_into(piece, &mut out);
                    assert!(r.held() <= HOLD_BOUND + p.longest(), "held {}", r.held());
                }
                // Written as it comes, whatever the job does next.
                assert!(out.len() + HOLD_BOUND + p.longest() + VALUE.len() >= text.len());
                r.finish_into(&mut out);
                assert!(
                    !contains(&out, VALUE.as_bytes()),
                    "at {at}, chunks of {size}"
                );
                assert_eq!(out.len(), text.len() - VALUE.len() + "[redacted:API]".len());
            }
        }
    }

    #[test]
    fn the_hold_stays_bounded_whatever_comes() {
        let p = api();
        let near_misses = "hunter2-Sup3r?S3cret>".repeat(2000);
        let blanks = format!("{} ", "z".repeat(HOLD_BOUND));
        for text in [near_misses.as_bytes(), blanks.as_bytes(), &[b'q'; 200_000]] {
            let mut r = Redactor::new(p.clone());
            let mut written = 0;
            for piece in text.chunks(777) {
                written += r.feed(piece).len();
                assert!(r.held() <= HOLD_BOUND + p.longest(), "held {}", r.held());
                written += r.idle().len();
                assert!(r.held() < p.longest(), "held {} after idle", r.held());
            }
            written += r.finish().len();
            assert_eq!(written, text.len());
        }
    }

    #[test]
    fn random_texts_in_random_reads_never_show_a_value() {
        let p = patterns(&[("API", VALUE), ("NL", "two\nlines-of-it")]);
        let b64 = STANDARD.encode(format!("u:{VALUE}"));
        let (head, tail) = VALUE.split_at(9);
        let pieces = [
            VALUE,
            head,
            tail,
            &b64,
            "two\n",
            "lines-of-it",
            "\n",
            "word ",
            "hunter",
            ">>",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..2000 {
            let text: String = (0..next(40)).map(|_| pieces[next(pieces.len())]).collect();
            let mut r = Redactor::new(p.clone());
            let mut out = Vec::new();
            let mut rest = text.as_bytes();
            while !rest.is_empty() {
                let (piece, more) = rest.split_at(1 + next(rest.len().min(30)));
                r.feed_into(piece, &mut out);
                if next(3) == 0 {
                    r.idle_into(&mut out);
                }
                rest = more;
            }
            r.finish_into(&mut out);
            let shown = String::from_utf8_lossy(&out);
            assert!(
                !shown.contains(VALUE) && !shown.contains("two\nlines-of-it"),
                "{text:?} became {shown:?}"
            );
            for window in b64.as_bytes()[4..].windows(8) {
                assert!(!contains(&out, window), "{text:?} became {shown:?}");
            }
        }
    }

    #[test]
    fn a_big_value_and_its_base64_are_caught_across_reads() {
        let big = "k".repeat(3_000) + "END";
        let p = patterns(&[("BIG", &big), ("API", VALUE)]);
        let text = format!("a {big} b {VALUE} c {}\n", STANDARD.encode(&big));
        let pieces: Vec<&[u8]> = text.as_bytes().chunks(1500).collect();
        let out = String::from_utf8(stream(&p, &pieces)).expect("utf-8");
        assert_eq!(out, "a [redacted:BIG] b [redacted:API] c [redacted:BIG]\n");
    }
}
