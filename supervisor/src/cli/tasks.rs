//! `studio task submit|list|show|logs|cancel|retry`: on-demand tasks (`/api/tasks`,
//! docs/TASKS.md). `submit` prints the task's id; the same `--key` again answers the task
//! it made (said on stderr), and with another spec is refused.

use std::collections::BTreeMap;

use studio_api::{
    Code, Task, TaskDetail, TaskPage,
    schedule::{Action, ApprovalPolicy, Backoff, Concurrency, RetryOn, RetryPolicy, TaskSpec},
};
use studio_contract::home::Home;

use crate::{
    Error,
    cli::{
        RunIdArgs, TaskCommand, TaskSubmitArgs,
        client::{connect, encode},
        runs,
        table::{Style, Table, Tone, now_ms, relative, text, tone_of},
    },
    output::print_json,
};

pub(crate) async fn run(
    home: &Home,
    command: TaskCommand,
    shutdown: impl Future<Output = ()>,
) -> Result<u8, Error> {
    match command {
        TaskCommand::Submit(args) => submit(home, *args).await,
        TaskCommand::List {
            status,
            label,
            limit,
            remote,
        } => {
            let client = connect(home, &remote).await?;
            let mut path = format!("/api/tasks?limit={limit}");
            if let Some(s) = status.filter(|s| !s.is_empty()) {
                path.push_str(&format!("&status={}", encode(&s)));
            }
            if let Some(l) = label.filter(|l| !l.is_empty()) {
                path.push_str(&format!("&label={}", encode(&l)));
            }
            let page: TaskPage = client.get(&path).await?;
            if remote.json {
                print_json(&page)?;
            } else if page.tasks.is_empty() {
                errln!("no tasks match");
            } else {
                out!("{}", table(&page.tasks, now_ms()).render(Style::detect()))?;
            }
            Ok(0)
        }
        TaskCommand::Show(args) => {
            let client = connect(home, &args.remote).await?;
            let detail: TaskDetail = client
                .get(&format!("/api/tasks/{}", encode(&args.id)))
                .await?;
            if args.remote.json {
                print_json(&detail)?;
            } else {
                out!("{}", show(&detail, now_ms()))?;
            }
            Ok(0)
        }
        TaskCommand::Logs {
            task,
            stderr,
            follow,
        } => {
            let client = connect(home, &task.remote).await?;
            let detail: TaskDetail = client
                .get(&format!("/api/tasks/{}", encode(&task.id)))
                .await?;
            let Some(run) = detail.task.last_run_id else {
                return Err(Error::Failed(format!(
                    "task {} has not started: no attempt has a log yet",
                    task.id
                )));
            };
            let args = RunIdArgs {
                id: run,
                remote: task.remote,
            };
            runs::logs(home, args, stderr, follow, shutdown).await
        }
        TaskCommand::Retry(args) => {
            let client = connect(home, &args.remote).await?;
            let task: Task = client
                .post(
                    &format!("/api/tasks/{}/retry", encode(&args.id)),
                    &serde_json::json!({}),
                )
                .await?;
            if args.remote.json {
                print_json(&task)?;
            } else {
                outln!("{} {}", task.id, task.status.as_str())?;
            }
            Ok(0)
        }
        TaskCommand::Cancel(args) => {
            let client = connect(home, &args.remote).await?;
            let task: Task = client
                .post(
                    &format!("/api/tasks/{}/cancel", encode(&args.id)),
                    &serde_json::json!({}),
                )
                .await?;
            if args.remote.json {
                print_json(&task)?;
            } else if task.status.is_terminal() {
                outln!("{} {}", task.id, task.status.as_str())?;
            } else {
                // Its attempt was signalled; the task ends when the job has.
                outln!("{} cancelling", task.id)?;
            }
            Ok(0)
        }
    }
}

async fn submit(home: &Home, args: TaskSubmitArgs) -> Result<u8, Error> {
    let action = match (args.agent, args.command.split_first()) {
        (Some(prompt), None) => Action::Agent {
            prompt,
            model: args.model,
            profile: args.profile,
        },
        (None, Some((executable, rest))) => Action::Command {
            executable: executable.clone(),
            args: rest.to_vec(),
        },
        _ => {
            return Err(Error::Usage(
                "give the command after `--` (studio task submit -- make test), or --agent PROMPT, not both".into(),
            ));
        }
    };
    let concurrency = args
        .concurrency
        .map(|text| {
            let (key, limit) = text.rsplit_once(':').unwrap_or((&text, "1"));
            limit
                .parse()
                .ok()
                .filter(|_| !key.is_empty())
                .map(|limit| Concurrency {
                    key: key.to_owned(),
                    limit,
                })
                .ok_or_else(|| {
                    Error::Usage(format!("--concurrency {text:?} is not KEY or KEY:LIMIT"))
                })
        })
        .transpose()?;
    let pairs = |flag: &str, list: Vec<String>, shape: &str| {
        let mut map = BTreeMap::new();
        for pair in list {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| Error::Usage(format!("--{flag} {pair:?} is not {shape}")))?;
            map.insert(k.to_owned(), v.to_owned());
        }
        Ok::<_, Error>(map)
    };
    let env = pairs("env", args.env, "NAME=VALUE")?;
    let secrets = pairs("secret", args.secret, "NAME=SECRET")?;
    let spec = TaskSpec {
        action,
        labels: args.label,
        priority: args.priority,
        idempotency_key: args.key,
        concurrency,
        deadline: args.deadline,
        cwd: args.cwd,
        env,
        secrets,
        notify: Vec::new(),
        retry: args.attempts.map(|max_attempts| RetryPolicy {
            max_attempts,
            backoff: Backoff::default(),
            on: vec![RetryOn::Failed, RetryOn::TimedOut, RetryOn::WorkerLost],
            exit_codes: Vec::new(),
        }),
        approval: args.approval.map(|expires_after| ApprovalPolicy {
            required: true,
            expires_after,
            distinct_from_requester: false,
        }),
    };
    let client = connect(home, &args.remote).await?;
    let before = now_ms();
    let task: Task = match client.post("/api/tasks", &spec).await {
        Ok(task) => task,
        // What studiod refuses in the spec is the user's input: one line, exit 2.
        Err(Error::Api(f)) if f.body.code == Code::ValidationFailed => {
            let parts: Vec<String> = f
                .body
                .errors
                .iter()
                .map(|e| format!("{}: {}", e.path, e.reason))
                .collect();
            let line = if parts.is_empty() {
                f.body.message.clone()
            } else {
                parts.join("; ")
            };
            return Err(Error::Usage(format!("the task is refused: {line}")));
        }
        Err(e) => return Err(e),
    };
    if args.remote.json {
        print_json(&task)?;
        return Ok(0);
    }
    let created_at = task
        .created_at
        .parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .unwrap_or(before);
    // Made before this command asked: the key named an earlier submission.
    if created_at < before {
        errln!("a task with this key was submitted before: {}", task.id);
    }
    if task.unmatched {
        errln!(
            "no worker has the labels {}: the task waits until one that has them joins",
            task.spec.labels.join(", ")
        );
    }
    outln!("{}", task.id)?;
    Ok(0)
}

/// One row per task, oldest of the page first.
fn table(tasks: &[Task], now: i64) -> Table {
    let mut table = Table::new(&[
        "ID",
        "SUBMITTED",
        "STATUS",
        "PRI",
        "LABELS",
        "TRIES",
        "WHAT",
    ]);
    for t in tasks.iter().rev() {
        let status = if t.unmatched {
            "unmatched".to_owned()
        } else {
            t.status.as_str().to_owned()
        };
        table.row(vec![
            (t.id.clone(), Tone::Plain),
            (relative(&t.created_at, now), Tone::Plain),
            (status.clone(), tone_of(&status)),
            (t.spec.priority.to_string(), Tone::Plain),
            (text(&t.spec.labels.join(",")), Tone::Plain),
            (t.attempts.to_string(), Tone::Plain),
            (what(&t.spec.action), Tone::Dim),
        ]);
    }
    table
}

fn what(action: &Action) -> String {
    crate::cli::approvals::what(&serde_json::json!({ "action": action }))
}

fn show(d: &TaskDetail, now: i64) -> String {
    let t = &d.task;
    let mut lines = vec![
        format!("task       {}", t.id),
        format!(
            "status     {}{}",
            t.status.as_str(),
            if t.unmatched {
                " (unmatched: no worker has its labels)"
            } else {
                ""
            }
        ),
        format!("runs       {}", what(&t.spec.action)),
        format!("labels     {}", text(&t.spec.labels.join(", "))),
        format!("priority   {}", t.spec.priority),
        format!(
            "submitted  {} by {}",
            relative(&t.created_at, now),
            text(&t.submitted_by)
        ),
    ];
    if let Some(key) = &t.spec.idempotency_key {
        lines.push(format!("key        {key}"));
    }
    if let Some(c) = &t.spec.concurrency {
        lines.push(format!("concurrency {} (at most {})", c.key, c.limit));
    }
    if let Some(reason) = &t.reason {
        lines.push(format!("reason     {reason}"));
    }
    if let Some(at) = &t.next_attempt_at {
        lines.push(format!("next try   {}", relative(at, now)));
    }
    if !d.attempts.is_empty() {
        let mut table = Table::new(&["ATTEMPT", "RUN", "STATUS", "WORKER", "STARTED", "EXIT"]);
        for a in &d.attempts {
            let c = &a.core;
            table.row(vec![
                (c.attempt.to_string(), Tone::Plain),
                (c.id.clone(), Tone::Plain),
                (c.status.as_str().to_owned(), tone_of(c.status.as_str())),
                (text(&c.worker_id), Tone::Plain),
                (relative(&c.dispatched_at, now), Tone::Plain),
                (text(&c.exit_code.map(|e| e.to_string())), Tone::Plain),
            ]);
        }
        lines.push(String::new());
        lines.push(table.render(Style::plain()));
    }
    lines.join("\n")
}
