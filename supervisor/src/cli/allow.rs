//! `studio allow add|remove|list`: the command allow-list, over studiod's
//! `/api/admin/allowlist` with the daemon token (a browser can read the list, never
//! change it).

use studio_api::{AllowChange, AllowChanged, AllowEntry, AllowList, Code};
use studio_contract::home::Home;

use crate::{
    Error,
    cli::{
        AllowArgs, AllowCommand,
        client::connect,
        table::{Style, Table, Tone, now_ms, relative, text},
    },
    output::print_json,
};

const PATH: &str = "/api/admin/allowlist";

pub(crate) async fn run(home: &Home, command: AllowCommand) -> Result<u8, Error> {
    match command {
        AllowCommand::List { remote } => {
            let answer: AllowList = connect(home, &remote).await?.get(PATH).await?;
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

async fn change(home: &Home, args: AllowArgs, add: bool) -> Result<u8, Error> {
    let names = args.executables.clone();
    let body = if add {
        AllowChange {
            add: names,
            ..AllowChange::default()
        }
    } else {
        AllowChange {
            remove: names,
            ..AllowChange::default()
        }
    };
    let client = connect(home, &args.remote).await?;
    let answer: AllowChanged = match client.post(PATH, &body).await {
        Ok(answer) => answer,
        // An entry studiod cannot take is the user's input: one line, exit 2.
        Err(Error::Api(f)) if f.body.code == Code::ValidationFailed => {
            return Err(Error::Usage(format!("studio allow: {}", f.body.message)));
        }
        Err(e) => return Err(e),
    };
    if args.remote.json {
        print_json(&answer)?;
        return Ok(0);
    }
    let changed = if add { &answer.added } else { &answer.removed };
    let entries = &answer.entries;
    for exe in &args.executables {
        let line = match (add, changed.contains(exe)) {
            (true, true) => format!("allowed {exe}{}", resolution(entries, exe)),
            (true, false) => format!("{exe} was already allowed{}", resolution(entries, exe)),
            (false, true) => format!("removed {exe}: no run starts it from now on"),
            (false, false) => format!("{exe} was not on the allow-list"),
        };
        outln!("{line}")?;
    }
    Ok(0)
}

/// ` → /usr/bin/echo`, or a warning when studiod's PATH does not have it now.
fn resolution(entries: &[AllowEntry], exe: &str) -> String {
    let resolved = entries
        .iter()
        .find(|e| e.executable == exe)
        .and_then(|e| e.resolved.as_deref());
    match resolved {
        Some(path) if path != exe => format!(" → {path}"),
        Some(_) => String::new(),
        None => " (not found on studiod's PATH now: its runs fail until it is)".to_owned(),
    }
}

fn print_list(answer: &AllowList) -> Result<(), Error> {
    let entries = &answer.entries;
    if entries.is_empty() {
        errln!("the allow-list is empty: no command runs (allow one with `studio allow add NAME`)");
        return Ok(());
    }
    let now = now_ms();
    let mut table = Table::new(&["EXECUTABLE", "RUNS", "ADDED", "BY"]);
    for e in entries {
        let (runs, tone) = match &e.resolved {
            Some(path) => (path.clone(), Tone::Plain),
            None => ("not found on studiod's PATH".to_owned(), Tone::Bad),
        };
        table.row(vec![
            (text(&e.executable), Tone::Plain),
            (runs, tone),
            (relative(&e.added_at, now), Tone::Dim),
            (text(&e.added_by), Tone::Dim),
        ]);
    }
    out!("{}", table.render(Style::detect()))
}
