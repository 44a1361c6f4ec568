//! `studio approvals [--status S] [--schedule NAME]`: the approval requests
//! (`GET /api/approvals`), oldest of the page first; `studio approvals show ID`: one
//! request with exactly what will run and its evidence rows. Deciding is a person's, in
//! the cockpit: the daemon token this command holds cannot grant nor deny.

use studio_api::{Approval, ApprovalDetail, ApprovalPage};
use studio_contract::home::Home;

use crate::{
    Error,
    cli::{
        ApprovalsArgs, ApprovalsCommand,
        client::{connect, encode},
        schedules::resolve,
        table::{Style, Table, Tone, now_ms, relative, text, tone_of},
    },
    output::print_json,
};

pub(crate) async fn run(
    home: &Home,
    command: Option<ApprovalsCommand>,
    args: ApprovalsArgs,
) -> Result<u8, Error> {
    if let Some(ApprovalsCommand::Show { id, remote }) = command {
        let client = connect(home, &remote).await?;
        let detail: ApprovalDetail = client
            .get(&format!("/api/approvals/{}", encode(&id)))
            .await?;
        if remote.json {
            print_json(&detail)?;
        } else {
            out!("{}", show(&detail, now_ms()))?;
        }
        return Ok(0);
    }
    let client = connect(home, &args.remote).await?;
    let mut path = format!("/api/approvals?limit={}", args.limit);
    if let Some(status) = args.status.as_deref().filter(|s| !s.is_empty()) {
        path.push_str(&format!("&status={}", encode(status)));
    }
    if let Some(name) = &args.schedule {
        let schedule = resolve(&client, name).await?;
        path.push_str(&format!("&schedule_id={}", encode(&schedule.id)));
    }
    let page: ApprovalPage = client.get(&path).await?;
    if args.remote.json {
        print_json(&page)?;
        return Ok(0);
    }
    if page.approvals.is_empty() {
        errln!("no approval requests match");
        return Ok(0);
    }
    out!(
        "{}",
        table(&page.approvals, now_ms()).render(Style::detect())
    )?;
    if page.next_cursor.is_some() {
        errln!("older requests exist: raise --limit (at most 500) or narrow the filters");
    }
    Ok(0)
}

/// What will run, in one line: the command line, or the agent's prompt.
pub(crate) fn what(action: &serde_json::Value) -> String {
    let a = &action["action"];
    match a["kind"].as_str() {
        Some("command") => {
            let mut words = vec![a["executable"].as_str().unwrap_or_default().to_owned()];
            for arg in a["args"].as_array().into_iter().flatten() {
                let arg = arg.as_str().unwrap_or_default();
                let plain = !arg.is_empty()
                    && arg
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
                words.push(if plain {
                    arg.to_owned()
                } else {
                    format!("'{}'", arg.replace('\'', r"'\''"))
                });
            }
            words.join(" ")
        }
        Some("agent") => format!("agent: {}", a["prompt"].as_str().unwrap_or_default()),
        _ => action.to_string(),
    }
}

fn requester(a: &Approval) -> String {
    a.requested_by.clone().unwrap_or_else(|| "the clock".into())
}

/// One row per request, oldest first, so the newest is at the bottom by the prompt.
fn table(approvals: &[Approval], now: i64) -> Table {
    let mut table = Table::new(&[
        "ID",
        "ASKED",
        "STATUS",
        "SCHEDULE",
        "BY",
        "EXPIRES",
        "DECIDED BY",
        "WHAT",
    ]);
    for a in approvals.iter().rev() {
        let status = a.status.as_str();
        let expires = if a.status.as_str() == "pending" {
            relative(&a.expires_at, now)
        } else {
            "-".into()
        };
        table.row(vec![
            (a.id.clone(), Tone::Plain),
            (relative(&a.requested_at, now), Tone::Plain),
            (status.to_owned(), tone_of(status)),
            (text(&a.schedule_name), Tone::Plain),
            (requester(a), Tone::Plain),
            (expires, Tone::Plain),
            (text(&a.decided_by), Tone::Plain),
            (what(&a.action), Tone::Dim),
        ]);
    }
    table
}

fn show(d: &ApprovalDetail, now: i64) -> String {
    let a = &d.approval;
    let action = &a.action;
    let env: Vec<&str> = action["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .collect();
    let mut lines = vec![
        format!("approval   {}", a.id),
        format!("status     {}", a.status.as_str()),
        format!("schedule   {}", text(&a.schedule_name)),
        format!("run        {}", a.run_id),
        format!("runs       {}", what(action)),
        format!("cwd        {}", action["cwd"].as_str().unwrap_or("-")),
        format!(
            "env        {}",
            if env.is_empty() {
                "-".into()
            } else {
                env.join(", ")
            }
        ),
        format!("sha256     {}", a.action_sha256),
        format!(
            "asked      {} by {}",
            relative(&a.requested_at, now),
            requester(a)
        ),
        format!("expires    {}", relative(&a.expires_at, now)),
    ];
    if action.get("follow_ups").is_some() {
        lines.push(format!("follow-ups {}", action["follow_ups"]));
    }
    if a.distinct_from_requester {
        lines.push("rule       the requester may not decide".into());
    }
    if let Some(by) = &a.decided_by {
        lines.push(format!(
            "decided    {} by {by} ({}) from {}",
            relative(&a.decided_at, now),
            a.decided_role.map(|r| r.as_str()).unwrap_or("-"),
            a.decided_origin.as_deref().unwrap_or("-"),
        ));
    }
    if let Some(reason) = &a.reason {
        lines.push(format!("reason     {reason}"));
    }
    if !d.evidence.is_empty() {
        let mut table = Table::new(&["SEQ", "KIND", "AT", "CHAIN"]);
        for row in &d.evidence {
            let at = studio_contract::time::rfc3339(row.at_ms);
            table.row(vec![
                (row.seq.to_string(), Tone::Plain),
                (row.kind.clone(), Tone::Plain),
                (relative(&at, now), Tone::Plain),
                (row.chain_sha256.chars().take(16).collect(), Tone::Dim),
            ]);
        }
        lines.push(String::new());
        lines.push(table.render(Style::plain()));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::what;

    #[test]
    fn what_runs_reads_as_a_command_line() {
        let command = json!({"action": {"kind": "command", "executable": "deploy",
            "args": ["--env=prod", "two words", "it's"]}, "cwd": null, "env": []});
        assert_eq!(what(&command), r"deploy --env=prod 'two words' 'it'\''s'");
        let agent = json!({"action": {"kind": "agent", "prompt": "summarise"}});
        assert_eq!(what(&agent), "agent: summarise");
    }
}
