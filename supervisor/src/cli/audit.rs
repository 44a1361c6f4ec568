//! `studio audit`: the audit trail (`GET /api/audit`), oldest of the page first, with
//! who made each change, in what role, from where, and what it changed.

use studio_api::{AuditEntry, AuditPage};
use studio_contract::home::Home;

use crate::{
    Error,
    cli::{
        AuditArgs,
        client::{Client, connect, encode},
        schedules::resolve,
        table::{Style, Table, Tone, now_ms, relative, text},
    },
    output::print_json,
};

pub(crate) async fn run(home: &Home, args: AuditArgs) -> Result<u8, Error> {
    let client = connect(home, &args.remote).await?;
    let schedule = match &args.schedule {
        Some(text) => Some(schedule_id(&client, text).await?),
        None => None,
    };
    let page: AuditPage = client.get(&page_path(&args, schedule.as_deref())).await?;
    if args.remote.json {
        print_json(&page)?;
        return Ok(0);
    }
    if page.entries.is_empty() {
        errln!("no audit rows match");
        return Ok(0);
    }
    out!("{}", table(&page.entries, now_ms()).render(Style::detect()))?;
    if page.next_cursor.is_some() {
        errln!("older rows exist: raise --limit (at most 500) or narrow the filters");
    }
    Ok(0)
}

/// A schedule by name or id; a schedule deleted since keeps its rows, so an unknown
/// text is taken as the id it was.
async fn schedule_id(client: &Client, text: &str) -> Result<String, Error> {
    match resolve(client, text).await {
        Ok(found) => Ok(found.id),
        Err(Error::Failed(_)) => Ok(text.to_owned()),
        Err(e) => Err(e),
    }
}

/// `/api/audit` with the command's filters.
fn page_path(args: &AuditArgs, schedule: Option<&str>) -> String {
    let mut path = format!("/api/audit?limit={}", args.limit);
    let object = args.run.as_deref().map(|r| format!("run:{r}"));
    let filters = [
        ("schedule", schedule),
        ("object", object.as_deref()),
        ("principal", args.principal.as_deref()),
        ("kind", args.kind.as_deref()),
        ("since", args.since.as_deref()),
    ];
    for (name, value) in filters {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            path.push_str(&format!("&{name}={}", encode(v)));
        }
    }
    path
}

/// One row per entry, oldest first, so the newest is at the bottom by the prompt.
fn table(entries: &[AuditEntry], now: i64) -> Table {
    let mut table = Table::new(&["WHEN", "KIND", "WHO", "ROLE", "ORIGIN", "OBJECT", "DETAIL"]);
    for e in entries.iter().rev() {
        let detail = match &e.detail {
            serde_json::Value::Object(m) if m.is_empty() => String::new(),
            other => other.to_string(),
        };
        table.row(vec![
            (relative(&e.at, now), Tone::Plain),
            (text(&e.kind), Tone::Plain),
            (text(&e.principal), Tone::Plain),
            (text(&e.role.map(|r| r.as_str().to_owned())), Tone::Plain),
            (text(&e.origin), Tone::Dim),
            (text(&e.object), Tone::Plain),
            (text(&detail), Tone::Dim),
        ]);
    }
    table
}
