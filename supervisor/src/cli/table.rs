//! Human output: aligned tables, relative times, and colour only when stdout is a
//! terminal and `NO_COLOR` is unset. Scripts use `--json` instead of parsing these.

use std::io::IsTerminal;

use jiff::Timestamp;
use studio_api::{RunKind, RunStatus};

/// Whether to colour what goes to stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Style {
    color: bool,
}

impl Style {
    /// Colour on a terminal, never with `NO_COLOR` (any non-empty value, per no-color.org).
    pub(crate) fn detect() -> Self {
        let no_color = crate::config::no_color();
        Self {
            color: !no_color && std::io::stdout().is_terminal(),
        }
    }

    /// No colour: for text that goes to stderr next to stdout's table.
    pub(crate) fn plain() -> Self {
        Self { color: false }
    }

    pub(crate) fn paint(self, text: &str, tone: Tone) -> String {
        if !self.color || tone == Tone::Plain {
            return text.to_owned();
        }
        let code = match tone {
            Tone::Good => "32",
            Tone::Warn => "33",
            Tone::Bad => "31",
            Tone::Dim => "2",
            Tone::Plain => "0",
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tone {
    Plain,
    Good,
    Warn,
    Bad,
    Dim,
}

/// The tone of a run status or schedule health word.
pub(crate) fn tone_of(word: &str) -> Tone {
    match word {
        "completed" | "healthy" | "running" | "enabled" => Tone::Good,
        "failed" | "timed_out" | "failing" | "overdue" => Tone::Bad,
        "cancelled" | "skipped" | "queued" | "no-evidence" | "never-fired"
        | "awaiting_approval" | "denied" | "expired" => Tone::Warn,
        "disabled" | "-" => Tone::Dim,
        _ => Tone::Plain,
    }
}

/// Rows of cells under a header, each column as wide as its widest cell.
pub(crate) struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<(String, Tone)>>,
}

impl Table {
    pub(crate) fn new(header: &[&'static str]) -> Self {
        Self {
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<(String, Tone)>) {
        self.rows.push(cells);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The text; widths count characters, and colour wraps a cell after padding so
    /// escape codes never shift a column.
    pub(crate) fn render(&self, style: Style) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, (cell, _)) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(cell.chars().count());
                }
            }
        }
        let mut out = String::new();
        let line = |cells: Vec<(String, Tone)>, out: &mut String| {
            let last = cells.len().saturating_sub(1);
            for (i, (cell, tone)) in cells.into_iter().enumerate() {
                let width = widths.get(i).copied().unwrap_or(0);
                let padded = if i == last {
                    cell
                } else {
                    format!("{cell:<width$}")
                };
                out.push_str(&style.paint(&padded, tone));
                if i != last {
                    out.push_str("  ");
                }
            }
            out.push('\n');
        };
        let header = self
            .header
            .iter()
            .map(|h| ((*h).to_owned(), Tone::Plain))
            .collect();
        line(header, &mut out);
        for row in &self.rows {
            line(row.clone(), &mut out);
        }
        out
    }
}

/// What a cell shows for a value of studiod's answers: strings as they are, numbers
/// printed as JSON prints them, absent (or empty) as `-`.
pub(crate) trait Cell {
    fn cell(&self) -> String;
}

impl Cell for str {
    fn cell(&self) -> String {
        if self.is_empty() {
            "-".to_owned()
        } else {
            self.to_owned()
        }
    }
}

impl Cell for String {
    fn cell(&self) -> String {
        self.as_str().cell()
    }
}

impl Cell for i64 {
    fn cell(&self) -> String {
        self.to_string()
    }
}

impl Cell for f64 {
    /// As JSON writes it (`0.0`, not Rust's `0`); a non-finite amount is no number.
    fn cell(&self) -> String {
        serde_json::Number::from_f64(*self).map_or_else(|| "-".to_owned(), |n| n.to_string())
    }
}

impl Cell for RunStatus {
    fn cell(&self) -> String {
        self.as_str().to_owned()
    }
}

impl Cell for RunKind {
    fn cell(&self) -> String {
        self.as_str().to_owned()
    }
}

impl<T: Cell + ?Sized> Cell for &T {
    fn cell(&self) -> String {
        (**self).cell()
    }
}

impl<T: Cell> Cell for Option<T> {
    fn cell(&self) -> String {
        self.as_ref().map_or_else(|| "-".to_owned(), Cell::cell)
    }
}

/// The cell of `v`.
pub(crate) fn text<T: Cell + ?Sized>(v: &T) -> String {
    v.cell()
}

/// An RFC 3339 instant relative to `now_ms` ("3m ago", "in 2h"); `-` when absent, and
/// anything that is not an instant as it is.
pub(crate) fn relative<T: Cell + ?Sized>(v: &T, now_ms: i64) -> String {
    let shown = v.cell();
    let Ok(at) = shown.parse::<Timestamp>() else {
        return shown;
    };
    let delta = at.as_millisecond() - now_ms;
    let span = human_ms(delta.unsigned_abs());
    if delta.abs() < 1_000 {
        "now".to_owned()
    } else if delta < 0 {
        format!("{span} ago")
    } else {
        format!("in {span}")
    }
}

/// An instant and how far it is from `now_ms`: `2026-01-01T00:00:00Z (3m ago)`.
pub(crate) fn instant<T: Cell + ?Sized>(v: &T, now_ms: i64) -> String {
    format!("{} ({})", text(v), relative(v, now_ms))
}

/// A duration in its largest sensible unit: `850ms`, `12s`, `4m`, `3h`, `2d`.
pub(crate) fn human_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}s", ms / 1_000),
        60_000..3_600_000 => format!("{}m", ms / 60_000),
        3_600_000..86_400_000 => format!("{}h", ms / 3_600_000),
        _ => format!("{}d", ms / 86_400_000),
    }
}

/// A size in bytes as people read it: `512 B`, `12.3 KiB`, `1.5 MiB`.
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Each id cut to its shortest prefix of at least `min` characters that no other id
/// starts with (what `revoke` commands take).
pub(crate) fn short_ids(ids: &[&str], min: usize) -> Vec<String> {
    ids.iter()
        .map(|id| {
            let unique = |n: usize| {
                id.get(..n)
                    .is_some_and(|p| !ids.iter().any(|o| o != id && o.starts_with(p)))
            };
            let n = (min.min(id.len())..id.len())
                .find(|&n| unique(n))
                .unwrap_or(id.len());
            id.get(..n).unwrap_or(id).to_owned()
        })
        .collect()
}

pub(crate) fn now_ms() -> i64 {
    Timestamp::now().as_millisecond()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_on_the_widest_cell() {
        let mut t = Table::new(&["NAME", "STATUS"]);
        t.row(vec![
            ("demo/a-long-name".into(), Tone::Plain),
            ("ok".into(), Tone::Good),
        ]);
        t.row(vec![
            ("x".into(), Tone::Plain),
            ("failed".into(), Tone::Bad),
        ]);
        assert_eq!(
            t.render(Style::plain()),
            "NAME              STATUS\ndemo/a-long-name  ok\nx                 failed\n"
        );
        let coloured = t.render(Style { color: true });
        assert!(coloured.contains("\x1b[31mfailed\x1b[0m"), "{coloured:?}");
    }

    #[test]
    fn times_read_relative_to_now() {
        let now = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        assert_eq!(relative("2025-12-31T23:57:00Z", now), "3m ago");
        assert_eq!(relative("2026-01-01T02:00:00Z", now), "in 2h");
        assert_eq!(relative("2026-01-01T00:00:00Z", now), "now");
        assert_eq!(relative(&None::<String>, now), "-");
        assert_eq!(relative("soon", now), "soon");
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(172_800_000), "2d");
    }

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(12_595), "12.3 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }

    /// Cells read as the JSON they came from did: `-` for null and for "".
    #[test]
    fn cells_print_values_as_json_did() {
        assert_eq!(text(""), "-");
        assert_eq!(text(&None::<i64>), "-");
        assert_eq!(text(&Some(0.0_f64)), "0.0");
        assert_eq!(text(&0.25_f64), "0.25");
        assert_eq!(text(&Some(42_i64)), "42");
        assert_eq!(text(&RunStatus::TimedOut), "timed_out");
    }
}
