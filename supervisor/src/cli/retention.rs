//! `studio retention show | set | run`: how long studiod keeps finished runs, their logs
//! and ended notifications, and the passes that prune the rest (`/api/admin/retention`,
//! docs/OPERATIONS.md, "Retention and archives"), with the daemon token.
//!
//! `set` sends a whole policy, built from flags or read from a JSON file: a part left
//! out keeps everything it governs. What can be judged here (an interval, a count, a
//! size, a relative directory) is refused before anything is sent, in one line that
//! names the flag; studiod's own refusals read the same way. `run` waits for its pass
//! however long it takes: only connecting to studiod is bounded.

use std::{
    io::Read,
    ops::RangeInclusive,
    path::{Path, PathBuf},
};

use jiff::Timestamp;
use studio_api::{
    Code, ErrorBody, FieldError, LogsRetention, NotificationsRetention, RetentionPass,
    RetentionPolicy, RetentionRunRequest, RetentionState, RunsRetention, WalCheckpoint,
};
use studio_contract::home::Home;
use studio_schedule::duration::parse_interval;

use crate::{
    Error,
    cli::{
        Remote, RetentionCommand, RetentionSetArgs,
        client::connect,
        table::{Style, Table, Tone, human_bytes, human_ms, instant, now_ms, relative, tone_of},
    },
    output::print_json,
};

const PATH: &str = "/api/admin/retention";
const RUN_PATH: &str = "/api/admin/retention/run";
/// The pass interval studiod takes (`RetentionPolicy::interval`: 1m to 7d).
const INTERVAL_MS: RangeInclusive<i64> = 60_000..=7 * 86_400_000;
/// The smallest log cap studiod takes (`LogsRetention::max_bytes`).
const MIN_LOG_BYTES: u64 = 1 << 20;

pub(crate) async fn run(home: &Home, command: RetentionCommand) -> Result<u8, Error> {
    match command {
        RetentionCommand::Show { remote } => show(home, &remote).await,
        RetentionCommand::Set(args) => set(home, &args).await,
        RetentionCommand::Run {
            archive_dir,
            remote,
        } => pass(home, archive_dir.as_deref(), &remote).await,
    }
}

async fn show(home: &Home, remote: &Remote) -> Result<u8, Error> {
    let state: RetentionState = connect(home, remote).await?.get(PATH).await?;
    print_state(&state, remote.json)
}

fn print_state(state: &RetentionState, json: bool) -> Result<u8, Error> {
    if json {
        print_json(state)?;
    } else {
        out!("{}", render_state(state, now_ms(), Style::detect()))?;
    }
    Ok(0)
}

async fn set(home: &Home, args: &RetentionSetArgs) -> Result<u8, Error> {
    let (policy, given) = policy_of(args)?;
    let client = connect(home, &args.remote).await?;
    let state: RetentionState = match client.put(PATH, &policy).await {
        Ok((_, state)) => state,
        // What studiod refuses in the policy is the user's input: one line, exit 2.
        Err(Error::Api(f)) if f.body.code == Code::ValidationFailed => {
            return Err(Error::Usage(refusal(
                &f.body.errors,
                &f.body.message,
                &policy,
                &given,
            )));
        }
        Err(Error::Api(f)) if f.body.code == Code::Conflict => {
            return Err(Error::Failed(format!(
                "{}: change it there and restart studiod",
                f.body.message
            )));
        }
        Err(e) => return Err(e),
    };
    print_state(&state, args.remote.json)
}

/// `studio retention run`: one pass now, waited for.
async fn pass(home: &Home, archive_dir: Option<&Path>, remote: &Remote) -> Result<u8, Error> {
    let request = RetentionRunRequest {
        archive_dir: archive_dir.map(absolute).transpose()?,
    };
    let client = connect(home, remote).await?;
    errln!("running a retention pass (it may take minutes on a large home)");
    let pass: RetentionPass = match client.post_unbounded(RUN_PATH, &request).await {
        Ok(pass) => pass,
        Err(Error::Api(f)) if f.body.code == Code::ValidationFailed => {
            return Err(run_refusal(&f.body, request.archive_dir.as_deref()));
        }
        Err(e) => return Err(e),
    };
    if remote.json {
        print_json(&pass)?;
    } else {
        out!("{}", render_pass(&pass))?;
    }
    if pass.outcome == "failed" {
        return Err(Error::Failed(format!(
            "retention pass {} failed: {}",
            pass.id,
            pass.error.as_deref().unwrap_or("studiod gave no reason")
        )));
    }
    Ok(0)
}

/// A refused pass: a directory given here is the user's input (exit 2); the policy's
/// is not.
fn run_refusal(body: &ErrorBody, dir: Option<&str>) -> Error {
    let reasons: Vec<&str> = body.errors.iter().map(|e| e.reason.as_str()).collect();
    let why = if reasons.is_empty() {
        // studiod words a directory it cannot make as `archive_dir cannot make …`.
        body.message
            .strip_prefix("archive_dir ")
            .unwrap_or(&body.message)
            .to_owned()
    } else {
        reasons.join("; ")
    };
    match dir {
        Some(dir) => Error::Usage(format!("--archive-dir {dir:?}: {why}")),
        None => Error::Failed(format!("the policy's archive directory: {why}")),
    }
}

/// Where a policy came from, to name its parts in a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Given {
    Flags,
    /// The file as a refusal names it (`stdin` for `-`).
    File(String),
}

impl Given {
    /// The part at `path` with its value: `--interval "3x"`, `policy.json: interval "3x"`.
    fn name(&self, path: &str, policy: &RetentionPolicy) -> String {
        let part = match self {
            Given::Flags => flag_of(path).map_or_else(|| path.to_owned(), str::to_owned),
            Given::File(file) => format!("{file}: {path}"),
        };
        match value_of(policy, path) {
            Some(value) => format!("{part} {value}"),
            None => part,
        }
    }
}

/// The flag that sets the part at `path`.
fn flag_of(path: &str) -> Option<&'static str> {
    Some(match path {
        "runs.max_age" => "--runs-max-age",
        "runs.keep_last" => "--runs-keep-last",
        "logs.max_bytes" => "--logs-max-bytes",
        "notifications.delivered" => "--notifications-delivered",
        "notifications.dead" => "--notifications-dead",
        "archive_dir" => "--archive-dir",
        "interval" => "--interval",
        _ => return None,
    })
}

/// The value at `path`, as a refusal quotes it.
fn value_of(policy: &RetentionPolicy, path: &str) -> Option<String> {
    let runs = policy.runs.as_ref();
    let notifications = policy.notifications.as_ref();
    let quoted = |s: Option<&String>| s.map(|s| format!("{s:?}"));
    match path {
        "runs.max_age" => quoted(runs.and_then(|r| r.max_age.as_ref())),
        "runs.keep_last" => runs.and_then(|r| r.keep_last).map(|n| n.to_string()),
        "logs.max_bytes" => policy
            .logs
            .as_ref()
            .and_then(|l| l.max_bytes)
            .map(|n| n.to_string()),
        "notifications.delivered" => quoted(notifications.and_then(|n| n.delivered.as_ref())),
        "notifications.dead" => quoted(notifications.and_then(|n| n.dead.as_ref())),
        "archive_dir" => quoted(policy.archive_dir.as_ref()),
        "interval" => quoted(policy.interval.as_ref()),
        _ => None,
    }
}

/// Problems with a policy as one line: `--interval "3x": unexpected 'x' …; --runs-keep-last
/// 0: must be at least 1 …`; `message` when no part is named.
fn refusal(
    errors: &[FieldError],
    message: &str,
    policy: &RetentionPolicy,
    given: &Given,
) -> String {
    let parts: Vec<String> = errors
        .iter()
        .map(|e| {
            if e.path.is_empty() {
                e.reason.clone()
            } else {
                format!("{}: {}", given.name(&e.path, policy), e.reason)
            }
        })
        .collect();
    if parts.is_empty() {
        message.to_owned()
    } else {
        parts.join("; ")
    }
}

/// The policy `set` sends, and where it came from; refused here when it is plainly
/// wrong.
fn policy_of(args: &RetentionSetArgs) -> Result<(RetentionPolicy, Given), Error> {
    let (policy, given) = match (&args.file, has_flags(args)) {
        (Some(_), true) => {
            return Err(Error::Usage(
                "--file and the policy flags are exclusive: give the whole policy one way or the other"
                    .into(),
            ));
        }
        (Some(file), false) => read_policy(file)?,
        (None, true) => (from_flags(args)?, Given::Flags),
        // An empty policy keeps everything: it should not be one slip of the keyboard away.
        (None, false) => {
            return Err(Error::Usage(
                "no policy given: pass its flags (like --runs-max-age 30d) or --file FILE \
                 (`echo '{}' | studio retention set --file -` keeps everything)"
                    .into(),
            ));
        }
    };
    let problems = check(&policy);
    if problems.is_empty() {
        Ok((policy, given))
    } else {
        Err(Error::Usage(refusal(&problems, "", &policy, &given)))
    }
}

fn has_flags(args: &RetentionSetArgs) -> bool {
    args.runs_max_age.is_some()
        || args.runs_keep_last.is_some()
        || args.logs_max_bytes.is_some()
        || args.notifications_delivered.is_some()
        || args.notifications_dead.is_some()
        || args.archive_dir.is_some()
        || args.interval.is_some()
}

/// The whole policy the flags say: a part no flag names is left out.
fn from_flags(args: &RetentionSetArgs) -> Result<RetentionPolicy, Error> {
    let runs =
        (args.runs_max_age.is_some() || args.runs_keep_last.is_some()).then(|| RunsRetention {
            max_age: args.runs_max_age.clone(),
            keep_last: args.runs_keep_last,
        });
    let notifications = (args.notifications_delivered.is_some()
        || args.notifications_dead.is_some())
    .then(|| NotificationsRetention {
        delivered: args.notifications_delivered.clone(),
        dead: args.notifications_dead.clone(),
    });
    Ok(RetentionPolicy {
        runs,
        logs: args
            .logs_max_bytes
            .map(|n| LogsRetention { max_bytes: Some(n) }),
        notifications,
        archive_dir: args.archive_dir.as_deref().map(absolute).transpose()?,
        interval: args.interval.clone(),
    })
}

/// `--archive-dir` as studiod takes it: absolute (a relative one is taken from the
/// current directory) and UTF-8.
fn absolute(dir: &Path) -> Result<String, Error> {
    let path = std::path::absolute(dir)
        .map_err(|e| Error::Usage(format!("--archive-dir {}: {e}", dir.display())))?;
    path.into_os_string().into_string().map_err(|p| {
        Error::Usage(format!(
            "--archive-dir {}: the path is not UTF-8",
            PathBuf::from(p).display()
        ))
    })
}

/// The policy in `--file FILE` (`-`: stdin).
fn read_policy(file: &Path) -> Result<(RetentionPolicy, Given), Error> {
    let shown = file.display();
    let (text, name) = if file == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Error::Usage(format!("--file -: cannot read stdin: {e}")))?;
        (text, "stdin".to_owned())
    } else {
        let text = std::fs::read_to_string(file)
            .map_err(|e| Error::Usage(format!("--file {shown}: {e}")))?;
        (text, shown.to_string())
    };
    let policy =
        parse_policy(&text).map_err(|why| Error::Usage(format!("--file {shown}: {why}")))?;
    Ok((policy, Given::File(name)))
}

/// A policy from JSON text, or why the text is none.
fn parse_policy(text: &str) -> Result<RetentionPolicy, String> {
    serde_json::from_str(text).map_err(|e| format!("not a retention policy as JSON: {e}"))
}

/// What studiod would refuse in `policy` that can be told here.
fn check(policy: &RetentionPolicy) -> Vec<FieldError> {
    let runs = policy.runs.as_ref();
    let notifications = policy.notifications.as_ref();
    let mut errors = Vec::new();
    let intervals = [
        ("runs.max_age", runs.and_then(|r| r.max_age.as_ref())),
        (
            "notifications.delivered",
            notifications.and_then(|n| n.delivered.as_ref()),
        ),
        (
            "notifications.dead",
            notifications.and_then(|n| n.dead.as_ref()),
        ),
        ("interval", policy.interval.as_ref()),
    ];
    for (path, text) in intervals {
        let Some(text) = text else { continue };
        match parse_interval(text) {
            Err(why) => errors.push(FieldError::new(path, why)),
            Ok(ms) if path == "interval" && !INTERVAL_MS.contains(&ms) => {
                errors.push(FieldError::new(path, "must be from 1m to 7d"));
            }
            Ok(_) => {}
        }
    }
    if runs.and_then(|r| r.keep_last) == Some(0) {
        errors.push(FieldError::new(
            "runs.keep_last",
            "must be at least 1 (leave it out to keep runs by age only)",
        ));
    }
    if policy
        .logs
        .as_ref()
        .and_then(|l| l.max_bytes)
        .is_some_and(|n| n < MIN_LOG_BYTES)
    {
        errors.push(FieldError::new(
            "logs.max_bytes",
            "must be at least 1048576 (1 MiB)",
        ));
    }
    if policy
        .archive_dir
        .as_ref()
        .is_some_and(|d| !Path::new(d).is_absolute())
    {
        errors.push(FieldError::new(
            "archive_dir",
            "must be an absolute directory",
        ));
    }
    errors
}

/// What a part left out keeps.
const EVERYTHING: &str = "keep everything";

/// `show`'s text: the policy part by part, where it comes from, the next pass, then the
/// latest passes.
fn render_state(state: &RetentionState, now: i64, style: Style) -> String {
    let mut lines = policy_lines(&state.policy);
    lines.push(("source", source_line(state, now)));
    let next = state
        .next_pass_at
        .as_ref()
        .map_or_else(|| "not scheduled".to_owned(), |at| instant(at, now));
    lines.push(("next pass", next));
    let mut out: String = lines
        .iter()
        .map(|(label, value)| format!("{label:<13}  {value}\n"))
        .collect();
    out.push('\n');
    if state.passes.is_empty() {
        out.push_str("no passes yet\n");
        return out;
    }
    out.push_str(&passes_table(&state.passes, now).render(style));
    for p in state.passes.iter().filter(|p| p.outcome == "failed") {
        let why = p.error.as_deref().unwrap_or("studiod gave no reason");
        out.push_str(&format!("pass {} failed: {why}\n", p.id));
    }
    out
}

/// The policy's parts, one line each.
fn policy_lines(policy: &RetentionPolicy) -> Vec<(&'static str, String)> {
    let runs = match &policy.runs {
        Some(RunsRetention {
            max_age: Some(age),
            keep_last: Some(n),
        }) => format!("max age {age}, but keep the last {n} per schedule"),
        Some(RunsRetention {
            max_age: Some(age),
            keep_last: None,
        }) => format!("max age {age}"),
        Some(RunsRetention {
            max_age: None,
            keep_last: Some(n),
        }) => format!("keep the last {n} per schedule"),
        _ => EVERYTHING.to_owned(),
    };
    let logs = match policy.logs.as_ref().and_then(|l| l.max_bytes) {
        Some(n) => format!("at most {} ({n} bytes)", human_bytes(n)),
        None => EVERYTHING.to_owned(),
    };
    let notifications = match &policy.notifications {
        Some(n) if n.delivered.is_some() || n.dead.is_some() => {
            let part = |v: &Option<String>| v.clone().unwrap_or_else(|| EVERYTHING.to_owned());
            format!("delivered {}, dead {}", part(&n.delivered), part(&n.dead))
        }
        _ => EVERYTHING.to_owned(),
    };
    let archive_dir = policy.archive_dir.clone().unwrap_or_else(|| {
        "none (passes that run on their own delete without archiving)".to_owned()
    });
    let interval = policy
        .interval
        .clone()
        .unwrap_or_else(|| "1h (the default)".to_owned());
    vec![
        ("runs", runs),
        ("logs", logs),
        ("notifications", notifications),
        ("archive dir", archive_dir),
        ("interval", interval),
    ]
}

/// `api, set 2026-01-01T00:00:00Z (3m ago) by daemon`.
fn source_line(state: &RetentionState, now: i64) -> String {
    let mut line = match state.source.as_str() {
        "default" => "default (never set)".to_owned(),
        "config" => "config (STUDIO_RETENTION: `studio retention set` is refused)".to_owned(),
        other => other.to_owned(),
    };
    if let Some(at) = &state.updated_at {
        line.push_str(&format!(", set {}", instant(at, now)));
    }
    if let Some(by) = &state.updated_by {
        line.push_str(&format!(" by {by}"));
    }
    line
}

/// The latest passes, newest first, as studiod lists them.
fn passes_table(passes: &[RetentionPass], now: i64) -> Table {
    let mut table = Table::new(&[
        "ID",
        "TRIGGER",
        "STARTED",
        "OUTCOME",
        "PRUNED RUNS",
        "ARCHIVES",
        "CHUNKS",
        "LONGEST CHUNK",
        "CHECKPOINT",
    ]);
    for p in passes {
        let runs = p.pruned.get("runs").copied().unwrap_or(0);
        let checkpoint = p.checkpoint.as_ref().map_or_else(
            || ("-".to_owned(), Tone::Dim),
            |c| {
                let tone = if c.busy { Tone::Warn } else { Tone::Plain };
                (checkpoint_cell(c), tone)
            },
        );
        table.row(vec![
            (p.id.to_string(), Tone::Plain),
            (p.trigger.clone(), Tone::Plain),
            (relative(&p.started_at, now), Tone::Dim),
            (p.outcome.clone(), tone_of(&p.outcome)),
            (runs.to_string(), Tone::Plain),
            (p.archives.to_string(), Tone::Plain),
            (p.chunks.to_string(), Tone::Plain),
            (longest(p), Tone::Plain),
            checkpoint,
        ]);
    }
    table
}

/// `ok 4.0 MiB→0 B`: how it ended and the WAL's size before and after.
fn checkpoint_cell(c: &WalCheckpoint) -> String {
    format!("{} {}", checkpoint_word(c), wal_sizes(c))
}

fn checkpoint_word(c: &WalCheckpoint) -> &'static str {
    if c.busy { "busy" } else { "ok" }
}

/// `4.0 MiB→0 B`.
fn wal_sizes(c: &WalCheckpoint) -> String {
    format!(
        "{}→{}",
        human_bytes(c.wal_bytes_before),
        human_bytes(c.wal_bytes_after)
    )
}

/// The longest a chunk's transaction held the writer; `-` with no chunk.
fn longest(p: &RetentionPass) -> String {
    if p.chunks == 0 {
        "-".to_owned()
    } else {
        format!("{:.1} ms", p.longest_chunk_ms)
    }
}

/// `run`'s text: a line per pruned table, the archives, the chunks, the checkpoint and
/// the outcome.
fn render_pass(p: &RetentionPass) -> String {
    let mut lines: Vec<String> = p
        .pruned
        .iter()
        .map(|(table, n)| match table.as_str() {
            "log_bytes" => format!("{table} {}", human_bytes(*n)),
            _ => format!("{table} {n}"),
        })
        .collect();
    if lines.is_empty() {
        lines.push("nothing to prune".to_owned());
    }
    lines.push(match &p.archive_dir {
        Some(dir) => format!("archives {} in {dir}", p.archives),
        None => format!("archives {} (no archive directory)", p.archives),
    });
    lines.push(if p.chunks == 0 {
        "chunks 0".to_owned()
    } else {
        format!(
            "chunks {}, the longest held the writer {}",
            p.chunks,
            longest(p)
        )
    });
    lines.push(match &p.checkpoint {
        Some(c) => format!(
            "checkpoint {}: WAL {}, {} of {} frames moved in {:.1} ms{}",
            checkpoint_word(c),
            wal_sizes(c),
            c.checkpointed_frames,
            c.log_frames,
            c.took_ms,
            if c.busy {
                " (a reader kept it from finishing: the WAL is not truncated)"
            } else {
                ""
            }
        ),
        None => "checkpoint not made (`studio audit --kind wal_checkpoint` says why)".to_owned(),
    });
    let took = took(p).map_or_else(String::new, |t| format!(" in {t}"));
    lines.push(format!("pass {} ({}) {}{took}", p.id, p.trigger, p.outcome));
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// How long the pass ran, when it has ended.
fn took(p: &RetentionPass) -> Option<String> {
    let started = p.started_at.parse::<Timestamp>().ok()?;
    let finished = p.finished_at.as_deref()?.parse::<Timestamp>().ok()?;
    let ms = finished.as_millisecond() - started.as_millisecond();
    Some(human_ms(ms.max(0).unsigned_abs()))
}

#[cfg(test)]
#[path = "retention_tests.rs"]
mod tests;
