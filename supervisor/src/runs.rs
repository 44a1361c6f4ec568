//! `studio runs [-f]` and `studio run show|logs|cancel ID`: runs over studiod's
//! `/api/runs`, following `/api/events` and ranged log reads.

use std::{
    collections::HashMap,
    future::Future,
    io::{self, Write},
    time::Duration,
};

use serde_json::{Value, json};
use studio_contract::home::Home;

use crate::{
    Error,
    cli::{RunCommand, RunIdArgs, RunsArgs},
    client::{Client, encode},
    schedules::{client, print_json, resolve},
    table::{Style, Table, Tone, human_ms, now_ms, relative, text, tone_of},
};

/// How often `run logs -f` looks for more output.
const LOG_POLL: Duration = Duration::from_millis(500);
/// The most one log read asks for (the daemon's own cap).
const LOG_CHUNK: u64 = 1024 * 1024;

/// Run ids to schedule names, fetched once each; a deleted schedule reads `(deleted)`.
struct Names<'a> {
    client: &'a Client,
    known: HashMap<String, String>,
}

impl<'a> Names<'a> {
    fn new(client: &'a Client) -> Self {
        Self {
            client,
            known: HashMap::new(),
        }
    }

    async fn of(&mut self, schedule_id: &Value) -> Result<String, Error> {
        let Some(id) = schedule_id.as_str() else {
            return Ok("-".to_owned());
        };
        if let Some(name) = self.known.get(id) {
            return Ok(name.clone());
        }
        let name = match self
            .client
            .get(&format!("/api/schedules/{}", encode(id)))
            .await
        {
            Ok(s) => text(&s["name"]),
            Err(Error::Api(f)) if f.status == 404 => "(deleted)".to_owned(),
            Err(e) => return Err(e),
        };
        self.known.insert(id.to_owned(), name.clone());
        Ok(name)
    }
}

pub(crate) async fn list(
    home: &Home,
    args: RunsArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<u8, Error> {
    let client = client(home, &args.remote).await?;
    let schedule_id = match &args.schedule {
        Some(name) => Some(text(&resolve(&client, name).await?["id"])),
        None => None,
    };
    // Subscribed before listing, so no change falls between the listing and the stream.
    let events = if args.follow {
        Some(client.stream("/api/events", &[]).await?)
    } else {
        None
    };
    let mut path = format!("/api/runs?limit={}", args.limit);
    if let Some(id) = &schedule_id {
        path.push_str(&format!("&schedule={}", encode(id)));
    }
    if let Some(status) = &args.status {
        path.push_str(&format!("&status={}", encode(status)));
    }
    let page = client.get(&path).await?;
    let mut runs = page["runs"].as_array().cloned().unwrap_or_default();
    // Oldest first, so followed changes continue at the bottom.
    runs.reverse();
    let style = Style::detect();
    let mut names = Names::new(&client);
    if args.remote.json {
        if args.follow {
            // A stream for scripts: one JSON object a line.
            for run in &runs {
                outln!("{run}")?;
            }
        } else {
            print_json(&page)?;
        }
    } else {
        let now = now_ms();
        let mut table = Table::new(&[
            "RUN", "SCHEDULE", "KIND", "STATUS", "REASON", "CREATED", "DURATION", "EXIT",
        ]);
        for run in &runs {
            let status = text(&run["status"]);
            table.row(vec![
                (text(&run["id"]), Tone::Plain),
                (names.of(&run["schedule_id"]).await?, Tone::Plain),
                (text(&run["kind"]), Tone::Plain),
                (status.clone(), tone_of(&status)),
                (text(&run["reason"]), Tone::Plain),
                (relative(&run["created_at"], now), Tone::Plain),
                (duration(&run["duration_ms"]), Tone::Plain),
                (exit(run), Tone::Plain),
            ]);
        }
        if table.is_empty() {
            errln!("no runs");
        } else {
            out!("{}", table.render(style))?;
        }
    }
    let Some(events) = events else {
        return Ok(0);
    };
    let mut sse = Sse::new(events);
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
        if kind != "run" {
            continue;
        }
        let Ok(run) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        let wanted = schedule_id
            .as_deref()
            .is_none_or(|id| run["schedule_id"] == id)
            && args.status.as_deref().is_none_or(|s| run["status"] == s);
        if !wanted {
            continue;
        }
        if args.remote.json {
            outln!("{run}")?;
        } else {
            let status = text(&run["status"]);
            outln!(
                "{}  {}  {}  {}  {}  {}",
                jiff::Zoned::now().strftime("%H:%M:%S"),
                text(&run["id"]),
                names.of(&run["schedule_id"]).await?,
                text(&run["kind"]),
                style.paint(&status, tone_of(&status)),
                text(&run["reason"]),
            )?;
        }
    }
}

fn duration(v: &Value) -> String {
    v.as_u64().map_or_else(|| "-".to_owned(), human_ms)
}

fn exit(run: &Value) -> String {
    match (&run["exit_code"], &run["signal"]) {
        (Value::Null, Value::Null) => "-".to_owned(),
        (code, Value::Null) => text(code),
        (_, signal) => format!("signal {}", text(signal)),
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
    let client = client(home, &args.remote).await?;
    let run = client
        .get(&format!("/api/runs/{}", encode(&args.id)))
        .await?;
    if args.remote.json {
        print_json(&run)?;
        return Ok(0);
    }
    let style = Style::detect();
    let now = now_ms();
    let status = text(&run["status"]);
    let at = |key: &str| format!("{} ({})", text(&run[key]), relative(&run[key], now));
    let schedule = Names::new(&client).of(&run["schedule_id"]).await?;
    let lines = [
        ("run", text(&run["id"]), Tone::Plain),
        ("schedule", schedule, Tone::Plain),
        ("kind", text(&run["kind"]), Tone::Plain),
        ("status", status.clone(), tone_of(&status)),
        ("reason", text(&run["reason"]), Tone::Plain),
        ("scheduled", at("scheduled_at"), Tone::Plain),
        ("created", at("created_at"), Tone::Plain),
        ("dispatched", at("dispatched_at"), Tone::Plain),
        ("finished", at("finished_at"), Tone::Plain),
        ("duration", duration(&run["duration_ms"]), Tone::Plain),
        ("exit", exit(&run), Tone::Plain),
        (
            "output",
            format!(
                "{} B stdout, {} B stderr",
                text(&run["stdout_bytes"]),
                text(&run["stderr_bytes"])
            ),
            Tone::Plain,
        ),
        (
            "cost",
            format!(
                "${} ({} tokens)",
                text(&run["cost_usd"]),
                text(&run["tokens"])
            ),
            Tone::Plain,
        ),
    ];
    for (key, value, tone) in lines {
        outln!("{:<11} {}", format!("{key}:"), style.paint(&value, tone))?;
    }
    let mut table = Table::new(&["AT", "FROM", "TO", "REASON"]);
    for t in run["transitions"].as_array().into_iter().flatten() {
        table.row(vec![
            (text(&t["at"]), Tone::Plain),
            (text(&t["from"]), Tone::Plain),
            (
                text(&t["to"]),
                tone_of(t["to"].as_str().unwrap_or_default()),
            ),
            (text(&t["reason"]), Tone::Plain),
        ]);
    }
    if !table.is_empty() {
        outln!("\ntransitions:\n{}", table.render(style))?;
    }
    for stream in ["stdout", "stderr"] {
        let tail = run[format!("{stream}_tail")].as_str().unwrap_or_default();
        if !tail.is_empty() {
            outln!("{stream} (last {} B):\n{tail}", tail.len())?;
        }
    }
    Ok(0)
}

fn terminal(run: &Value) -> bool {
    matches!(
        run["status"].as_str(),
        Some("completed" | "failed" | "timed_out" | "cancelled" | "skipped")
    )
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

async fn logs(
    home: &Home,
    args: RunIdArgs,
    stderr: bool,
    follow: bool,
    shutdown: impl Future<Output = ()>,
) -> Result<u8, Error> {
    let client = client(home, &args.remote).await?;
    let stream = if stderr { "stderr" } else { "stdout" };
    let run_path = format!("/api/runs/{}", encode(&args.id));
    // Also checks the run exists: a missing log file of an unknown run is not "empty".
    let mut run = client.get(&run_path).await?;
    let mut offset = 0;
    tokio::pin!(shutdown);
    loop {
        // The status is read before the bytes: once it is terminal, the log is final,
        // so the read after it is the last one needed.
        let was_terminal = terminal(&run);
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
    let client = client(home, &args.remote).await?;
    let run = client
        .post(
            &format!("/api/runs/{}/cancel", encode(&args.id)),
            &json!({}),
        )
        .await?;
    if args.remote.json {
        print_json(&run)?;
    } else {
        outln!(
            "cancelling run {} ({})",
            text(&run["id"]),
            text(&run["status"])
        )?;
    }
    Ok(0)
}
