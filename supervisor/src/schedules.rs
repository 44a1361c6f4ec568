//! `studio schedule list|show|enable|disable|trigger|delete`: the everyday verbs on
//! stored schedules, over studiod's `/api/schedules`. A NAME is a schedule's name or id.

use reqwest::Method;
use serde_json::{Value, json};
use studio_contract::home::Home;

use crate::{
    Error,
    cli::{NameArgs, Remote, ScheduleCommand},
    client::{Client, encode},
    declare,
    table::{Style, Table, Tone, now_ms, relative, text, tone_of},
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

pub(crate) async fn client(home: &Home, remote: &Remote) -> Result<Client, Error> {
    Client::connect(home, remote.daemon.as_deref()).await
}

/// Every schedule matching the filters, all pages walked.
pub(crate) async fn all(
    client: &Client,
    query: Option<&str>,
    enabled: Option<bool>,
) -> Result<Vec<Value>, Error> {
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
        let page = client.get(&path).await?;
        out.extend(page["schedules"].as_array().cloned().unwrap_or_default());
        match page["next_cursor"].as_str() {
            Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
            _ => return Ok(out),
        }
    }
}

/// The schedule a NAME means: an exact name first (names are what people type), else
/// an id.
pub(crate) async fn resolve(client: &Client, name: &str) -> Result<Value, Error> {
    let matches = all(client, Some(name), None).await?;
    if let Some(found) = matches.into_iter().find(|s| s["name"] == name) {
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

fn id_of(schedule: &Value) -> Result<String, Error> {
    schedule["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| Error::Failed(format!("studiod sent a schedule without an id: {schedule}")))
}

pub(crate) fn print_json(value: &Value) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::Failed(format!("cannot print JSON: {e}")))?;
    outln!("{text}")?;
    Ok(())
}

async fn list(
    home: &Home,
    query: Option<String>,
    enabled: Option<bool>,
    out: Remote,
) -> Result<u8, Error> {
    let client = client(home, &out).await?;
    let schedules = all(&client, query.as_deref(), enabled).await?;
    if out.json {
        print_json(&json!({ "schedules": schedules, "next_cursor": null }))?;
        return Ok(0);
    }
    let style = Style::detect();
    let now = now_ms();
    let mut table = Table::new(&["NAME", "STATE", "HEALTH", "TRIGGER", "NEXT", "LAST", "RUNS"]);
    for s in &schedules {
        let state = if s["enabled"] == true {
            "enabled"
        } else {
            "disabled"
        };
        let health = text(&s["health"]);
        table.row(vec![
            (text(&s["name"]), Tone::Plain),
            (state.to_owned(), tone_of(state)),
            (health.clone(), tone_of(&health)),
            (
                trigger_summary(&s["spec"]["trigger"], &s["timezone"]),
                Tone::Plain,
            ),
            (relative(&s["next_fire_at"], now), Tone::Plain),
            (relative(&s["last_fired_at"], now), Tone::Plain),
            (text(&s["runs_counted"]), Tone::Plain),
        ]);
    }
    if table.is_empty() {
        errln!("no schedules");
    } else {
        out!("{}", table.render(style))?;
    }
    Ok(0)
}

/// `cron 0 2 * * * (Europe/Berlin)`, `every 15m`, `at 2026-…`.
pub(crate) fn trigger_summary(trigger: &Value, zone: &Value) -> String {
    if let Some(cron) = trigger.get("cron") {
        let tz = cron["timezone"]
            .as_str()
            .or(zone.as_str())
            .map(|z| format!(" ({z})"))
            .unwrap_or_default();
        format!("cron {}{tz}", text(&cron["expression"]))
    } else if let Some(every) = trigger.get("every") {
        format!("every {}", text(every))
    } else if let Some(at) = trigger.get("at") {
        format!("at {}", text(at))
    } else {
        text(trigger)
    }
}

async fn show(home: &Home, args: NameArgs) -> Result<u8, Error> {
    let client = client(home, &args.remote).await?;
    let s = resolve(&client, &args.name).await?;
    if args.remote.json {
        print_json(&s)?;
        return Ok(0);
    }
    let style = Style::detect();
    let now = now_ms();
    let state = if s["enabled"] == true {
        "enabled"
    } else {
        "disabled"
    };
    let health = text(&s["health"]);
    let at = |key: &str| format!("{} ({})", text(&s[key]), relative(&s[key], now));
    let zone = format!("{} ({})", text(&s["timezone"]), text(&s["timezone_source"]));
    let lines = [
        ("name", text(&s["name"]), Tone::Plain),
        ("id", text(&s["id"]), Tone::Dim),
        ("state", state.to_owned(), tone_of(state)),
        ("health", health.clone(), tone_of(&health)),
        (
            "trigger",
            trigger_summary(&s["spec"]["trigger"], &s["timezone"]),
            Tone::Plain,
        ),
        ("zone", zone, Tone::Plain),
        ("next fire", at("next_fire_at"), Tone::Plain),
        ("last fired", at("last_fired_at"), Tone::Plain),
        ("runs", text(&s["runs_counted"]), Tone::Plain),
        ("spend", format!("${}", text(&s["spend_usd"])), Tone::Plain),
        ("revision", text(&s["revision"]), Tone::Plain),
        ("updated", at("updated_at"), Tone::Plain),
    ];
    for (key, value, tone) in lines {
        outln!("{:<11} {}", format!("{key}:"), style.paint(&value, tone))?;
    }
    let spec = serde_json::to_string_pretty(&s["spec"])
        .map_err(|e| Error::Failed(format!("cannot print the spec: {e}")))?;
    outln!("spec:\n{spec}")?;
    Ok(0)
}

async fn toggle(home: &Home, args: NameArgs, verb: &str) -> Result<u8, Error> {
    let client = client(home, &args.remote).await?;
    let s = resolve(&client, &args.name).await?;
    let id = id_of(&s)?;
    let after = client
        .post(
            &format!("/api/schedules/{}/{verb}", encode(&id)),
            &json!({}),
        )
        .await?;
    if args.remote.json {
        print_json(&after)?;
    } else {
        outln!("{verb}d {}", text(&after["name"]))?;
    }
    Ok(0)
}

async fn trigger(home: &Home, args: NameArgs) -> Result<u8, Error> {
    let client = client(home, &args.remote).await?;
    let s = resolve(&client, &args.name).await?;
    let id = id_of(&s)?;
    let run = client
        .post(
            &format!("/api/schedules/{}/trigger", encode(&id)),
            &json!({}),
        )
        .await?;
    if args.remote.json {
        print_json(&run)?;
    } else {
        outln!(
            "triggered {}: run {} ({}); `studio run logs {} -f` follows it",
            text(&s["name"]),
            text(&run["id"]),
            text(&run["status"]),
            text(&run["id"]),
        )?;
    }
    Ok(0)
}

async fn delete(home: &Home, args: NameArgs) -> Result<u8, Error> {
    let client = client(home, &args.remote).await?;
    let s = resolve(&client, &args.name).await?;
    let id = id_of(&s)?;
    let answer = client
        .send(
            Method::DELETE,
            &format!("/api/schedules/{}", encode(&id)),
            None,
        )
        .await?;
    if args.remote.json {
        print_json(&answer)?;
    } else {
        outln!("deleted {} ({id}); its runs stay", text(&s["name"]))?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_read_as_one_phrase() {
        let zone = json!("UTC");
        assert_eq!(
            trigger_summary(
                &json!({"cron": {"expression": "0 2 * * *", "timezone": "Europe/Berlin"}}),
                &zone
            ),
            "cron 0 2 * * * (Europe/Berlin)"
        );
        assert_eq!(
            trigger_summary(&json!({"cron": {"expression": "0 2 * * *"}}), &zone),
            "cron 0 2 * * * (UTC)"
        );
        assert_eq!(
            trigger_summary(&json!({"every": "15m"}), &zone),
            "every 15m"
        );
        assert_eq!(
            trigger_summary(&json!({"at": "2026-01-01T00:00:00Z"}), &zone),
            "at 2026-01-01T00:00:00Z"
        );
    }
}
