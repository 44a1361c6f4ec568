//! `studio worker …`: remote workers (docs/TASKS.md, "Workers").
//!
//! On Studio's machine, over studiod's `/api/workers` with the daemon token: `token
//! create` (a one-time join token: only the token on stdout), `list` and `revoke`. On a
//! worker's machine, through `studio_worker` and the worker's own home (`--home` or
//! `--worker-home` on the command line, else `STUDIO_WORKER_HOME`; never `STUDIO_HOME`):
//! `join`, `allow list|add|remove`, `check`, and `studio worker` alone, which runs the
//! worker until shutdown.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};

use studio_api::{Code, ErrorBody, JoinTokenCreated, NewJoinToken, Worker, WorkerList};
use studio_contract::home::Home;

use crate::{
    Error,
    cli::{
        Remote, WorkerAllowCommand, WorkerArgs, WorkerCommand, WorkerHome, WorkerJoinArgs,
        WorkerRunArgs, WorkerTokenCommand,
        client::{connect, encode},
        table::{Style, Table, Tone, instant, now_ms, relative, short_ids, text},
    },
    output::print_json,
};

const PATH: &str = "/api/workers";
/// The fewest characters of an id `studio worker list` shows.
const SHORT: usize = 8;

/// What `--home` means to `studio worker …`.
pub(crate) struct Homes {
    /// `--home` or `STUDIO_HOME`: the Studio home of the commands that talk to studiod.
    pub studio: Option<PathBuf>,
    /// Whether `--home` was on the command line: then, on the worker's side, it names the
    /// worker's home.
    pub on_command_line: bool,
}

impl Homes {
    /// The worker's home: `--worker-home` or `--home` from the command line (not both),
    /// else `STUDIO_WORKER_HOME`, else `~/.studio-worker`. `STUDIO_HOME` never names it.
    fn worker(&self, flag: &WorkerHome) -> Result<PathBuf, Error> {
        let line = self.studio.as_ref().filter(|_| self.on_command_line);
        match (&flag.worker_home, line) {
            (Some(_), Some(_)) => Err(Error::Usage(
                "name the worker's home once: --home or --worker-home, not both".into(),
            )),
            (Some(dir), None) | (None, Some(dir)) => Ok(dir.clone()),
            (None, None) => Ok(studio_worker::default_home()),
        }
    }
}

/// Runs `studio worker …`. The Studio home is resolved only by the commands that talk to
/// studiod; the others never touch it.
pub(crate) async fn run(
    homes: Homes,
    args: WorkerArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<u8, Error> {
    let studio = || Home::resolve(homes.studio.clone());
    match args.command {
        None => serve(homes.worker(&args.run.home)?, args.run, shutdown).await,
        Some(WorkerCommand::Join(args)) => join(homes.worker(&args.home)?, args).await,
        Some(WorkerCommand::Allow { command }) => allow(&homes, command),
        Some(WorkerCommand::Check { home }) => check(&homes.worker(&home)?).await,
        Some(WorkerCommand::Token {
            command:
                WorkerTokenCommand::Create {
                    labels,
                    ttl,
                    out,
                    remote,
                },
        }) => {
            create_token(
                &studio(),
                NewJoinToken { labels, ttl },
                out.as_deref(),
                &remote,
            )
            .await
        }
        Some(WorkerCommand::List { remote }) => list(&studio(), &remote).await,
        Some(WorkerCommand::Revoke { id, remote }) => revoke(&studio(), &id, &remote).await,
    }
}

/// A worker's failure: bad input exits 2, anything else 1.
fn worker_error(e: studio_worker::WorkerError) -> Error {
    if e.is_usage() {
        Error::Usage(e.to_string())
    } else {
        Error::Failed(e.to_string())
    }
}

async fn create_token(
    home: &Home,
    request: NewJoinToken,
    out: Option<&std::path::Path>,
    remote: &Remote,
) -> Result<u8, Error> {
    let client = connect(home, remote).await?;
    let created: JoinTokenCreated = match client.post(&format!("{PATH}/tokens"), &request).await {
        Ok(created) => created,
        // A label or a ttl studiod cannot take is the user's input: one line, exit 2.
        Err(Error::Api(f)) if f.body.code == Code::ValidationFailed => {
            return Err(Error::Usage(refusal(&f.body, &request)));
        }
        Err(e) => return Err(e),
    };
    if remote.json {
        print_json(&created)?;
        return Ok(0);
    }
    crate::cli::hand_over(&created.token, out)?;
    for line in token_notes(&created, now_ms()) {
        errln!("{line}");
    }
    Ok(0)
}

/// What stderr says beside a new token: its labels, its expiry, and the command that
/// uses it.
fn token_notes(created: &JoinTokenCreated, now: i64) -> Vec<String> {
    let granted = if created.labels.is_empty() {
        "no labels (its worker runs only tasks that name none)".to_owned()
    } else {
        format!("the labels {}", created.labels.join(", "))
    };
    let mut lines = vec![
        format!(
            "a one-time join token granting {granted}; it expires {}",
            instant(&created.expires_at, now)
        ),
        format!(
            "on the worker's machine: studio worker join --server {} --token {}",
            created.server, created.token
        ),
    ];
    match created.server.parse::<SocketAddr>() {
        Ok(at) if at.ip().is_unspecified() => lines.push(format!(
            "(studiod's worker listener is on every address: give --server this machine's name or address, port {})",
            at.port()
        )),
        Ok(at) if at.ip().is_loopback() => lines.push(
            "(studiod's worker listener is on loopback: only a worker on this machine reaches it; \
             set STUDIO_WORKER_ADDR for others)"
                .to_owned(),
        ),
        _ => {}
    }
    lines
}

/// A `validation_failed` answer as one line naming the flags: `--ttl "8d": at most 7 days`.
fn refusal(body: &ErrorBody, request: &NewJoinToken) -> String {
    let parts: Vec<String> = body
        .errors
        .iter()
        .map(|e| {
            let label = e
                .path
                .strip_prefix("labels[")
                .and_then(|rest| rest.strip_suffix(']'))
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| request.labels.get(i));
            let what = match (label, e.path.as_str()) {
                (Some(label), _) => format!("--labels {label:?}"),
                (None, "labels") => "--labels".to_owned(),
                (None, "ttl") => format!("--ttl {:?}", request.ttl.as_deref().unwrap_or("")),
                (None, path) => path.to_owned(),
            };
            format!("{what}: {}", e.reason)
        })
        .collect();
    if parts.is_empty() {
        body.message.clone()
    } else {
        parts.join("; ")
    }
}

async fn list(home: &Home, remote: &Remote) -> Result<u8, Error> {
    let answer: WorkerList = connect(home, remote).await?.get(PATH).await?;
    if remote.json {
        print_json(&answer)?;
    } else {
        out!(
            "{}",
            table(&answer.workers, now_ms()).render(Style::detect())
        )?;
        if answer.workers.iter().all(|w| w.builtin) {
            errln!("no remote worker has joined (`studio worker token create` makes a join token)");
        }
    }
    Ok(0)
}

/// One row per worker, as studiod lists them (the built-in one first).
fn table(workers: &[Worker], now: i64) -> Table {
    let mut table = Table::new(&[
        "ID",
        "NAME",
        "LABELS",
        "CAPACITY",
        "RUNNING",
        "STATUS",
        "LAST SEEN",
    ]);
    let ids: Vec<&str> = workers.iter().map(|w| w.id.as_str()).collect();
    for (w, id) in workers.iter().zip(short_ids(&ids, SHORT)) {
        let (status, tone) = status(w, now);
        table.row(vec![
            (id, Tone::Plain),
            (text(&w.name), Tone::Plain),
            (text(&w.labels.join(",")), Tone::Plain),
            (w.capacity.to_string(), Tone::Plain),
            (w.running.to_string(), Tone::Plain),
            (status.to_owned(), tone),
            (relative(&w.last_seen_at, now), Tone::Dim),
        ]);
    }
    table
}

/// Whether a worker can take work now.
fn status(w: &Worker, now: i64) -> (&'static str, Tone) {
    let expired = w
        .certificate_expires_at
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .is_some_and(|t| t.as_millisecond() <= now);
    if w.revoked_at.is_some() {
        ("revoked", Tone::Bad)
    } else if expired {
        ("expired", Tone::Bad)
    } else if w.connected {
        ("connected", Tone::Good)
    } else {
        ("disconnected", Tone::Warn)
    }
}

async fn revoke(home: &Home, id: &str, remote: &Remote) -> Result<u8, Error> {
    let id = id.trim();
    if id.is_empty() {
        return Err(Error::Usage(
            "give a worker's id (`studio worker list` shows them)".into(),
        ));
    }
    let client = connect(home, remote).await?;
    let known: WorkerList = client.get(PATH).await?;
    let target = resolve(&known.workers, id)?;
    let path = format!("{PATH}/{}", encode(&target));
    let worker: Worker = client.call(reqwest::Method::DELETE, &path).await?;
    if remote.json {
        print_json(&worker)?;
    } else {
        outln!(
            "{} ({}) is revoked: its certificate admits it no more",
            worker.id,
            text(&worker.name)
        )?;
    }
    Ok(0)
}

/// The id `given` names: an enrolled worker's whole id, or the only one it starts;
/// anything else goes to studiod as it is (which answers `worker_not_found`).
fn resolve(workers: &[Worker], given: &str) -> Result<String, Error> {
    let enrolled = || workers.iter().filter(|w| !w.builtin);
    if enrolled().any(|w| w.id == given) {
        return Ok(given.to_owned());
    }
    let matching: Vec<&str> = enrolled()
        .filter(|w| w.id.starts_with(given))
        .map(|w| w.id.as_str())
        .collect();
    match matching.as_slice() {
        [] => Ok(given.to_owned()),
        [one] => Ok((*one).to_owned()),
        many => Err(Error::Usage(format!(
            "{given:?} starts {} workers' ids ({}): give more of it",
            many.len(),
            many.join(", ")
        ))),
    }
}

async fn join(home: PathBuf, args: WorkerJoinArgs) -> Result<u8, Error> {
    if args.unless_enrolled
        && let Some(kept) = studio_worker::kept(&home, &args.server).map_err(worker_error)?
    {
        outln!("{}", kept.worker_id)?;
        errln!(
            "kept the enrolment as worker {} with {} in {} (its certificate is valid for more than 30 days); the token was not used",
            kept.worker_id,
            args.server,
            kept.home.display()
        );
        return Ok(0);
    }
    let options = studio_worker::JoinOptions {
        server: args.server,
        token: args.token.read()?,
        home,
        name: args.name,
    };
    let joined = studio_worker::join(&options).await.map_err(worker_error)?;
    outln!("{}", joined.worker_id)?;
    let labels = if joined.labels.is_empty() {
        "no labels".to_owned()
    } else {
        format!("the labels {}", joined.labels.join(", "))
    };
    errln!(
        "joined as worker {} with {labels}; its key and certificate are in {}",
        joined.worker_id,
        joined.home.display()
    );
    errln!(
        "run it with: studio worker --home {}",
        shell_word(&joined.home.display().to_string())
    );
    Ok(0)
}

/// `studio worker check`: one admitted call, or why not (exit 1).
async fn check(home: &Path) -> Result<u8, Error> {
    let (id, server) = studio_worker::check(home).await.map_err(worker_error)?;
    outln!("worker {id} is admitted by studiod at {server}")?;
    Ok(0)
}

/// `studio worker allow list|add|remove`: prints the list as it is after, one entry a
/// line.
fn allow(homes: &Homes, command: WorkerAllowCommand) -> Result<u8, Error> {
    let entries = match command {
        WorkerAllowCommand::List { home } => studio_worker::allow_list(&homes.worker(&home)?),
        WorkerAllowCommand::Add { entries, home } => {
            studio_worker::allow_add(&homes.worker(&home)?, &entries)
        }
        WorkerAllowCommand::Remove { entries, home } => {
            studio_worker::allow_remove(&homes.worker(&home)?, &entries)
        }
    }
    .map_err(worker_error)?;
    if entries.is_empty() {
        errln!(
            "this worker's allow-list is empty: it runs no command (allow one with `studio worker allow add NAME`)"
        );
    }
    for entry in &entries {
        outln!("{entry}")?;
    }
    Ok(0)
}

/// `studio worker`: runs this machine's worker until `shutdown`.
async fn serve(
    home: PathBuf,
    args: WorkerRunArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<u8, Error> {
    let options = studio_worker::RunOptions {
        home,
        capacity: args.capacity,
        labels: args.labels,
    };
    studio_worker::run(options, shutdown)
        .await
        .map_err(worker_error)?;
    Ok(0)
}

/// `s` as one word of a POSIX shell command line.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:,@=%~".contains(&b));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn homes(studio: Option<&str>, on_command_line: bool) -> Homes {
        Homes {
            studio: studio.map(PathBuf::from),
            on_command_line,
        }
    }

    fn flag(dir: Option<&str>) -> WorkerHome {
        WorkerHome {
            worker_home: dir.map(PathBuf::from),
        }
    }

    #[test]
    fn the_worker_home_is_a_command_line_home_never_studio_home() {
        let w = |h: &Homes, f: &WorkerHome| h.worker(f).expect("resolves");
        assert_eq!(
            w(&homes(Some("/w"), true), &flag(None)),
            PathBuf::from("/w")
        );
        assert_eq!(
            w(&homes(None, false), &flag(Some("/f"))),
            PathBuf::from("/f")
        );
        // STUDIO_HOME (not on the command line) leaves the flag or the default.
        assert_eq!(
            w(&homes(Some("/s"), false), &flag(Some("/f"))),
            PathBuf::from("/f")
        );
        assert_eq!(
            w(&homes(Some("/s"), false), &flag(None)),
            studio_worker::default_home()
        );
        let both = homes(Some("/w"), true).worker(&flag(Some("/f")));
        assert!(
            matches!(&both, Err(Error::Usage(m)) if m.contains("--home or --worker-home")),
            "{both:?}"
        );
    }

    const NOW: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    fn workers() -> Vec<Worker> {
        let list: WorkerList = serde_json::from_value(json!({"workers": [
            {"id": "builtin", "name": "studiod", "builtin": true, "labels": [], "granted": [],
             "capacity": 4, "running": 1, "connected": true, "version": "0.1.0",
             "enrolled_at": null, "last_seen_at": null, "certificate_expires_at": null,
             "certificate_sha256": null, "revoked_at": null},
            {"id": "0192f3a4-b5c6-7d8e-9f00-111111111111", "name": "gpu-box", "builtin": false,
             "labels": ["gpu", "linux"], "granted": ["gpu", "linux"], "capacity": 2, "running": 2,
             "connected": true, "version": "0.1.0", "enrolled_at": "2025-12-31T00:00:00Z",
             "last_seen_at": "2025-12-31T23:59:50Z", "certificate_expires_at": "2026-12-31T00:00:00Z",
             "certificate_sha256": "ab", "revoked_at": null},
            {"id": "0192f3a4-b5c6-7d8e-9f00-222222222222", "name": "old", "builtin": false,
             "labels": [], "granted": ["linux"], "capacity": 2, "running": 0,
             "connected": false, "version": null, "enrolled_at": "2025-12-01T00:00:00Z",
             "last_seen_at": "2025-12-02T00:00:00Z", "certificate_expires_at": "2026-12-01T00:00:00Z",
             "certificate_sha256": "cd", "revoked_at": "2025-12-03T00:00:00Z"},
            {"id": "0192f3b9-0000-7000-8000-333333333333", "name": "laptop", "builtin": false,
             "labels": ["mac"], "granted": ["mac"], "capacity": 1, "running": 0,
             "connected": false, "version": "0.1.0", "enrolled_at": "2025-12-30T00:00:00Z",
             "last_seen_at": "2025-12-31T22:00:00Z", "certificate_expires_at": "2026-12-30T00:00:00Z",
             "certificate_sha256": "ef", "revoked_at": null}
        ]}))
        .expect("workers");
        list.workers
    }

    #[test]
    fn the_list_shows_each_worker_by_a_short_unique_id() {
        assert_eq!(
            table(&workers(), NOW).render(Style::plain()),
            "ID                         NAME     LABELS     CAPACITY  RUNNING  STATUS        LAST SEEN\n\
             builtin                    studiod  -          4         1        connected     -\n\
             0192f3a4-b5c6-7d8e-9f00-1  gpu-box  gpu,linux  2         2        connected     10s ago\n\
             0192f3a4-b5c6-7d8e-9f00-2  old      -          2         0        revoked       30d ago\n\
             0192f3b9                   laptop   mac        1         0        disconnected  2h ago\n"
        );
    }

    #[test]
    fn a_prefix_names_one_worker_or_is_refused() {
        let workers = workers();
        assert_eq!(
            resolve(&workers, "0192f3b9").expect("one"),
            "0192f3b9-0000-7000-8000-333333333333"
        );
        assert!(matches!(
            resolve(&workers, "0192f3a4"),
            Err(Error::Usage(m)) if m.contains("2 workers")
        ));
        assert_eq!(resolve(&workers, "nope").expect("as given"), "nope");
        assert_eq!(
            resolve(&workers, "builtin").expect("as given"),
            "builtin",
            "studiod answers for its own worker"
        );
    }

    #[test]
    fn a_refusal_names_the_flags() {
        let body: ErrorBody = serde_json::from_value(json!({
            "code": "validation_failed", "message": "the request is invalid",
            "errors": [{"path": "labels[1]", "reason": "a label is 1 to 64 letters"},
                       {"path": "ttl", "reason": "at most 7 days"}]
        }))
        .expect("body");
        let request = NewJoinToken {
            labels: vec!["gpu".into(), "no spaces".into()],
            ttl: Some("8d".into()),
        };
        assert_eq!(
            refusal(&body, &request),
            r#"--labels "no spaces": a label is 1 to 64 letters; --ttl "8d": at most 7 days"#
        );
    }

    #[test]
    fn a_token_comes_with_its_join_command() {
        let created = JoinTokenCreated {
            token: "swt_x".into(),
            labels: vec!["gpu".into()],
            expires_at: "2026-01-01T01:00:00Z".into(),
            server: "127.0.0.1:8767".into(),
        };
        let notes = token_notes(&created, NOW);
        assert_eq!(
            notes[..2],
            [
                "a one-time join token granting the labels gpu; it expires 2026-01-01T01:00:00Z (in 1h)",
                "on the worker's machine: studio worker join --server 127.0.0.1:8767 --token swt_x",
            ]
        );
        assert!(notes[2].contains("loopback"), "{notes:?}");
        let anywhere = JoinTokenCreated {
            server: "0.0.0.0:9000".into(),
            ..created
        };
        assert!(token_notes(&anywhere, NOW)[2].contains("port 9000"));
    }

    #[test]
    fn paths_are_quoted_for_the_shell_only_when_needed() {
        assert_eq!(
            shell_word("/home/me/.studio-worker"),
            "/home/me/.studio-worker"
        );
        assert_eq!(shell_word("/tmp/my worker"), "'/tmp/my worker'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }
}
