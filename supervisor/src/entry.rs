//! The supervisor's and the CLI's process entry: parse the command line, set up logging,
//! run the command. The `studio` executable calls it for everything but
//! `studio daemon …` and `studio app …` (save the CLI's own `studio app token|list|
//! revoke|join`: [`runs`] decides). A closed stdout ends a command quietly, and a closed
//! stderr costs only the lines written to it (`output`).

use std::{ffi::OsString, process::ExitCode};

use studio_contract::lifecycle;

use crate::{
    Error,
    cli::{APP_SUBCOMMANDS, Cli, Command, WorkerArgs},
};

/// Whether this library runs the command line `args` (the first is the program name)
/// rather than a child's: all but `studio daemon …` and `studio app …`, and of those
/// `studio app` followed at once by one of the CLI's subcommands (anything else after
/// `app`, `--help` included, is studio-app's).
pub fn runs(args: &[OsString]) -> bool {
    let word = |i: usize| args.get(i).and_then(|a| a.to_str());
    match word(1) {
        Some("daemon") => false,
        Some("app") => word(2).is_some_and(|w| APP_SUBCOMMANDS.contains(&w)),
        _ => true,
    }
}

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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn runs_here(words: &[&str]) -> bool {
        let args: Vec<OsString> = ["studio"].iter().chain(words).map(OsString::from).collect();
        runs(&args)
    }

    #[test]
    fn only_the_clis_own_app_subcommands_stay_here() {
        for words in [
            &["app", "token"][..],
            &["app", "list", "--json"],
            &["app", "revoke", "0192"],
            &["app", "join", "--server", "h:1", "--token", "T"],
            &["worker", "list"],
            &["up"],
            &[],
        ] {
            assert!(runs_here(words), "{words:?}");
        }
        for words in [
            &["app"][..],
            &["app", "--addr", "127.0.0.1:9000"],
            &["app", "--help"],
            &["app", "--studiod", "h:1", "list"],
            &["app", "help"],
            &["daemon", "--help"],
            &["daemon", "list"],
        ] {
            assert!(!runs_here(words), "{words:?}");
        }
    }

    /// The words the executable routes here are exactly `studio app`'s subcommands.
    #[test]
    fn the_routed_words_are_the_app_subcommands() {
        let cli = Cli::command();
        let app = cli.find_subcommand("app").expect("studio app");
        let mut names: Vec<&str> = app.get_subcommands().map(|c| c.get_name()).collect();
        names.sort_unstable();
        let mut routed = APP_SUBCOMMANDS.to_vec();
        routed.sort_unstable();
        assert_eq!(names, routed);
    }
}
