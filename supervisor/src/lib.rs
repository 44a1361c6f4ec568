//! `studio`: the supervisor of studiod and studio-app, and the user's command line.
//!
//! Invariant: the supervisor knows only binary paths, flags and the protocols in
//! docs/ARCHITECTURE.md; it never opens a database and depends on no other Studio crate
//! but `studio-contract`, `studio-schedule` (pure trigger arithmetic, for
//! `studio schedule preview`), `studio-api` (the types of studiod's answers, which the
//! user CLI reads), `studio-worker` (the remote worker `studio worker` joins and runs,
//! and its TLS channel), `studio-pki` and `studio-proto` (the key, certificate request,
//! pin and enrolment call of `studio app join`), and `studio-evidence` and
//! `studio-archive` (evidence bundles and retention archives, read offline).

// First: the printing macros are in scope only in the modules declared after it.
#[macro_use]
mod output;

pub mod cli;
mod config;
mod control;
pub mod entry;
mod logs;
mod pairing;
mod supervise;
#[cfg(test)]
mod testdir;

use std::{future::Future, io, path::PathBuf};

use studio_contract::{error::ErrorBody, home::Home};

use crate::cli::{
    ArchiveCommand, Cli, Command, EvidenceCommand, ScheduleCommand, allow, approvals, apps,
    archive, audit, backup, commands, declare, evidence, notify, retention, runs, schedules,
    secrets, sessions, tasks, workers,
};
pub use crate::{
    cli::preview,
    supervise::{UpConfig, up},
};

/// What a command can fail with; each maps to one line on stderr and an exit status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("studio is not running in {} (start it with `studio up`)", .0.display())]
    NotRunning(PathBuf),
    /// Bad input from the user: exit status 2, as clap's own usage errors.
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("{}: {}", .0.code, .0.message)]
    Remote(ErrorBody),
    /// studiod answered with its `{code, message}` error body.
    #[error("{}: {}", .0.body.code, .0.body.message)]
    Api(Box<ApiFailure>),
    #[error("{0}")]
    Failed(String),
    /// stdout could not be written; a closed pipe (`| head`) ends the command quietly.
    #[error("cannot write to stdout: {0}")]
    Output(#[source] io::Error),
}

/// A non-2xx answer of studiod's API, kept whole so callers can match its code.
#[derive(Debug)]
pub struct ApiFailure {
    pub status: u16,
    /// The whole body (a refused apply carries its plan, a conflict the schedule's name).
    pub body: ErrorBody,
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            Error::Output(_) if self.reader_gone() => 0,
            _ => 1,
        }
    }

    /// Whether whoever read stdout went away: what they wanted, they have.
    pub fn reader_gone(&self) -> bool {
        matches!(self, Error::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// Runs one command and returns its exit status. `shutdown` (Ctrl-C, SIGTERM) ends `up`,
/// the follow modes and `secret set`'s wait for its value; it is polled only by them, so
/// the other commands keep the default signal behaviour.
pub async fn run(cli: Cli, shutdown: impl Future<Output = ()>) -> Result<u8, Error> {
    let Cli {
        home,
        home_on_command_line,
        command,
    } = cli;
    // Commands on local input come first: they must not even resolve the home.
    let command = match command {
        Command::Schedule {
            command: ScheduleCommand::Preview(args),
        } => return preview::run(&args.into_request()).map(|()| 0),
        Command::Schedule {
            command: ScheduleCommand::Validate { files },
        } => return declare::validate(&files),
        Command::Evidence {
            command:
                EvidenceCommand::Verify {
                    bundle,
                    key,
                    archives,
                },
        } => return evidence::verify(&bundle, key.as_deref(), archives.as_deref()).map(|()| 0),
        Command::Archive {
            command: ArchiveCommand::List { dir, json },
        } => return archive::list(&dir, json),
        Command::Archive {
            command: ArchiveCommand::Verify { file, key },
        } => return archive::verify(&file, key.as_deref()),
        // Only those of its commands that talk to studiod resolve the Studio home; on the
        // worker's side, a `--home` on the command line names the worker's home.
        Command::Worker(args) => {
            let home = workers::Homes {
                studio: home,
                on_command_line: home_on_command_line,
            };
            return workers::run(home, args, shutdown).await;
        }
        other => other,
    };
    let home = Home::resolve(home);
    let done = |r: Result<(), Error>| r.map(|()| 0);
    match command {
        Command::Up(args) => {
            let token_from_env = config::token_is_set();
            let mut config = args.into_config(home, token_from_env)?;
            // studiod reads it from the environment it inherits; a bad value makes it
            // exit 64, so the default is as good as any here.
            if let Some(wait) = config::daemon_lock_wait() {
                config.daemon_lock_wait = wait;
            }
            done(up(config, shutdown).await)
        }
        Command::Status { json } => done(commands::status(&home, json).await),
        Command::Cluster {
            command: None,
            remote,
        } => cli::cluster::show(&home, &remote).await,
        Command::Cluster {
            command: Some(cli::ClusterCommand::Seed { from }),
            ..
        } => cli::cluster::seed(&home, &from),
        Command::Cluster {
            command: Some(cli::ClusterCommand::Init),
            ..
        } => cli::cluster::init(&home),
        Command::Epoch {
            command: cli::EpochCommand::Rotate { remote },
        } => cli::cluster::rotate(&home, &remote).await,
        Command::Restart { child } => done(commands::restart(&home, child.into()).await),
        Command::Stop => done(commands::stop(&home).await),
        Command::Pair { open, role } => done(commands::pair(&home, open, role.into()).await),
        Command::Logs { child, follow } => {
            done(commands::logs(&home, child.into(), follow, shutdown).await)
        }
        Command::Schedule { command } => schedules::run(&home, command).await,
        Command::Runs(args) => runs::list(&home, args, shutdown).await,
        Command::Run { command } => runs::one(&home, command, shutdown).await,
        Command::Allow { command } => allow::run(&home, command).await,
        Command::App { command } => apps::run(&home, command).await,
        Command::Sessions { command, remote } => sessions::run(&home, command, remote).await,
        Command::Audit(args) => audit::run(&home, args).await,
        Command::Approvals { command, list } => approvals::run(&home, command, list).await,
        Command::Task { command } => tasks::run(&home, command, shutdown).await,
        Command::Secret { command } => secrets::run(&home, command, shutdown).await,
        Command::Notify { command } => notify::run(&home, command).await,
        Command::Evidence { command } => evidence::run(&home, command).await,
        Command::Backup { dest, remote } => backup::backup(&home, &dest, &remote).await,
        Command::Restore { src } => backup::restore(&home, &src).await,
        Command::Archive { command } => archive::run(&home, command).await,
        Command::Retention { command } => retention::run(&home, command).await,
        // Run above, before the home is resolved.
        Command::Worker(_) => Ok(0),
    }
}
