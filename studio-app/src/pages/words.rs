//! Words and times for people: a trigger as a sentence ("every day at 02:00
//! Europe/Berlin", said by `studio_schedule::words`, which also words the form's preview),
//! instants as `<time>` elements (UTC on the server; `cockpit.js` shows them in the
//! viewer's zone and keeps UTC in the title), durations and money.

use std::fmt;

use jiff::{Timestamp, tz::TimeZone};
pub(crate) use studio_api::schedule::words::trigger;

/// An instant the daemon reported, re-rendered from its parsed value (so the markup
/// never carries text the daemon sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    at: Timestamp,
    now: Timestamp,
}

impl Stamp {
    pub(crate) fn parse(text: Option<&str>, now: Timestamp) -> Option<Self> {
        let at = text?.parse::<Timestamp>().ok()?;
        Some(Self { at, now })
    }

    pub(crate) fn utc(&self) -> String {
        self.at
            .to_zoned(TimeZone::UTC)
            .strftime("%Y-%m-%d %H:%M:%S")
            .to_string()
    }

    pub(crate) fn iso(&self) -> String {
        self.at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// "in 5 min", "3 h ago": the sign says which way.
    pub(crate) fn relative(&self) -> String {
        let secs = self.at.as_second() - self.now.as_second();
        let span = human_secs(secs.unsigned_abs());
        if secs.abs() < 5 {
            "now".into()
        } else if secs > 0 {
            format!("in {span}")
        } else {
            format!("{span} ago")
        }
    }
}

/// `<time>` markup: absolute UTC as the fallback text, relative beside it.
impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let utc = self.utc();
        write!(
            f,
            r#"<time datetime="{}" title="{utc} UTC" data-local>{utc} UTC</time> <span class="rel">({})</span>"#,
            self.iso(),
            self.relative()
        )
    }
}

/// Whole units, two at most: "45 s", "5 min", "2 h 10 min", "3 d 4 h".
pub(crate) fn human_secs(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", secs / 60),
        3600..86400 => match (secs / 3600, secs % 3600 / 60) {
            (h, 0) => format!("{h} h"),
            (h, m) => format!("{h} h {m} min"),
        },
        _ => match (secs / 86400, secs % 86400 / 3600) {
            (d, 0) => format!("{d} d"),
            (d, h) => format!("{d} d {h} h"),
        },
    }
}

/// A run's duration: milliseconds below ten seconds, whole units above.
pub(crate) fn duration_ms(ms: Option<i64>) -> String {
    match ms {
        None => "—".into(),
        Some(ms) if ms < 10_000 => format!("{:.1} s", ms as f64 / 1000.0),
        Some(ms) => human_secs(u64::try_from(ms / 1000).unwrap_or(0)),
    }
}

pub(crate) fn money(usd: Option<f64>) -> String {
    match usd {
        Some(v) if v > 0.0 => format!("${v:.4}"),
        _ => "—".into(),
    }
}

/// A schedule's health code in words, and what it means.
pub(crate) fn health(code: &str) -> (&'static str, &'static str) {
    match code {
        "healthy" => ("healthy", "its newest finished run succeeded"),
        "failing" => ("failing", "its newest finished run failed or timed out"),
        "overdue" => ("overdue", "it should have fired by now and has not"),
        "no-evidence" => (
            "no finished run yet",
            "it has fired, but no run has finished yet",
        ),
        "never-fired" => ("not run yet", "its trigger has not fired yet"),
        "disabled" => ("disabled", "it does not fire until it is enabled"),
        _ => (
            "unknown",
            "studiod reported a health this page does not know",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_with_a_relative_hint() {
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().expect("ts");
        let s = Stamp::parse(Some("2026-01-01T13:30:00+01:00"), now).expect("parses");
        assert_eq!(s.utc(), "2026-01-01 12:30:00");
        assert_eq!(s.relative(), "in 30 min");
        let html = s.to_string();
        assert!(
            html.contains(r#"datetime="2026-01-01T12:30:00Z""#),
            "{html}"
        );
        assert!(
            html.contains(r#"title="2026-01-01 12:30:00 UTC""#),
            "{html}"
        );
        let past = Stamp::parse(Some("2026-01-01T09:00:00Z"), now).expect("parses");
        assert_eq!(past.relative(), "3 h ago");
        assert!(Stamp::parse(Some("<script>"), now).is_none());
        assert_eq!(duration_ms(Some(1500)), "1.5 s");
        assert_eq!(duration_ms(Some(7_800_000)), "2 h 10 min");
        assert_eq!(money(Some(0.0)), "—");
    }
}
