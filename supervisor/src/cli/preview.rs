//! `studio schedule preview`: the next fire instants of a cron or interval trigger,
//! computed locally with the same arithmetic and validation the daemon uses. It needs
//! no daemon and reads or writes no file.

use jiff::{Timestamp, tz::TimeZone};
use studio_schedule::{
    Action, Context, CronTrigger, ScheduleSpec, Trigger, Zone, ZoneSource, validate,
};

use crate::Error;

/// How many instants one preview may print.
pub const MAX_COUNT: u64 = 1_000;
/// How many instants a preview prints when not asked.
pub const DEFAULT_COUNT: u64 = 5;

/// One preview request, as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewRequest {
    /// Exactly one of a cron expression or an interval.
    pub trigger: PreviewTrigger,
    /// `--tz`: the zone cron runs in and instants are shown in.
    pub tz: Option<String>,
    /// `--from`: RFC 3339; fires come strictly after it (and `--every` is anchored at it).
    pub from: Option<String>,
    pub count: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreviewTrigger {
    Cron(String),
    Every(String),
}

/// The next fire instants as RFC 3339 lines in the zone used. `configured_tz` is
/// `STUDIO_SCHEDULER_TZ`; `now_ms` is used when no `--from` is given.
pub fn fires(
    req: &PreviewRequest,
    configured_tz: Option<&str>,
    now_ms: i64,
) -> Result<Vec<String>, Error> {
    let count = req.count.unwrap_or(DEFAULT_COUNT);
    if !(1..=MAX_COUNT).contains(&count) {
        return Err(Error::Usage(format!(
            "--count: must be between 1 and {MAX_COUNT}"
        )));
    }
    let from_ms = match &req.from {
        Some(text) => text
            .trim()
            .parse::<Timestamp>()
            .map_err(|_| {
                Error::Usage(
                    "--from: must be an RFC 3339 instant with an offset, like 2026-12-01T09:00:00+01:00"
                        .into(),
                )
            })?
            .as_millisecond(),
        None => now_ms,
    };
    // A zone named by --tz is the schedule's own; a broken STUDIO_SCHEDULER_TZ only
    // matters when --tz does not override it.
    let zone = match &req.tz {
        Some(name) => Zone::named(name, ZoneSource::Schedule)
            .map_err(|e| Error::Usage(format!("--tz: {e}")))?,
        None => Zone::default_for(configured_tz).map_err(Error::Usage)?,
    };
    let trigger = match &req.trigger {
        PreviewTrigger::Cron(expression) => Trigger::Cron(CronTrigger {
            expression: expression.clone(),
            timezone: Some(zone.name.clone()),
        }),
        PreviewTrigger::Every(interval) => Trigger::Every(interval.clone()),
    };
    let spec = ScheduleSpec {
        target: None,
        name: None,
        description: String::new(),
        enabled: true,
        trigger,
        // Validation needs an action; the allow-list is not checked (`allowlist: None`).
        action: Action::Command {
            executable: "true".into(),
            args: Vec::new(),
        },
        cwd: None,
        env: Default::default(),
        secrets: Default::default(),
        notify: Vec::new(),
        policies: Default::default(),
        on_success: None,
        on_fail: None,
    };
    let ctx = Context {
        default_zone: &zone,
        allowlist: None,
        secrets: None,
        endpoints: None,
        now_ms: Some(from_ms),
        require_name: false,
    };
    let validated = validate(spec, &ctx).map_err(|errors| {
        let first = errors
            .into_iter()
            .next()
            .map(|e| format!("{}: {}", flag_of(&e.path), e.reason))
            .unwrap_or_else(|| "invalid trigger".into());
        Error::Usage(first)
    })?;
    // `count` is at most MAX_COUNT, so the conversion cannot truncate.
    let instants = validated.armed.upcoming(from_ms, from_ms, count as usize);
    instants.into_iter().map(|ms| show(ms, &zone.tz)).collect()
}

/// The command-line flag a spec field path came from.
fn flag_of(path: &str) -> &str {
    match path {
        "trigger.cron.expression" => "--cron",
        "trigger.cron.timezone" => "--tz",
        "trigger.every" => "--every",
        other => other,
    }
}

/// RFC 3339 with the zone's offset; milliseconds only when there are any.
fn show(ms: i64, tz: &TimeZone) -> Result<String, Error> {
    let ts = Timestamp::from_millisecond(ms)
        .map_err(|e| Error::Failed(format!("instant out of range: {e}")))?;
    let format = if ms.rem_euclid(1_000) == 0 {
        "%Y-%m-%dT%H:%M:%S%:z"
    } else {
        "%Y-%m-%dT%H:%M:%S%.3f%:z"
    };
    Ok(ts.to_zoned(tz.clone()).strftime(format).to_string())
}

/// Prints the preview, one instant a line.
pub(crate) fn run(req: &PreviewRequest) -> Result<(), Error> {
    let configured = crate::config::scheduler_zone();
    let now_ms = Timestamp::now().as_millisecond();
    let lines = fires(req, configured.as_deref(), now_ms)?;
    let mut out = String::with_capacity(lines.len() * 26);
    for line in lines {
        out.push_str(&line);
        out.push('\n');
    }
    out!("{out}")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron(expr: &str, tz: Option<&str>, from: &str, count: u64) -> Result<Vec<String>, Error> {
        let req = PreviewRequest {
            trigger: PreviewTrigger::Cron(expr.into()),
            tz: tz.map(Into::into),
            from: Some(from.into()),
            count: Some(count),
        };
        fires(&req, None, 0)
    }

    fn usage(result: Result<Vec<String>, Error>) -> String {
        match result {
            Err(Error::Usage(msg)) => msg,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn new_york_spring_forward_runs_once_after_the_gap() {
        let fires = cron(
            "30 2 * * *",
            Some("America/New_York"),
            "2026-03-07T12:00:00Z",
            3,
        )
        .expect("valid");
        assert_eq!(
            fires,
            [
                "2026-03-08T03:00:00-04:00",
                "2026-03-09T02:30:00-04:00",
                "2026-03-10T02:30:00-04:00"
            ]
        );
    }

    #[test]
    fn new_york_fall_back_runs_a_fixed_time_once() {
        let fires = cron(
            "30 1 * * *",
            Some("America/New_York"),
            "2026-10-31T12:00:00Z",
            2,
        )
        .expect("valid");
        assert_eq!(
            fires,
            ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]
        );
    }

    #[test]
    fn the_configured_zone_is_the_default_and_tz_overrides_it() {
        let req = PreviewRequest {
            trigger: PreviewTrigger::Cron("0 9 * * *".into()),
            tz: None,
            from: Some("2026-06-01T00:00:00Z".into()),
            count: Some(1),
        };
        assert_eq!(
            fires(&req, Some("Europe/Berlin"), 0).expect("valid"),
            ["2026-06-01T09:00:00+02:00"]
        );
        let req = PreviewRequest {
            tz: Some("UTC".into()),
            ..req
        };
        // A broken STUDIO_SCHEDULER_TZ does not matter once --tz names the zone.
        assert_eq!(
            fires(&req, Some("Nope/Nope"), 0).expect("valid"),
            ["2026-06-01T09:00:00+00:00"]
        );
        let req = PreviewRequest { tz: None, ..req };
        assert!(usage(fires(&req, Some("Nope/Nope"), 0)).starts_with("STUDIO_SCHEDULER_TZ: "));
    }

    #[test]
    fn every_is_anchored_at_from_and_count_defaults_to_5() {
        let req = PreviewRequest {
            trigger: PreviewTrigger::Every("90m".into()),
            tz: Some("UTC".into()),
            from: Some("2026-01-01T00:00:00Z".into()),
            count: None,
        };
        assert_eq!(
            fires(&req, None, 0).expect("valid"),
            [
                "2026-01-01T01:30:00+00:00",
                "2026-01-01T03:00:00+00:00",
                "2026-01-01T04:30:00+00:00",
                "2026-01-01T06:00:00+00:00",
                "2026-01-01T07:30:00+00:00"
            ]
        );
        // Without --from, "now" anchors it, milliseconds included.
        let req = PreviewRequest {
            from: None,
            count: Some(1),
            ..req
        };
        assert_eq!(
            fires(&req, None, 1_767_225_600_250).expect("valid"),
            ["2026-01-01T01:30:00.250+00:00"]
        );
    }

    #[test]
    fn bad_input_is_a_usage_error_naming_the_flag() {
        let from = "2026-01-01T00:00:00Z";
        let msg = usage(cron("0 0 31 2 *", Some("UTC"), from, 5));
        assert!(
            msg.starts_with("--cron: ") && msg.contains("never fire"),
            "{msg}"
        );
        let msg = usage(cron("61 * * * *", Some("UTC"), from, 5));
        assert!(msg.starts_with("--cron: invalid cron expression"), "{msg}");
        let msg = usage(cron("0 * * * *", Some("Mars/Olympus"), from, 5));
        assert!(msg.starts_with("--tz: unknown time zone"), "{msg}");
        let msg = usage(cron("0 * * * *", Some("UTC"), "yesterday", 5));
        assert!(msg.starts_with("--from: "), "{msg}");
        for count in [0, MAX_COUNT + 1] {
            let msg = usage(cron("0 * * * *", Some("UTC"), from, count));
            assert!(msg.starts_with("--count: "), "{msg}");
        }
        let req = PreviewRequest {
            trigger: PreviewTrigger::Every("5 minutes".into()),
            tz: Some("UTC".into()),
            from: None,
            count: None,
        };
        let msg = usage(fires(&req, None, 0));
        assert!(msg.starts_with("--every: "), "{msg}");
        assert_eq!(Error::Usage(msg).exit_code(), 2);
    }

    #[test]
    fn a_thousand_fires_at_most() {
        let fires =
            cron("* * * * *", Some("UTC"), "2026-01-01T00:00:00Z", MAX_COUNT).expect("valid");
        assert_eq!(fires.len(), 1_000);
        assert_eq!(fires[999], "2026-01-01T16:40:00+00:00");
    }
}
