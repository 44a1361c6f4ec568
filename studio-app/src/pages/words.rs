//! Words and times for people: a trigger as a sentence ("every day at 02:00
//! Europe/Berlin"), instants as `<time>` elements (UTC on the server; `cockpit.js` shows
//! them in the viewer's zone and keeps UTC in the title), durations and money.

use std::fmt;

use jiff::{Timestamp, tz::TimeZone};
use studio_api::schedule::Trigger;

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

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// A spec's trigger in words; `zone` is the schedule's effective zone, used when a cron
/// trigger names none.
pub(crate) fn trigger(trigger: &Trigger, zone: Option<&str>) -> String {
    match trigger {
        Trigger::Every(every) => format!("every {every}"),
        Trigger::At(at) => match at.parse::<Timestamp>() {
            Ok(t) => format!(
                "once at {} UTC",
                t.to_zoned(TimeZone::UTC).strftime("%Y-%m-%d %H:%M")
            ),
            Err(_) => format!("once at {at}"),
        },
        Trigger::Cron(c) => cron(
            &c.expression,
            c.timezone.as_deref().or(zone).unwrap_or("UTC"),
        ),
    }
}

/// Common five-field shapes in words; anything else is shown as the expression itself.
fn cron(expr: &str, zone: &str) -> String {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let num = |s: &str, max: u32| s.parse::<u32>().ok().filter(|n| *n <= max);
    let fallback = || format!("cron “{expr}” ({zone})");
    let [min, hour, dom, mon, dow] = fields.as_slice() else {
        return fallback();
    };
    if let (Some(step), "*", "*", "*", "*") = (min.strip_prefix("*/"), *hour, *dom, *mon, *dow) {
        return match num(step, 59) {
            Some(1) => "every minute".into(),
            Some(n) => format!("every {n} minutes"),
            None => fallback(),
        };
    }
    if (*min, *hour, *dom, *mon, *dow) == ("*", "*", "*", "*", "*") {
        return "every minute".into();
    }
    let Some(m) = num(min, 59) else {
        return fallback();
    };
    if (*hour, *dom, *mon, *dow) == ("*", "*", "*", "*") {
        return format!("every hour at :{m:02}");
    }
    let Some(h) = num(hour, 23) else {
        return fallback();
    };
    let at = format!("at {h:02}:{m:02} {zone}");
    match (*dom, *mon, *dow) {
        ("*", "*", "*") => format!("every day {at}"),
        ("*", "*", "1-5") => format!("every weekday {at}"),
        ("*", "*", d) => match num(d, 7) {
            Some(d) => format!("every {} {at}", DAYS[(d % 7) as usize]),
            None => fallback(),
        },
        (d, m, "*") if m != "*" => match (num(d, 31), num(m, 12)) {
            (Some(d @ 1..), Some(m @ 1..)) => {
                format!("every year on {d} {} {at}", MONTHS[(m - 1) as usize])
            }
            _ => fallback(),
        },
        (d, "*", "*") => match num(d, 31).filter(|d| *d >= 1) {
            Some(d) => format!("on day {d} of every month {at}"),
            None => fallback(),
        },
        _ => fallback(),
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
    use serde_json::json;

    use super::*;

    #[test]
    fn triggers_in_words() {
        let berlin = Some("Europe/Berlin");
        let parse =
            |v: serde_json::Value| -> Trigger { serde_json::from_value(v).expect("trigger") };
        let t = |v: serde_json::Value| trigger(&parse(v), berlin);
        assert_eq!(
            t(json!({"cron": {"expression": "0 2 * * *"}})),
            "every day at 02:00 Europe/Berlin"
        );
        assert_eq!(
            t(json!({"cron": {"expression": "30 9 * * 1", "timezone": "UTC"}})),
            "every Monday at 09:30 UTC"
        );
        assert_eq!(
            t(json!({"cron": {"expression": "0 8 * * 1-5"}})),
            "every weekday at 08:00 Europe/Berlin"
        );
        assert_eq!(
            t(json!({"cron": {"expression": "0 0 1 * *"}})),
            "on day 1 of every month at 00:00 Europe/Berlin"
        );
        assert_eq!(
            t(json!({"cron": {"expression": "*/15 * * * *"}})),
            "every 15 minutes"
        );
        assert_eq!(
            t(json!({"cron": {"expression": "5 * * * *"}})),
            "every hour at :05"
        );
        assert_eq!(
            t(json!({"cron": {"expression": "0 2 * 1 *"}})),
            "cron “0 2 * 1 *” (Europe/Berlin)"
        );
        assert_eq!(
            t(json!({"cron": {"expression": "0 0 1 1 *", "timezone": "UTC"}})),
            "every year on 1 January at 00:00 UTC"
        );
        assert_eq!(t(json!({"every": "15m"})), "every 15m");
        assert_eq!(
            t(json!({"at": "2026-03-01T10:00:00+01:00"})),
            "once at 2026-03-01 09:00 UTC"
        );
        assert_eq!(
            trigger(&parse(json!({"cron": {"expression": "0 2 * * *"}})), None),
            "every day at 02:00 UTC"
        );
    }

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
