//! A trigger in words for people ("every Monday through Friday at 09:00 Europe/Berlin").
//!
//! The words are read from the pattern the scheduler fires by (`trigger::parse_cron`),
//! not from the expression's text, so names, ranges, steps and macros all read alike, and
//! a day-of-month restricted beside a day-of-week reads as cron runs it: either day fires.
//! What has no plain shape here (`L`, `W`, `#`, a seconds field) is left to croner's own
//! English.

use std::{
    collections::HashMap,
    sync::{LazyLock, Mutex},
};

use croner::{CronComponent, CronPattern};
use jiff::{Timestamp, tz::TimeZone};

use crate::{spec::Trigger, trigger::parse_cron};

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

/// Clock times listed one by one up to this many fires a day; past it, a cadence.
const LISTED_TIMES: usize = 6;

/// A trigger in words; `zone` is the schedule's effective zone, used when a cron trigger
/// names none (UTC when neither does).
pub fn trigger(trigger: &Trigger, zone: Option<&str>) -> String {
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

/// Sentences kept for reuse, at most this many: a list page describes fifty crons, and
/// parsing one costs tens of microseconds (croner fills a bit for every allowed year).
const KEPT: usize = 4096;

/// The longest expression or zone kept (a few hundred KiB in all): longer ones, which
/// only a hand-made request sends, are described each time.
const KEPT_CHARS: usize = 64;

/// A cron expression in words, its clock read in `zone`.
pub fn cron(expression: &str, zone: &str) -> String {
    static KEPT_SENTENCES: LazyLock<Mutex<HashMap<(String, String), String>>> =
        LazyLock::new(Mutex::default);
    if expression.len() > KEPT_CHARS || zone.len() > KEPT_CHARS {
        return describe_cron(expression, zone);
    }
    let key = (expression.to_owned(), zone.to_owned());
    if let Some(known) = KEPT_SENTENCES
        .lock()
        .ok()
        .and_then(|k| k.get(&key).cloned())
    {
        return known;
    }
    let sentence = describe_cron(expression, zone);
    if let Ok(mut kept) = KEPT_SENTENCES.lock() {
        if kept.len() >= KEPT {
            kept.clear();
        }
        kept.insert(key, sentence.clone());
    }
    sentence
}

fn describe_cron(expression: &str, zone: &str) -> String {
    let Ok(parsed) = parse_cron(expression) else {
        return format!("cron “{expression}” ({zone})");
    };
    match Plain::of(&parsed.pattern) {
        Some(plain) => plain.sentence(zone),
        None => {
            let text = parsed.pattern.describe();
            let text = text.trim_end_matches('.');
            let mut chars = text.chars();
            let lowered = chars
                .next()
                .map(|c| c.to_lowercase().chain(chars).collect::<String>())
                .unwrap_or_default();
            format!("{lowered} ({zone})")
        }
    }
}

/// Which days fire, as cron decides it.
enum Days {
    Every,
    OfMonth(Vec<u16>),
    OfWeek(Vec<u16>),
    /// Both fields restricted: a day matching either one fires.
    Either(Vec<u16>, Vec<u16>),
}

/// A pattern with plain fields: seconds at 0 and no `L`, `W` or `#`.
struct Plain {
    minutes: Vec<u16>,
    hours: Vec<u16>,
    days: Days,
    months: Vec<u16>,
}

impl Plain {
    fn of(p: &CronPattern) -> Option<Self> {
        let fields = [
            &p.seconds,
            &p.minutes,
            &p.hours,
            &p.days,
            &p.months,
            &p.days_of_week,
        ];
        if p.seconds.values() != [0]
            || p.matches_dom_and_dow()
            || fields.iter().any(|f| f.has_modifiers())
        {
            return None;
        }
        let dom = p.days.values();
        // 7 is Sunday too.
        let mut dow: Vec<u16> = p.days_of_week.values().iter().map(|d| d % 7).collect();
        dow.sort_unstable();
        dow.dedup();
        let dom_any = p.is_dom_wildcard() || is_full(&p.days);
        let dow_any = p.is_dow_wildcard() || dow.len() == 7;
        let days = match (p.is_dom_wildcard(), p.is_dow_wildcard()) {
            (true, true) => Days::Every,
            (false, true) if dom_any => Days::Every,
            (false, true) => Days::OfMonth(dom),
            (true, false) if dow_any => Days::Every,
            (true, false) => Days::OfWeek(dow),
            // Either day fires, so one field that takes every day takes them all.
            (false, false) if dom_any || dow_any => Days::Every,
            (false, false) => Days::Either(dom, dow),
        };
        Some(Self {
            minutes: p.minutes.values(),
            hours: p.hours.values(),
            days,
            months: p.months.values(),
        })
    }

    fn sentence(&self, zone: &str) -> String {
        let months = (self.months.len() < 12).then(|| {
            format!(
                ", in {}",
                listed(&self.months, |m| MONTHS[usize::from(m - 1)].into())
            )
        });
        let of = if months.is_some() {
            "of the month"
        } else {
            "of every month"
        };
        match self.time() {
            Time::Clock(at) => {
                let lead = match &self.days {
                    Days::Every => "every day".into(),
                    Days::OfMonth(d) if d.len() == 1 && self.months.len() == 1 => {
                        return format!(
                            "every year on {} {} at {at} {zone}",
                            d[0],
                            MONTHS[usize::from(self.months[0] - 1)]
                        );
                    }
                    Days::OfMonth(d) => format!("on {} {of}", month_days(d)),
                    Days::OfWeek(w) => format!("every {}", weekdays(w)),
                    Days::Either(d, w) => {
                        format!("on {} {of} and every {}", month_days(d), weekdays(w))
                    }
                };
                format!("{lead} at {at} {zone}{}", months.unwrap_or_default())
            }
            Time::Cadence { text, clock } => {
                let days = match &self.days {
                    Days::Every => String::new(),
                    Days::OfMonth(d) => format!(" on {} {of}", month_days(d)),
                    Days::OfWeek(w) => format!(" on {}", weekdays(w)),
                    Days::Either(d, w) => {
                        format!(" on {} {of} and every {}", month_days(d), weekdays(w))
                    }
                };
                let local = clock || !days.is_empty() || months.is_some();
                let zone = if local {
                    format!(" ({zone})")
                } else {
                    String::new()
                };
                format!("{text}{days}{}{zone}", months.unwrap_or_default())
            }
        }
    }

    /// The times of day a firing day fires at.
    fn time(&self) -> Time {
        let (m, h) = (&self.minutes, &self.hours);
        let every_hour = h.len() == 24;
        let cadence = |text: String| Time::Cadence {
            text,
            clock: !every_hour,
        };
        if every_hour {
            return cadence(match (m.len(), step(m, 60)) {
                (60, _) => "every minute".into(),
                (_, Some(s)) => format!("every {s} minutes"),
                _ => format!("every hour at {}", minutes(m)),
            });
        }
        if m.len() * h.len() <= LISTED_TIMES {
            let times: Vec<String> = h
                .iter()
                .flat_map(|h| m.iter().map(move |m| format!("{h:02}:{m:02}")))
                .collect();
            return Time::Clock(joined(&times));
        }
        let (first, last) = (m[0], m[m.len() - 1]);
        let run = h.windows(2).all(|w| w[1] == w[0] + 1);
        let lead = match (m.len(), step(m, 60)) {
            (60, _) => "every minute".into(),
            (_, Some(s)) => format!("every {s} minutes"),
            (1, _) if run => "every hour".into(),
            (1, _) => match step(h, 24) {
                Some(k) => return cadence(format!("every {k} hours at :{first:02}")),
                None => format!("every hour at :{first:02}"),
            },
            _ => format!("every hour at {}", minutes(m)),
        };
        cadence(if run {
            format!(
                "{lead} from {:02}:{first:02} to {:02}:{last:02}",
                h[0],
                h[h.len() - 1]
            )
        } else {
            format!("{lead} during hours {}", listed(h, |h| format!("{h:02}")))
        })
    }
}

enum Time {
    /// A few times of day, listed: "09:00 and 17:00".
    Clock(String),
    /// A cadence; `clock` when it names times of day (then the zone matters).
    Cadence { text: String, clock: bool },
}

/// Whether a field takes every value it can (`1-31`, `*/1`).
fn is_full(field: &CronComponent) -> bool {
    field.values().len() == usize::from(field.max - field.min + 1)
}

/// `s` when the values are 0, s, 2s, … up to the last before `period` and s divides
/// `period` (`*/15` of 60 minutes), so the same gap also spans the wrap.
fn step(values: &[u16], period: u16) -> Option<u16> {
    let s = *values.get(1)?;
    let even = values[0] == 0
        && s > 1
        && period.is_multiple_of(s)
        && values.len() == usize::from(period / s)
        && values.windows(2).all(|w| w[1] - w[0] == s);
    even.then_some(s)
}

fn minutes(values: &[u16]) -> String {
    listed(values, |m| format!(":{m:02}"))
}

fn month_days(values: &[u16]) -> String {
    let noun = if values.len() == 1 { "day" } else { "days" };
    format!("{noun} {}", listed(values, |d| d.to_string()))
}

fn weekdays(values: &[u16]) -> String {
    listed(values, |d| DAYS[usize::from(d)].into())
}

/// Sorted values named one by one, three or more in a row as "A through B".
fn listed(values: &[u16], name: impl Fn(u16) -> String) -> String {
    let mut items = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let mut j = i;
        while j + 1 < values.len() && values[j + 1] == values[j] + 1 {
            j += 1;
        }
        if j >= i + 2 {
            items.push(format!("{} through {}", name(values[i]), name(values[j])));
        } else {
            items.extend(values[i..=j].iter().map(|v| name(*v)));
        }
        i = j + 1;
    }
    joined(&items)
}

/// "a", "a and b", "a, b and c".
fn joined(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn berlin(expr: &str) -> String {
        cron(expr, "Europe/Berlin")
    }

    #[test]
    fn common_crons_read_as_sentences() {
        assert_eq!(berlin("0 2 * * *"), "every day at 02:00 Europe/Berlin");
        assert_eq!(
            berlin("0 9,17 * * *"),
            "every day at 09:00 and 17:00 Europe/Berlin"
        );
        assert_eq!(
            berlin("0 9 * * MON-FRI"),
            "every Monday through Friday at 09:00 Europe/Berlin"
        );
        assert_eq!(
            berlin("0 8 * * 1-5"),
            "every Monday through Friday at 08:00 Europe/Berlin"
        );
        assert_eq!(berlin("30 9 * * 1"), "every Monday at 09:30 Europe/Berlin");
        assert_eq!(berlin("0 9 * * 7"), "every Sunday at 09:00 Europe/Berlin");
        assert_eq!(
            berlin("0 9 * * 1,3,5"),
            "every Monday, Wednesday and Friday at 09:00 Europe/Berlin"
        );
        assert_eq!(
            berlin("0 0 1 * *"),
            "on day 1 of every month at 00:00 Europe/Berlin"
        );
        assert_eq!(
            berlin("0 0 1,15 * *"),
            "on days 1 and 15 of every month at 00:00 Europe/Berlin"
        );
        assert_eq!(
            berlin("0 0 1 1 *"),
            "every year on 1 January at 00:00 Europe/Berlin"
        );
        assert_eq!(berlin("@daily"), "every day at 00:00 Europe/Berlin");
        assert_eq!(
            berlin("0 2 * 1 *"),
            "every day at 02:00 Europe/Berlin, in January"
        );
    }

    #[test]
    fn cadences_name_the_zone_only_when_the_clock_matters() {
        assert_eq!(berlin("* * * * *"), "every minute");
        assert_eq!(berlin("*/15 * * * *"), "every 15 minutes");
        assert_eq!(berlin("5 * * * *"), "every hour at :05");
        assert_eq!(berlin("0,30 * * * *"), "every 30 minutes");
        assert_eq!(berlin("5,35 * * * *"), "every hour at :05 and :35");
        assert_eq!(berlin("*/20 * * * *"), "every 20 minutes");
        // 7 does not divide an hour: :56 to :00 is 4 minutes, so the minutes are listed.
        assert!(berlin("*/7 * * * *").starts_with("every hour at :00, :07"));
        assert_eq!(
            berlin("*/15 9-17 * * 1-5"),
            "every 15 minutes from 09:00 to 17:45 on Monday through Friday (Europe/Berlin)"
        );
        assert_eq!(
            berlin("0 9-17 * * *"),
            "every hour from 09:00 to 17:00 (Europe/Berlin)"
        );
        assert_eq!(
            berlin("30 */2 * * *"),
            "every 2 hours at :30 (Europe/Berlin)"
        );
        assert_eq!(
            berlin("*/30 * * * 6"),
            "every 30 minutes on Saturday (Europe/Berlin)"
        );
        assert_eq!(
            berlin("0 1,3,7,9,13,20,22 * * *"),
            "every hour at :00 during hours 01, 03, 07, 09, 13, 20 and 22 (Europe/Berlin)"
        );
    }

    /// Day-of-month and day-of-week both restricted: a day matching either fires, and
    /// the words say so rather than reading as "the 1st, if it is a weekday".
    #[test]
    fn restricted_month_day_and_weekday_read_as_either() {
        assert_eq!(
            cron("0 9 1 */3 MON-FRI", "America/Sao_Paulo"),
            "on day 1 of the month and every Monday through Friday at 09:00 \
             America/Sao_Paulo, in January, April, July and October"
        );
        assert_eq!(
            berlin("0 9 13 * FRI"),
            "on day 13 of every month and every Friday at 09:00 Europe/Berlin"
        );
        // `*/1` counts as restricted, but takes every day, so every day fires.
        assert_eq!(berlin("0 9 1 * */1"), "every day at 09:00 Europe/Berlin");
        assert_eq!(berlin("0 9 ? * 1-5"), berlin("0 9 * * 1-5"));
    }

    #[test]
    fn odd_shapes_fall_back_to_words_still() {
        let last = berlin("0 0 L * *");
        assert!(last.contains("last day of the month"), "{last}");
        assert!(last.ends_with("(Europe/Berlin)"), "{last}");
        let seconds = berlin("30 0 9 * * *");
        assert!(seconds.contains("09:00:30"), "{seconds}");
        assert_eq!(berlin("not cron"), "cron “not cron” (Europe/Berlin)");
    }

    #[test]
    fn triggers_use_their_own_zone_first() {
        let parse =
            |v: serde_json::Value| -> Trigger { serde_json::from_value(v).expect("trigger") };
        let zone = Some("Europe/Berlin");
        assert_eq!(
            trigger(
                &parse(json!({"cron": {"expression": "30 9 * * 1", "timezone": "UTC"}})),
                zone
            ),
            "every Monday at 09:30 UTC"
        );
        assert_eq!(
            trigger(&parse(json!({"cron": {"expression": "0 2 * * *"}})), zone),
            "every day at 02:00 Europe/Berlin"
        );
        assert_eq!(
            trigger(&parse(json!({"cron": {"expression": "0 2 * * *"}})), None),
            "every day at 02:00 UTC"
        );
        assert_eq!(trigger(&parse(json!({"every": "15m"})), zone), "every 15m");
        assert_eq!(
            trigger(&parse(json!({"at": "2026-03-01T10:00:00+01:00"})), zone),
            "once at 2026-03-01 09:00 UTC"
        );
    }
}
