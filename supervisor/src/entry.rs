//! The supervisor's and the CLI's process entry: parse the command line, set up logging,
//! run the command. The `studio` executable calls it for everything but
//! `studio daemon` and `studio app`. A closed stdout ends a command quietly, and a
//! closed stderr costs only the lines written to it (`output`).

use std::{ffi::OsString, process::ExitCode};

use studio_contract::lifecycle;

use crate::{
    Error,
    cli::{Cli, Command, WorkerArgs},
};

/// The stop future as `run` takes it (boxed, so both kinds of watch are one type).
fn boxed(
    stop: impl std::future::Future<Output = ()> + 'static,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    Box::pin(stop)
}

/// Runs one `studio` command with `args` (the first is the program name).
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = Cli::try_from_args(args).unwrap_or_else(|e| e.exit());
    // The supervisor and a running worker narrate at info; the short commands stay quiet
    // unless asked.
    let long_running = matches!(
        cli.command,
        Command::Up(_) | Command::Worker(WorkerArgs { command: None, .. })
    );
    let default = if long_running { "info" } else { "warn" };
    lifecycle::init_tracing(std::env::var("STUDIO_LOG").ok().as_deref(), default);
    // A current-thread runtime on the main thread: the children are spawned from this
    // thread, and their parent-death signal fires when the spawning thread exits.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("studio: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ran = runtime.block_on(async {
        if long_running {
            // Watched from the start: a stop during start-up is an ordered stop too.
            let stop =
                lifecycle::stop_signal().map_err(|e| Error::io("cannot watch for signals", e))?;
            crate::run(cli, boxed(stop)).await
        } else {
            // Watched only once a command waits on it (a follow mode, a prompt): until
            // then Ctrl-C and SIGTERM end a short command as they end any program.
            let stop = async {
                match lifecycle::stop_signal() {
                    Ok(stop) => stop.await,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot watch for signals");
                        std::future::pending::<()>().await;
                    }
                }
            };
            crate::run(cli, boxed(stop)).await
        }
    });
    match ran {
        Ok(code) => ExitCode::from(code),
        Err(e) if e.reader_gone() => ExitCode::from(e.exit_code()),
        Err(e @ Error::NotRunning(_)) => {
            errln!("{e}");
            ExitCode::from(e.exit_code())
        }
        Err(e) => {
            errln!("studio: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
