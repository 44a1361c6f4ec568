//! `studio runs [-f]` and `studio run show|logs|cancel ID`: runs over studiod's
//! `/api/runs`, following `/api/events` and ranged log reads.

use std::{
    future::Future,
    io::{self, Write},
    time::Duration,
};

use reqwest::Method;
use studio_api::{Run, RunCore, RunDetail, RunEvent, RunPage, Transition};
use studio_contract::home::Home;

use crate::{
    Error,
    cli::{
        RunCommand, RunIdArgs, RunsArgs,
        client::{Client, connect, encode},
        schedules::resolve,
        table::{Style, Table, Tone, human_ms, instant, now_ms, relative, text, tone_of},
    },
    output::{json_line, print_json},
};

/// How often `run logs -f` looks for more output.
const LOG_POLL: Duration = Duration::from_millis(500);
/// The most one log read asks for (the daemon's own cap).
const LOG_CHUNK: u64 = 1024 * 1024;

/// The name a run ran under (`-` for a run from before names were kept whose schedule
/// is gone).
fn name_of(name: Option<&str>) -> String {
    name.map_or_else(|| "-".to_owned(), |n| text(&n))
}

pub(crate) async fn list(
    home: &Home,
    args: RunsArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<u8, Error> {
    let client = connect(home, &args.remote).await?;
    let schedule_id = match &args.schedule {
        Some(name) => Some(resolve(&client, name).await?.id),
        None => None,
    };
    // Subscribed before listing, so no change falls between the listing and the stream.
    let events = if args.follow {
        Some(client.stream("/api/events", &[]).await?)
    } else {
        None
    };
    let page: RunPage = client
        .get(&page_path(&args, schedule_id.as_deref()))
        .await?;
    let style = Style::detect();
    print_page(&page, &args, style)?;
    let Some(events) = events else {
        return Ok(0);
    };
    let filter = Filter {
        schedule_id: schedule_id.as_deref(),
        status: args.status.as_deref(),
    };
    let json = args.remote.json;
    follow(Sse::new(events), filter, json, style, shutdown).await
}

/// `/api/runs` with the listing's filters.
fn page_path(args: &RunsArgs, schedule_id: Option<&str>) -> String {
    let mut path = format!("/api/runs?limit={}", args.limit);
    if let Some(id) = schedule_id {
        path.push_str(&format!("&schedule={}", encode(id)));
    }
    if let Some(status) = &args.status {
        path.push_str(&format!("&status={}", encode(status)));
    }
    path
}

/// The listing, oldest first, so followed changes continue at the bottom.
fn print_page(page: &RunPage, args: &RunsArgs, style: Style) -> Result<(), Error> {
    let runs = page.runs.iter().rev();
    if args.remote.json {
        if args.follow {
            // A stream for scripts: one JSON object a line.
            for run in runs {
                outln!("{}", json_line(run)?)?;
            }
        } else {
            print_json(page)?;
        }
        return Ok(());
    }
    let now = now_ms();
    let mut table = Table::new(&[
        "RUN", "SCHEDULE", "KIND", "STATUS", "REASON", "CREATED", "DURATION", "EXIT",
    ]);
    for run in runs.map(|r| &r.core) {
        table.row(vec![
            (text(&run.id), Tone::Plain),
            (name_of(run.schedule_name.as_deref()), Tone::Plain),
            (text(&run.kind), Tone::Plain),
            (text(&run.status), tone_of(run.status.as_str())),
            (text(&run.reason), Tone::Plain),
            (relative(&run.created_at, now), Tone::Plain),
            (duration(run.duration_ms), Tone::Plain),
            (exit(run), Tone::Plain),
        ]);
    }
    if table.is_empty() {
        errln!("no runs");
    } else {
        out!("{}", table.render(style))?;
    }
    Ok(())
}

/// Which followed run changes `studio runs -f` prints: the listing's filters.
struct Filter<'a> {
    schedule_id: Option<&'a str>,
    status: Option<&'a str>,
}

/// Prints run changes as they happen, until `shutdown` or the end of the stream.
async fn follow(
    mut sse: Sse,
    filter: Filter<'_>,
    json: bool,
    style: Style,
    shutdown: impl Future<Output = ()>,
) -> Result<u8, Error> {
    tokio::pin!(shutdown);
    loop {
        let event = tokio::select! {
            e = sse.next() => e?,
            () = &mut shutdown => return Ok(0),
        };
        let Some((kind, data)) = event else {
            return Err(Error::Failed(
                "the event stream ended (did studiod stop?)".to_owned(),
            ));
        };
        if kind == "run" {
            print_event(&data, &filter, json, style)?;
        }
    }
}

/// One followed run change (an event's `RunEvent`), when it passes the filter.
fn print_event(data: &str, filter: &Filter<'_>, json: bool, style: Style) -> Result<(), Error> {
    let Ok(run) = serde_json::from_str::<RunEvent>(data) else {
        return Ok(());
    };
    let wanted = filter
        .schedule_id
        .is_none_or(|id| run.schedule_id.as_deref() == Some(id))
        && filter.status.is_none_or(|s| run.status.as_str() == s);
    if !wanted {
        return Ok(());
    }
    if json {
        return outln!("{}", json_line(&run)?);
    }
    let status = text(&run.status);
    outln!(
        "{}  {}  {}  {}  {}  {}",
        jiff::Zoned::now().strftime("%H:%M:%S"),
        text(&run.id),
        name_of(run.schedule_name.as_deref()),
        text(&run.kind),
        style.paint(&status, tone_of(&status)),
        text(&run.reason),
    )
}

fn duration(ms: Option<i64>) -> String {
    ms.and_then(|ms| u64::try_from(ms).ok())
        .map_or_else(|| "-".to_owned(), human_ms)
}

fn exit(run: &RunCore) -> String {
    match (run.exit_code, run.signal) {
        (None, None) => "-".to_owned(),
        (code, None) => text(&code),
        (_, Some(signal)) => format!("signal {signal}"),
    }
}

/// Server-sent events from a response body: `(event, data)` pairs.
struct Sse {
    resp: reqwest::Response,
    buf: Vec<u8>,
    kind: String,
    data: Vec<String>,
}

impl Sse {
    fn new(resp: reqwest::Response) -> Self {
        Self {
            resp,
            buf: Vec::new(),
            kind: String::new(),
            data: Vec::new(),
        }
    }

    /// The next event; `None` when the stream ends.
    async fn next(&mut self) -> Result<Option<(String, String)>, Error> {
        loop {
            while let Some(nl) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=nl).collect();
                let line = String::from_utf8_lossy(&line);
                let line = line.trim_end_matches(['\n', '\r']);
                if line.is_empty() {
                    let kind = std::mem::take(&mut self.kind);
                    if !self.data.is_empty() {
                        let data = std::mem::take(&mut self.data).join("\n");
                        return Ok(Some((kind, data)));
                    }
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "event" => value.clone_into(&mut self.kind),
                    "data" => self.data.push(value.to_owned()),
                    _ => {}
                }
            }
            match self.resp.chunk().await {
                Ok(Some(chunk)) => self.buf.extend_from_slice(&chunk),
                Ok(None) => return Ok(None),
                Err(e) => {
                    return Err(Error::Failed(format!("the event stream broke: {e}")));
                }
            }
        }
    }
}

pub(crate) async fn one(
    home: &Home,
    command: RunCommand,
    shutdown: impl Future<Output = ()>,
) -> Result<u8, Error> {
    match command {
        RunCommand::Show(args) => show(home, args).await,
        RunCommand::Logs {
            run,
            stderr,
            follow,
        } => logs(home, run, stderr, follow, shutdown).await,
        RunCommand::Cancel(args) => cancel(home, args).await,
    }
}

async fn show(home: &Home, args: RunIdArgs) -> Result<u8, Error> {
    let client = connect(home, &args.remote).await?;
    let detail: RunDetail = client
        .get(&format!("/api/runs/{}", encode(&args.id)))
        .await?;
    if args.remote.json {
        print_json(&detail)?;
        return Ok(0);
    }
    let style = Style::detect();
    let run = &detail.run;
    let schedule = name_of(run.core.schedule_name.as_deref());
    for (key, value, tone) in facts(&run.core, schedule, now_ms()) {
        outln!("{:<11} {}", format!("{key}:"), style.paint(&value, tone))?;
    }
    let table = transitions(&detail.transitions);
    if !table.is_empty() {
        outln!("\ntransitions:\n{}", table.render(style))?;
    }
    for (stream, tail) in [("stdout", &run.stdout_tail), ("stderr", &run.stderr_tail)] {
        let tail = tail.as_deref().unwrap_or_default();
        if !tail.is_empty() {
            outln!("{stream} (last {} B):\n{tail}", tail.len())?;
        }
    }
    Ok(0)
}

/// The lines of `run show` above its transitions: label, value, tone.
fn facts(run: &RunCore, schedule: String, now: i64) -> [(&'static str, String, Tone); 14] {
    let output = format!(
        "{} B stdout, {} B stderr",
        text(&run.stdout_bytes),
        text(&run.stderr_bytes)
    );
    let cost = format!("${} ({} tokens)", text(&run.cost_usd), text(&run.tokens));
    [
        ("run", text(&run.id), Tone::Plain),
        ("schedule", schedule, Tone::Plain),
        ("kind", text(&run.kind), Tone::Plain),
        ("status", text(&run.status), tone_of(run.status.as_str())),
        ("reason", text(&run.reason), Tone::Plain),
        ("outcome", run.outcome(), tone_of(run.status.as_str())),
        ("scheduled", instant(&run.scheduled_at, now), Tone::Plain),
        ("created", instant(&run.created_at, now), Tone::Plain),
        ("dispatched", instant(&run.dispatched_at, now), Tone::Plain),
        ("finished", instant(&run.finished_at, now), Tone::Plain),
        ("duration", duration(run.duration_ms), Tone::Plain),
        ("exit", exit(run), Tone::Plain),
        ("output", output, Tone::Plain),
        ("cost", cost, Tone::Plain),
    ]
}

/// Every status change of a run, oldest first.
fn transitions(transitions: &[Transition]) -> Table {
    let mut table = Table::new(&["AT", "FROM", "TO", "REASON"]);
    for t in transitions {
        table.row(vec![
            (text(&t.at), Tone::Plain),
            (text(&t.from), Tone::Plain),
            (text(&t.to), tone_of(t.to.as_str())),
            (text(&t.reason), Tone::Plain),
        ]);
    }
    table
}

/// Prints the log from `offset` to its current end; returns the new offset.
async fn drain(client: &Client, id: &str, stream: &str, mut offset: u64) -> Result<u64, Error> {
    let mut out = io::stdout().lock();
    loop {
        let resp = client
            .get_raw(&format!(
                "/api/runs/{}/log?stream={stream}&offset={offset}&limit={LOG_CHUNK}",
                encode(id)
            ))
            .await?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| Error::Failed(format!("cannot read the log of run {id}: {e}")))?;
        if bytes.is_empty() {
            return Ok(offset);
        }
        out.write_all(&bytes)
            .and_then(|()| out.flush())
            .map_err(Error::Output)?;
        offset += bytes.len() as u64;
    }
}

pub(crate) async fn logs(
    home: &Home,
    args: RunIdArgs,
    stderr: bool,
    follow: bool,
    shutdown: impl Future<Output = ()>,
) -> Result<u8, Error> {
    let client = connect(home, &args.remote).await?;
    let stream = if stderr { "stderr" } else { "stdout" };
    let run_path = format!("/api/runs/{}", encode(&args.id));
    // Also checks the run exists: a missing log file of an unknown run is not "empty".
    let mut run: RunDetail = client.get(&run_path).await?;
    let mut offset = 0;
    tokio::pin!(shutdown);
    loop {
        // The status is read before the bytes: once it is terminal, the log is final,
        // so the read after it is the last one needed.
        let was_terminal = run.run.core.status.is_terminal();
        offset = drain(&client, &args.id, stream, offset).await?;
        if !follow || was_terminal {
            return Ok(0);
        }
        tokio::select! {
            () = tokio::time::sleep(LOG_POLL) => {}
            () = &mut shutdown => return Ok(0),
        }
        run = client.get(&run_path).await?;
    }
}

async fn cancel(home: &Home, args: RunIdArgs) -> Result<u8, Error> {
    let client = connect(home, &args.remote).await?;
    let run: Run = client
        .call(
            Method::POST,
            &format!("/api/runs/{}/cancel", encode(&args.id)),
        )
        .await?;
    if args.remote.json {
        print_json(&run)?;
    } else {
        outln!(
            "cancelling run {} ({})",
            text(&run.core.id),
            text(&run.core.status)
        )?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// A run as `GET /api/runs/{id}` sends it.
    const DETAIL: &str = r#"{"id":"run_1","schedule_id":"sch_1","schedule_name":"demo/x",
        "error_line":"it failed","deadline_at":"2026-01-01T01:57:00Z","kind":"manual",
        "status":"failed","reason":"exit_code",
        "action":{"kind":"command","executable":"false"},"scheduled_at":null,
        "created_at":"2025-12-31T23:57:00Z","dispatched_at":"2025-12-31T23:57:00Z",
        "finished_at":"2025-12-31T23:57:02Z","duration_ms":2000,"pid":4242,
        "program":"/usr/bin/false","attempt":1,"exit_code":1,"signal":null,
        "stdout_bytes":0,"stderr_bytes":12,"cost_usd":null,"tokens":null,"counted":true,
        "chain_parent_id":null,"chain_depth":0,"replaces_run_id":null,
        "stdout_tail":null,"stderr_tail":"it failed\n",
        "transitions":[
          {"from":null,"to":"queued","reason":"manual","at":"2025-12-31T23:57:00Z"},
          {"from":"queued","to":"running","reason":"dispatched","at":"2025-12-31T23:57:00Z"},
          {"from":"running","to":"failed","reason":"exit_code","at":"2025-12-31T23:57:02Z"}]}"#;

    /// `--json` prints a typed run exactly as it printed the JSON it was read from.
    #[test]
    fn json_output_is_the_answer_as_sent() {
        let detail: RunDetail = serde_json::from_str(DETAIL).expect("a run");
        let sent: Value = serde_json::from_str(DETAIL).expect("json");
        assert_eq!(
            json_line(&detail).expect("text"),
            sent.to_string(),
            "the same keys and values, in the same order"
        );
    }

    #[test]
    fn show_reads_every_fact() {
        let detail: RunDetail = serde_json::from_str(DETAIL).expect("a run");
        let now = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        let lines: Vec<String> = facts(&detail.run.core, "demo/x".into(), now)
            .into_iter()
            .map(|(key, value, _)| format!("{key}: {value}"))
            .collect();
        assert_eq!(
            lines,
            [
                "run: run_1",
                "schedule: demo/x",
                "kind: manual",
                "status: failed",
                "reason: exit_code",
                "outcome: exited with code 1",
                "scheduled: - (-)",
                "created: 2025-12-31T23:57:00Z (3m ago)",
                "dispatched: 2025-12-31T23:57:00Z (3m ago)",
                "finished: 2025-12-31T23:57:02Z (2m ago)",
                "duration: 2s",
                "exit: 1",
                "output: 0 B stdout, 12 B stderr",
                "cost: $- (- tokens)",
            ]
        );
        assert_eq!(
            transitions(&detail.transitions).render(Style::plain()),
            "AT                    FROM     TO       REASON\n\
             2025-12-31T23:57:00Z  -        queued   manual\n\
             2025-12-31T23:57:00Z  queued   running  dispatched\n\
             2025-12-31T23:57:02Z  running  failed   exit_code\n"
        );
    }

    #[test]
    fn a_signal_wins_over_an_exit_code() {
        let mut run = serde_json::from_str::<RunDetail>(DETAIL)
            .expect("a run")
            .run
            .core;
        run.signal = Some(9);
        assert_eq!(exit(&run), "signal 9");
        run.exit_code = None;
        run.signal = None;
        assert_eq!(exit(&run), "-");
        assert_eq!(duration(Some(-1)), "-");
    }
}
