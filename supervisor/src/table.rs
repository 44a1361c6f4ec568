//! Human output: aligned tables, relative times, and colour only when stdout is a
//! terminal and `NO_COLOR` is unset. Scripts use `--json` instead of parsing these.

use std::io::IsTerminal;

use jiff::Timestamp;
use serde_json::Value;

/// Whether to colour what goes to stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Style {
    color: bool,
}

impl Style {
    /// Colour on a terminal, never with `NO_COLOR` (any non-empty value, per no-color.org).
    pub(crate) fn detect() -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
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
        "cancelled" | "skipped" | "queued" | "no-evidence" | "never-fired" => Tone::Warn,
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

/// A cell from a JSON value: strings as they are, numbers printed, null as `-`.
pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) if s.is_empty() => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An RFC 3339 instant relative to `now_ms` ("3m ago", "in 2h"); `-` when absent.
pub(crate) fn relative(v: &Value, now_ms: i64) -> String {
    let Some(ms) = v
        .as_str()
        .and_then(|s| s.parse::<Timestamp>().ok())
        .map(|t| t.as_millisecond())
    else {
        return text(v);
    };
    let delta = ms - now_ms;
    let span = human_ms(delta.unsigned_abs());
    if delta.abs() < 1_000 {
        "now".to_owned()
    } else if delta < 0 {
        format!("{span} ago")
    } else {
        format!("in {span}")
    }
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

pub(crate) fn now_ms() -> i64 {
    Timestamp::now().as_millisecond()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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
        assert_eq!(relative(&json!("2025-12-31T23:57:00Z"), now), "3m ago");
        assert_eq!(relative(&json!("2026-01-01T02:00:00Z"), now), "in 2h");
        assert_eq!(relative(&json!("2026-01-01T00:00:00Z"), now), "now");
        assert_eq!(relative(&Value::Null, now), "-");
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(172_800_000), "2d");
    }
}
