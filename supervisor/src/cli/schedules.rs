//! `studio schedule list|show|enable|disable|trigger|delete`: the everyday verbs on
//! stored schedules, over studiod's `/api/schedules`. A NAME is a schedule's name or id.

use reqwest::Method;
use studio_api::{Deleted, Run, Schedule, SchedulePage};
use studio_contract::home::Home;
use studio_schedule::Trigger;

use crate::{
    Error,
    cli::{
        NameArgs, Remote, ScheduleCommand,
        client::{Client, connect, encode},
        declare,
        table::{Style, Table, Tone, instant, now_ms, relative, text, tone_of},
    },
    output::{pretty, print_json},
};

/// A page as large as the API allows: listings are walked to the end.
const PAGE: u32 = 500;

pub(crate) async fn run(home: &Home, command: ScheduleCommand) -> Result<u8, Error> {
    match command {
        // Handled before the home is resolved (lib.rs).
        ScheduleCommand::Preview(_) | ScheduleCommand::Validate { .. } => Ok(0),
        ScheduleCommand::Plan(args) => declare::plan(home, args).await,
        ScheduleCommand::Apply { plan, yes } => declare::apply(home, plan, yes).await,
        ScheduleCommand::Export {
            project,
            out,
            remote,
        } => declare::export(home, project, out, remote).await,
        ScheduleCommand::List {
            query,
            enabled,
            out,
        } => list(home, query, enabled, out).await,
        ScheduleCommand::Show(args) => show(home, args).await,
        ScheduleCommand::Enable(args) => toggle(home, args, "enable").await,
        ScheduleCommand::Disable(args) => toggle(home, args, "disable").await,
        ScheduleCommand::Trigger(args) => trigger(home, args).await,
        ScheduleCommand::Delete(args) => delete(home, args).await,
    }
}

/// Every schedule matching the filters, all pages walked.
pub(crate) async fn all(
    client: &Client,
    query: Option<&str>,
    enabled: Option<bool>,
) -> Result<Vec<Schedule>, Error> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/schedules?limit={PAGE}");
        if let Some(q) = query {
            path.push_str(&format!("&q={}", encode(q)));
        }
        if let Some(e) = enabled {
            path.push_str(&format!("&enabled={e}"));
        }
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={}", encode(c)));
        }
        let page: SchedulePage = client.get(&path).await?;
        out.extend(page.schedules);
        match page.next_cursor {
            Some(c) if !c.is_empty() => cursor = Some(c),
            _ => return Ok(out),
        }
    }
}

/// The schedule a NAME means: an exact name first (names are what people type), else
/// an id.
pub(crate) async fn resolve(client: &Client, name: &str) -> Result<Schedule, Error> {
    let matches = all(client, Some(name), None).await?;
    if let Some(found) = matches.into_iter().find(|s| s.name == name) {
        return Ok(found);
    }
    match client
        .get(&format!("/api/schedules/{}", encode(name)))
        .await
    {
        Ok(found) => Ok(found),
        Err(Error::Api(f)) if f.status == 404 => Err(Error::Failed(format!(
            "no schedule named {name:?} (nor with that id); `studio schedule list` shows them"
        ))),
        Err(e) => Err(e),
    }
}

async fn list(
    home: &Home,
    query: Option<String>,
    enabled: Option<bool>,
    out: Remote,
) -> Result<u8, Error> {
    let client = connect(home, &out).await?;
    let schedules = all(&client, query.as_deref(), enabled).await?;
    if out.json {
        print_json(&SchedulePage {
            schedules,
            next_cursor: None,
        })?;
        return Ok(0);
    }
    let style = Style::detect();
    let now = now_ms();
    let mut table = Table::new(&["NAME", "STATE", "HEALTH", "TRIGGER", "NEXT", "LAST", "RUNS"]);
    for s in &schedules {
        let state = state(s);
        let health = text(&s.health);
        table.row(vec![
            (text(&s.name), Tone::Plain),
            (state.to_owned(), tone_of(state)),
            (health.clone(), tone_of(&health)),
            (trigger_of(s), Tone::Plain),
            (relative(&s.next_fire_at, now), Tone::Plain),
            (relative(&s.last_fired_at, now), Tone::Plain),
            (text(&s.runs_counted), Tone::Plain),
        ]);
    }
    if table.is_empty() {
        errln!("no schedules");
    } else {
        out!("{}", table.render(style))?;
    }
    Ok(0)
}

fn state(schedule: &Schedule) -> &'static str {
    if schedule.enabled {
        "enabled"
    } else {
        "disabled"
    }
}

/// The schedule's trigger as one phrase, a cron in the zone it runs in.
fn trigger_of(schedule: &Schedule) -> String {
    trigger_summary(&schedule.spec.trigger, schedule.timezone.as_deref())
}

/// `cron 0 2 * * * (Europe/Berlin)`, `every 15m`, `at 2026-…`.
pub(crate) fn trigger_summary(trigger: &Trigger, zone: Option<&str>) -> String {
    match trigger {
        Trigger::Cron(cron) => {
            let tz = cron
                .timezone
                .as_deref()
                .or(zone)
                .map(|z| format!(" ({z})"))
                .unwrap_or_default();
            format!("cron {}{tz}", text(&cron.expression))
        }
        Trigger::Every(every) => format!("every {}", text(every)),
        Trigger::At(at) => format!("at {}", text(at)),
    }
}

async fn show(home: &Home, args: NameArgs) -> Result<u8, Error> {
    let client = connect(home, &args.remote).await?;
    let s = resolve(&client, &args.name).await?;
    if args.remote.json {
        print_json(&s)?;
        return Ok(0);
    }
    let style = Style::detect();
    for (key, value, tone) in facts(&s, now_ms()) {
        outln!("{:<11} {}", format!("{key}:"), style.paint(&value, tone))?;
    }
    let spec = pretty(&s.spec).map_err(|e| Error::Failed(format!("cannot print the spec: {e}")))?;
    outln!("spec:\n{spec}")?;
    Ok(0)
}

/// The lines of `schedule show` above the spec: label, value, tone.
fn facts(s: &Schedule, now: i64) -> [(&'static str, String, Tone); 12] {
    let state = state(s);
    let health = text(&s.health);
    let zone = format!("{} ({})", text(&s.timezone), text(&s.timezone_source));
    [
        ("name", text(&s.name), Tone::Plain),
        ("id", text(&s.id), Tone::Dim),
        ("state", state.to_owned(), tone_of(state)),
        ("health", health.clone(), tone_of(&health)),
        ("trigger", trigger_of(s), Tone::Plain),
        ("zone", zone, Tone::Plain),
        ("next fire", instant(&s.next_fire_at, now), Tone::Plain),
        ("last fired", instant(&s.last_fired_at, now), Tone::Plain),
        ("runs", text(&s.runs_counted), Tone::Plain),
        ("spend", format!("${}", text(&s.spend_usd)), Tone::Plain),
        ("revision", text(&s.revision), Tone::Plain),
        ("updated", instant(&s.updated_at, now), Tone::Plain),
    ]
}

async fn toggle(home: &Home, args: NameArgs, verb: &str) -> Result<u8, Error> {
    let client = connect(home, &args.remote).await?;
    let s = resolve(&client, &args.name).await?;
    let after: Schedule = client
        .call(
            Method::POST,
            &format!("/api/schedules/{}/{verb}", encode(&s.id)),
        )
        .await?;
    if args.remote.json {
        print_json(&after)?;
    } else {
        outln!("{verb}d {}", text(&after.name))?;
    }
    Ok(0)
}

async fn trigger(home: &Home, args: NameArgs) -> Result<u8, Error> {
    let client = connect(home, &args.remote).await?;
    let s = resolve(&client, &args.name).await?;
    let run: Run = client
        .call(
            Method::POST,
            &format!("/api/schedules/{}/trigger", encode(&s.id)),
        )
        .await?;
    if args.remote.json {
        print_json(&run)?;
    } else {
        outln!(
            "triggered {}: run {} ({}); `studio run logs {} -f` follows it",
            text(&s.name),
            text(&run.core.id),
            text(&run.core.status),
            text(&run.core.id),
        )?;
    }
    Ok(0)
}

async fn delete(home: &Home, args: NameArgs) -> Result<u8, Error> {
    let client = connect(home, &args.remote).await?;
    let s = resolve(&client, &args.name).await?;
    let answer: Deleted = client
        .call(Method::DELETE, &format!("/api/schedules/{}", encode(&s.id)))
        .await?;
    if args.remote.json {
        print_json(&answer)?;
    } else {
        outln!("deleted {} ({}); its runs stay", text(&s.name), s.id)?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use studio_schedule::CronTrigger;

    use super::*;

    #[test]
    fn triggers_read_as_one_phrase() {
        let cron = |timezone: Option<&str>| {
            Trigger::Cron(CronTrigger {
                expression: "0 2 * * *".into(),
                timezone: timezone.map(str::to_owned),
            })
        };
        let zone = Some("UTC");
        assert_eq!(
            trigger_summary(&cron(Some("Europe/Berlin")), zone),
            "cron 0 2 * * * (Europe/Berlin)"
        );
        assert_eq!(trigger_summary(&cron(None), zone), "cron 0 2 * * * (UTC)");
        assert_eq!(
            trigger_summary(&Trigger::Every("15m".into()), zone),
            "every 15m"
        );
        assert_eq!(
            trigger_summary(&Trigger::At("2026-01-01T00:00:00Z".into()), zone),
            "at 2026-01-01T00:00:00Z"
        );
    }

    /// A schedule as studiod sends it.
    const SCHEDULE: &str = r#"{"id":"sch_1","name":"demo/report",
        "spec":{"name":"demo/report","trigger":{"cron":{"expression":"0 2 * * *"}},
                "action":{"kind":"command","executable":"echo","args":["hi"]},
                "policies":{"missed_fire":"run_once","overlap":"skip","budget_usd":1.5}},
        "enabled":true,"trigger_kind":"cron","timezone":"Europe/Berlin",
        "timezone_source":"daemon_default","next_fire_at":"2026-01-02T01:00:00Z",
        "last_fired_at":null,"health":"never-fired","last_outcome":null,
        "last_outcome_at":null,"max_runs":null,"runs_counted":0,"spend_usd":0.0,
        "created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z",
        "revision":3,"managed_by":null,"owner_key":null,"source":null,"recent_runs":[]}"#;

    /// `--json` prints a typed answer exactly as it printed the JSON it was read from.
    #[test]
    fn json_output_is_the_answer_as_sent() {
        let schedule: Schedule = serde_json::from_str(SCHEDULE).expect("a schedule");
        let sent: Value = serde_json::from_str(SCHEDULE).expect("json");
        let expected = serde_json::to_string_pretty(&sent).expect("text");
        assert_eq!(pretty(&schedule).expect("text"), expected);
        assert_eq!(
            crate::output::json_line(&schedule).expect("text"),
            sent.to_string()
        );
    }

    #[test]
    fn show_reads_every_fact() {
        let schedule: Schedule = serde_json::from_str(SCHEDULE).expect("a schedule");
        let now = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        let lines: Vec<String> = facts(&schedule, now)
            .into_iter()
            .map(|(key, value, _)| format!("{key}: {value}"))
            .collect();
        assert_eq!(
            lines,
            [
                "name: demo/report",
                "id: sch_1",
                "state: enabled",
                "health: never-fired",
                "trigger: cron 0 2 * * * (Europe/Berlin)",
                "zone: Europe/Berlin (daemon_default)",
                "next fire: 2026-01-02T01:00:00Z (in 1d)",
                "last fired: - (-)",
                "runs: 0",
                "spend: $0.0",
                "revision: 3",
                "updated: 2026-01-01T00:00:00Z (now)",
            ]
        );
    }
}
