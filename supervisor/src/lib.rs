//! `studio`: the supervisor of studiod and studio-app, and the user's command line.
//!
//! Invariant: the supervisor knows only binary paths, flags and the protocols in
//! docs/ARCHITECTURE.md; it never opens a database and depends on no other Studio crate
//! but `studio-contract` and `studio-schedule` (pure trigger arithmetic, for
//! `studio schedule preview`).

mod child;
pub mod cli;
mod commands;
mod control;
mod discover;
mod logs;
mod pairing;
mod policy;
pub mod preview;
mod supervise;
#[cfg(test)]
mod testdir;
mod up;

use std::{future::Future, io, path::PathBuf};

use studio_contract::error::ErrorBody;

use crate::cli::{Cli, Command, ScheduleCommand};
pub use crate::up::{UpConfig, up};

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
    #[error("{0}")]
    Failed(String),
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
            _ => 1,
        }
    }
}

/// Runs one command. `shutdown` (Ctrl-C, SIGTERM) ends `up` and `logs -f`; it is polled
/// only by them, so the other commands keep the default signal behaviour.
pub async fn run(cli: Cli, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
    let home = cli.home();
    match cli.command {
        Command::Up(args) => {
            let token_from_env = std::env::var_os("STUDIO_TOKEN").is_some();
            up(args.into_config(home, token_from_env)?, shutdown).await
        }
        Command::Status { json } => commands::status(&home, json).await,
        Command::Restart { child } => commands::restart(&home, child.into()).await,
        Command::Stop => commands::stop(&home).await,
        Command::Pair { open } => commands::pair(&home, open).await,
        Command::Logs { child, follow } => {
            commands::logs(&home, child.into(), follow, shutdown).await
        }
        Command::Schedule {
            command: ScheduleCommand::Preview(args),
        } => preview::run(&args.into_request()),
    }
}

/// Resolves on SIGINT or SIGTERM; handlers are installed on first poll.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        (Err(error), _) | (_, Err(error)) => {
            tracing::error!(%error, "cannot watch for signals; stop with `studio stop`");
            std::future::pending::<()>().await;
        }
    }
}
