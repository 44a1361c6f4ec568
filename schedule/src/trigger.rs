//! Trigger arithmetic: the first scheduled instant strictly after a given one.
//!
//! Cron runs on the wall clock of its zone. At a spring-forward gap a fixed-time job runs
//! once at the first instant after the gap; at a fall-back overlap a fixed-time job runs
//! once (first pass), while jobs whose hour field repeats (`*/15 * * * *`, `0 * * * *`)
//! run in both passes, as the wall clock says. `every` lives on its own timeline
//! (anchor + k·period), so it never drifts. `at` is one instant.

use croner::{
    Cron,
    parser::{CronParser, Seconds, Year},
};
use jiff::Timestamp;

use crate::zone::Zone;

/// A trigger ready to compute fire instants (milliseconds since the Unix epoch).
#[derive(Debug, Clone)]
pub enum Armed {
    Cron { cron: Box<Cron>, zone: Zone },
    Every { period_ms: i64 },
    At { at_ms: i64 },
}

/// Parses a cron expression: 5 fields, or 6 with seconds first; names, ranges, steps,
/// `L`, `W`, `#` and `@daily`-style macros; when day-of-month and day-of-week are both
/// restricted (anything but a bare `*`, so `*/2` counts) a day matching either fires, as
/// in croniter and unlike cronie (`docs/SCHEDULER.md`, "Time").
pub fn parse_cron(expression: &str) -> Result<Cron, String> {
    let fields = expression.split_whitespace().count();
    if !expression.trim_start().starts_with('@') && !(5..=6).contains(&fields) {
        return Err(format!(
            "a cron expression has 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first; this one has {fields}"
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .dom_and_dow(false)
        .build()
        .parse(expression)
        .map_err(|e| format!("invalid cron expression {expression:?}: {}", describe(&e)))
}

fn describe(e: &croner::errors::CronError) -> String {
    e.to_string().trim_end_matches('.').to_lowercase()
}

/// Fires sampled for a cron's cadence: enough to see past a weekend or a short month.
pub const CADENCE_SAMPLE: usize = 8;

impl Armed {
    /// The first scheduled instant strictly after `after_ms`. `anchor_ms` is the origin of
    /// an `every` timeline (instants are anchor + k·period, k ≥ 1); others ignore it.
    pub fn next_after(&self, after_ms: i64, anchor_ms: i64) -> Option<i64> {
        match self {
            Self::Cron { cron, zone } => {
                let start = Timestamp::from_millisecond(after_ms)
                    .ok()?
                    .to_zoned(zone.tz.clone());
                let next = cron.find_next_occurrence(&start, false).ok()?;
                Some(next.timestamp().as_millisecond())
            }
            Self::Every { period_ms } => {
                let k = (after_ms - anchor_ms).div_euclid(*period_ms) + 1;
                anchor_ms.checked_add(k.max(1).checked_mul(*period_ms)?)
            }
            Self::At { at_ms } => (*at_ms > after_ms).then_some(*at_ms),
        }
    }

    /// The next `count` instants after `after_ms`.
    pub fn upcoming(&self, after_ms: i64, anchor_ms: i64, count: usize) -> Vec<i64> {
        let mut out = Vec::with_capacity(count.min(1_000));
        let mut t = after_ms;
        while out.len() < count {
            match self.next_after(t, anchor_ms) {
                Some(n) => {
                    out.push(n);
                    t = n;
                }
                None => break,
            }
        }
        out
    }

    /// The schedule's cadence, for "overdue" health: the tightest gap between consecutive
    /// fires among the next [`CADENCE_SAMPLE`] after `after_ms` — an interval's period, a
    /// weekday cron's day (not its weekend), a monthly cron's shortest month. `None` for a
    /// one-shot or a trigger with fewer than two fires left. Stable whenever it is taken.
    pub fn cadence_ms(&self, after_ms: i64, anchor_ms: i64) -> Option<i64> {
        match self {
            Self::Every { period_ms } => Some(*period_ms),
            Self::At { .. } => None,
            Self::Cron { .. } => self
                .upcoming(after_ms, anchor_ms, CADENCE_SAMPLE)
                .windows(2)
                .map(|w| w[1] - w[0])
                .min(),
        }
    }

    /// The zone a cron trigger runs in.
    pub fn zone(&self) -> Option<&Zone> {
        match self {
            Self::Cron { zone, .. } => Some(zone),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zone::ZoneSource;

    fn cron(expr: &str, zone: &str) -> Armed {
        Armed::Cron {
            cron: Box::new(parse_cron(expr).expect("valid")),
            zone: Zone::named(zone, ZoneSource::Schedule).expect("zone"),
        }
    }

    fn ms(rfc3339: &str) -> i64 {
        rfc3339
            .parse::<Timestamp>()
            .expect("instant")
            .as_millisecond()
    }

    fn show(list: &[i64], zone: &str) -> Vec<String> {
        let tz = jiff::tz::TimeZone::get(zone).expect("zone");
        list.iter()
            .map(|m| {
                Timestamp::from_millisecond(*m)
                    .expect("ms")
                    .to_zoned(tz.clone())
                    .strftime("%Y-%m-%dT%H:%M:%S%:z")
                    .to_string()
            })
            .collect()
    }

    /// Day of month and day of week: OR when both are restricted, and a step such as
    /// `*/2` restricts (croniter's rule; cronie would read it as `*`, Mondays only).
    #[test]
    fn a_stepped_day_of_month_combines_with_the_weekday_by_or() {
        let days = |expr: &str| {
            let armed = cron(expr, "UTC");
            let fires = armed.upcoming(ms("2026-11-30T12:00:00Z"), 0, 8);
            show(&fires, "UTC")
                .into_iter()
                .map(|t| t[5..10].to_owned())
                .collect::<Vec<_>>()
        };
        // 2026-12-07 and 2026-12-14 are Mondays.
        assert_eq!(
            days("0 0 */2 * 1"),
            [
                "12-01", "12-03", "12-05", "12-07", "12-09", "12-11", "12-13", "12-14"
            ]
        );
        assert_eq!(
            days("0 0 * * 1"),
            [
                "12-07", "12-14", "12-21", "12-28", "01-04", "01-11", "01-18", "01-25"
            ]
        );
    }

    #[test]
    fn cadence_is_the_tightest_gap_whenever_it_is_taken() {
        const DAY: i64 = 86_400_000;
        let weekdays = cron("0 9 * * 1-5", "UTC");
        // Taken on a Friday evening or on a Wednesday, a weekday job's cadence is a day.
        assert_eq!(
            weekdays.cadence_ms(ms("2026-03-06T18:00:00Z"), 0),
            Some(DAY)
        );
        assert_eq!(
            weekdays.cadence_ms(ms("2026-03-04T10:00:00Z"), 0),
            Some(DAY)
        );
        let monthly = cron("0 0 1 * *", "UTC");
        assert_eq!(
            monthly.cadence_ms(ms("2026-01-15T00:00:00Z"), 0),
            Some(28 * DAY)
        );
        let every = Armed::Every { period_ms: 900_000 };
        assert_eq!(every.cadence_ms(5, 0), Some(900_000));
        let once = Armed::At { at_ms: 10 };
        assert_eq!(once.cadence_ms(0, 0), None);
    }

    #[test]
    fn new_york_spring_forward_runs_a_gap_job_once_after_the_gap() {
        let next =
            cron("30 2 * * *", "America/New_York").upcoming(ms("2026-03-07T12:00:00Z"), 0, 3);
        assert_eq!(
            show(&next, "America/New_York"),
            [
                "2026-03-08T03:00:00-04:00",
                "2026-03-09T02:30:00-04:00",
                "2026-03-10T02:30:00-04:00"
            ]
        );
    }

    #[test]
    fn new_york_fall_back_runs_a_fixed_time_job_once() {
        let next =
            cron("30 1 * * *", "America/New_York").upcoming(ms("2026-10-31T12:00:00Z"), 0, 2);
        assert_eq!(
            show(&next, "America/New_York"),
            ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]
        );
    }

    #[test]
    fn repeating_hour_fields_run_in_both_passes() {
        let next =
            cron("*/30 * * * *", "America/New_York").upcoming(ms("2026-11-01T05:00:00Z"), 0, 4);
        assert_eq!(
            show(&next, "America/New_York"),
            [
                "2026-11-01T01:30:00-04:00",
                "2026-11-01T01:00:00-05:00",
                "2026-11-01T01:30:00-05:00",
                "2026-11-01T02:00:00-05:00"
            ]
        );
        let hourly =
            cron("0 * * * *", "America/New_York").upcoming(ms("2026-11-01T04:30:00Z"), 0, 3);
        assert_eq!(
            show(&hourly, "America/New_York"),
            [
                "2026-11-01T01:00:00-04:00",
                "2026-11-01T01:00:00-05:00",
                "2026-11-01T02:00:00-05:00"
            ]
        );
    }

    #[test]
    fn berlin_transitions() {
        // Spring forward 2027-03-28 02:00 → 03:00; fall back 2026-10-25 03:00 → 02:00.
        let spring = cron("30 2 * * *", "Europe/Berlin").upcoming(ms("2027-03-27T12:00:00Z"), 0, 2);
        assert_eq!(
            show(&spring, "Europe/Berlin"),
            ["2027-03-28T03:00:00+02:00", "2027-03-29T02:30:00+02:00"]
        );
        let fall = cron("30 2 * * *", "Europe/Berlin").upcoming(ms("2026-10-24T12:00:00Z"), 0, 2);
        assert_eq!(
            show(&fall, "Europe/Berlin"),
            ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]
        );
    }

    #[test]
    fn leap_days_last_day_weekday_and_nth() {
        let leap = cron("0 12 29 2 *", "UTC").upcoming(ms("2026-01-01T00:00:00Z"), 0, 2);
        assert_eq!(
            show(&leap, "UTC"),
            ["2028-02-29T12:00:00+00:00", "2032-02-29T12:00:00+00:00"]
        );
        let last = cron("0 0 L * *", "UTC").upcoming(ms("2028-01-31T12:00:00Z"), 0, 2);
        assert_eq!(
            show(&last, "UTC"),
            ["2028-02-29T00:00:00+00:00", "2028-03-31T00:00:00+00:00"]
        );
        // The 15th of November 2026 is a Sunday: the nearest weekday is Monday the 16th.
        let w = cron("0 0 15W * *", "UTC").upcoming(ms("2026-11-01T00:00:00Z"), 0, 1);
        assert_eq!(show(&w, "UTC"), ["2026-11-16T00:00:00+00:00"]);
        let nth = cron("0 0 * * FRI#2", "UTC").upcoming(ms("2026-11-01T00:00:00Z"), 0, 2);
        assert_eq!(
            show(&nth, "UTC"),
            ["2026-11-13T00:00:00+00:00", "2026-12-11T00:00:00+00:00"]
        );
        let daily = cron("@daily", "UTC").upcoming(ms("2026-11-01T10:00:00Z"), 0, 1);
        assert_eq!(show(&daily, "UTC"), ["2026-11-02T00:00:00+00:00"]);
    }

    #[test]
    fn day_of_month_and_day_of_week_combine_with_or() {
        // The 1st of the month OR any Monday.
        let next = cron("0 0 1 * MON", "UTC").upcoming(ms("2026-11-29T00:00:00Z"), 0, 3);
        assert_eq!(
            show(&next, "UTC"),
            [
                "2026-11-30T00:00:00+00:00",
                "2026-12-01T00:00:00+00:00",
                "2026-12-07T00:00:00+00:00"
            ]
        );
    }

    #[test]
    fn seconds_field_and_bad_expressions() {
        let next = cron("*/10 * * * * *", "UTC").upcoming(ms("2026-11-01T00:00:01Z"), 0, 2);
        assert_eq!(
            show(&next, "UTC"),
            ["2026-11-01T00:00:10+00:00", "2026-11-01T00:00:20+00:00"]
        );
        for bad in [
            "",
            "* * * *",
            "60 * * * *",
            "* * 32 * *",
            "0 0 1 1 1 2027",
            "bogus",
        ] {
            assert!(parse_cron(bad).is_err(), "{bad:?}");
        }
        // Valid syntax, never fires: the arithmetic says so rather than hanging.
        assert_eq!(cron("0 0 31 2 *", "UTC").next_after(0, 0), None);
    }

    #[test]
    fn every_keeps_to_its_own_timeline() {
        let every = Armed::Every { period_ms: 90_000 };
        assert_eq!(every.next_after(1_000, 1_000), Some(91_000));
        // A late wake-up at 200 s lands back on the timeline, not 90 s after the wake-up.
        assert_eq!(every.next_after(200_000, 1_000), Some(271_000));
        assert_eq!(every.next_after(181_000, 1_000), Some(271_000));
        assert_eq!(every.next_after(0, 1_000), Some(91_000));
        assert_eq!(
            every.upcoming(1_000, 1_000, 3),
            vec![91_000, 181_000, 271_000]
        );
    }

    #[test]
    fn at_fires_once() {
        let at = Armed::At { at_ms: 5_000 };
        assert_eq!(at.next_after(0, 0), Some(5_000));
        assert_eq!(at.next_after(5_000, 0), None);
        assert_eq!(at.upcoming(0, 0, 5), vec![5_000]);
    }
}
