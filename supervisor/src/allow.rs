//! `studio allow add|remove|list`: the command allow-list, over studiod's
//! `/api/admin/allowlist` with the daemon token (a browser can read the list, never
//! change it).

use serde_json::{Value, json};
use studio_contract::home::Home;

use crate::{
    Error,
    cli::AllowCommand,
    schedules::{client, print_json},
    table::{Style, Table, Tone, now_ms, relative, text},
};

const PATH: &str = "/api/admin/allowlist";

pub(crate) async fn run(home: &Home, command: AllowCommand) -> Result<u8, Error> {
    match command {
        AllowCommand::List { remote } => {
            let answer = client(home, &remote).await?.get(PATH).await?;
            if remote.json {
                print_json(&answer)?;
            } else {
                print_list(&answer)?;
            }
            Ok(0)
        }
        AllowCommand::Add(args) => change(home, args, true).await,
        AllowCommand::Remove(args) => change(home, args, false).await,
    }
}

async fn change(home: &Home, args: crate::cli::AllowArgs, add: bool) -> Result<u8, Error> {
    let body = if add {
        json!({ "add": args.executables })
    } else {
        json!({ "remove": args.executables })
    };
    let answer = match client(home, &args.remote).await?.post(PATH, &body).await {
        Ok(answer) => answer,
        // An entry studiod cannot take is the user's input: one line, exit 2.
        Err(Error::Api(f)) if f.code == "validation_failed" => {
            return Err(Error::Usage(format!("studio allow: {}", f.message)));
        }
        Err(e) => return Err(e),
    };
    if args.remote.json {
        print_json(&answer)?;
        return Ok(0);
    }
    let changed = if add {
        &answer["added"]
    } else {
        &answer["removed"]
    };
    let changed: Vec<&str> = changed
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let entries = answer["entries"].as_array().cloned().unwrap_or_default();
    for exe in &args.executables {
        let line = match (add, changed.contains(&exe.as_str())) {
            (true, true) => format!("allowed {exe}{}", resolution(&entries, exe)),
            (true, false) => format!("{exe} was already allowed{}", resolution(&entries, exe)),
            (false, true) => format!("removed {exe}: no run starts it from now on"),
            (false, false) => format!("{exe} was not on the allow-list"),
        };
        outln!("{line}")?;
    }
    Ok(0)
}

/// ` → /usr/bin/echo`, or a warning when studiod's PATH does not have it now.
fn resolution(entries: &[Value], exe: &str) -> String {
    let resolved = entries
        .iter()
        .find(|e| e["executable"] == exe)
        .and_then(|e| e["resolved"].as_str());
    match resolved {
        Some(path) if path != exe => format!(" → {path}"),
        Some(_) => String::new(),
        None => " (not found on studiod's PATH now: its runs fail until it is)".to_owned(),
    }
}

fn print_list(answer: &Value) -> Result<(), Error> {
    let entries = answer["entries"].as_array().cloned().unwrap_or_default();
    if entries.is_empty() {
        errln!("the allow-list is empty: no command runs (allow one with `studio allow add NAME`)");
        return Ok(());
    }
    let now = now_ms();
    let mut table = Table::new(&["EXECUTABLE", "RUNS", "ADDED", "BY"]);
    for e in &entries {
        let (runs, tone) = match e["resolved"].as_str() {
            Some(path) => (path.to_owned(), Tone::Plain),
            None => ("not found on studiod's PATH".to_owned(), Tone::Bad),
        };
        table.row(vec![
            (text(&e["executable"]), Tone::Plain),
            (runs, tone),
            (relative(&e["added_at"], now), Tone::Dim),
            (text(&e["added_by"]), Tone::Dim),
        ]);
    }
    out!("{}", table.render(Style::detect()))
}
