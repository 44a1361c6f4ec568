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
        let text = text?;
        let at = match daemon_instant(text) {
            Some(at) => at,
            None => text.parse::<Timestamp>().ok()?,
        };
        Some(Self { at, now })
    }

    /// An instant the daemon reported in milliseconds since the epoch.
    pub(crate) fn from_ms(ms: i64, now: Timestamp) -> Option<Self> {
        Some(Self {
            at: Timestamp::from_millisecond(ms).ok()?,
            now,
        })
    }

    /// Whole seconds from now until it (negative once past).
    pub(crate) fn secs_from_now(&self) -> i64 {
        self.at.as_second() - self.now.as_second()
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
        self.ago().to_string()
    }

    /// [`Stamp::relative`] as a value the template writes without a string of its own
    /// (a schedules page holds 500 of them).
    pub(crate) fn ago(&self) -> Relative {
        Relative(self.secs_from_now())
    }
}

/// Seconds from now, written "in 5 min", "3 h ago" or "now".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Relative(i64);

impl fmt::Display for Relative {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let span = Span(self.0.unsigned_abs());
        if self.0.abs() < 5 {
            f.write_str("now")
        } else if self.0 > 0 {
            write!(f, "in {span}")
        } else {
            write!(f, "{span} ago")
        }
    }
}

/// The one form studiod writes every instant in, `2026-12-02T17:15:33.431Z`, read
/// without the general parser (a schedules page reads 550 of them; the general parser
/// was 4 % of its render). Anything else is `None`, and goes to the general parser.
fn daemon_instant(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    if b.len() != 24
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || b[23] != b'Z'
    {
        return None;
    }
    let num = |at: usize, len: usize| -> Option<i64> {
        b[at..at + len].iter().try_fold(0i64, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0'))
        })
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second, milli) = (num(11, 2)?, num(14, 2)?, num(17, 2)?, num(20, 3)?);
    let valid_day = jiff::civil::Date::new(
        i16::try_from(year).ok()?,
        i8::try_from(month).ok()?,
        i8::try_from(day).ok()?,
    )
    .is_ok();
    if !valid_day || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
    Timestamp::new(seconds, i32::try_from(milli * 1_000_000).ok()?).ok()
}

/// Days from 1970-01-01 to a proleptic Gregorian date (valid, checked by the caller).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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
    Span(secs).to_string()
}

/// A length of time in its two largest units: "40 s", "5 min", "2 h 10 min", "3 d 4 h".
struct Span(u64);

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0;
        match secs {
            0..60 => write!(f, "{secs} s"),
            60..3600 => write!(f, "{} min", secs / 60),
            3600..86400 => match (secs / 3600, secs % 3600 / 60) {
                (h, 0) => write!(f, "{h} h"),
                (h, m) => write!(f, "{h} h {m} min"),
            },
            _ => match (secs / 86400, secs % 86400 / 3600) {
                (d, 0) => write!(f, "{d} d"),
                (d, h) => write!(f, "{d} d {h} h"),
            },
        }
    }
}

/// The time left before an instant, to the second ("14 min 5 s left"; days to the
/// minute), or "expired" once it has passed; `cockpit.js` ticks it in the same words.
pub(crate) fn countdown(secs: i64) -> String {
    if secs <= 0 {
        return "expired".into();
    }
    let (d, h, m, s) = (
        secs / 86_400,
        secs % 86_400 / 3_600,
        secs % 3_600 / 60,
        secs % 60,
    );
    let left = if d > 0 {
        format!("{d} d {h} h {m} min")
    } else if h > 0 {
        format!("{h} h {m} min {s} s")
    } else if m > 0 {
        format!("{m} min {s} s")
    } else {
        format!("{s} s")
    };
    format!("{left} left")
}

/// The part of an id people tell runs apart by: its last eight characters (a UUIDv7's
/// first ones are its time).
pub(crate) fn short_id(id: &str) -> &str {
    let cut = id.char_indices().rev().nth(7).map_or(0, |(i, _)| i);
    &id[cut..]
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
        assert_eq!(countdown(899), "14 min 59 s left");
        assert_eq!(countdown(3_605), "1 h 0 min 5 s left");
        assert_eq!(countdown(90_061), "1 d 1 h 1 min left");
        assert_eq!(countdown(7), "7 s left");
        assert_eq!(countdown(0), "expired");
    }

    #[test]
    fn the_daemons_instants_read_as_the_general_parser_reads_them() {
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().expect("ts");
        // Every ~37 hours and some milliseconds from 1901 to 2099, leap days included.
        let mut secs = -2_200_000_000i64;
        while secs < 4_100_000_000 {
            let at = Timestamp::new(
                secs,
                7_000_000 * i32::try_from(secs % 100).unwrap_or(0).abs(),
            )
            .expect("in range");
            let text = at.strftime("%Y-%m-%dT%H:%M:%S.%3fZ").to_string();
            assert_eq!(daemon_instant(&text), Some(at), "{text}");
            secs += 133_337;
        }
        for leap in ["2024-02-29T23:59:59.999Z", "2000-02-29T00:00:00.000Z"] {
            assert_eq!(daemon_instant(leap), leap.parse().ok(), "{leap}");
        }
        // Not the daemon's form, or not a date: the general parser decides.
        for other in [
            "2023-02-29T00:00:00.000Z",
            "2026-13-01T00:00:00.000Z",
            "2026-01-01T24:00:00.000Z",
            "2026-01-01T12:00:00Z",
            "2026-01-01T12:00:00.000+01:00",
            "2026-01-01T12:00:0x.000Z",
        ] {
            assert_eq!(daemon_instant(other), None, "{other}");
            assert_eq!(
                Stamp::parse(Some(other), now).map(|s| s.at),
                other.parse().ok(),
                "{other}"
            );
        }
    }
}
