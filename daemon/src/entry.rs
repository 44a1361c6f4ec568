//! The daemon's process entry, shared by the `studiod` executable and `studio daemon`:
//! parse the flags, set up logging, run until SIGTERM or SIGINT. Exit 64 on bad
//! configuration or a home another studiod keeps. Nothing here writes with `eprintln!`:
//! a supervisor that died closes the stderr pipe, and a stop must not turn into a panic.
//!
//! The same executable is also the job launcher (`docs/SHIMS.md`): with the hidden
//! `--job-launcher` flag it serves launch requests, single-threaded, before any runtime,
//! logging or argument parsing could start a thread.

use std::{ffi::OsString, fs::File, io::IsTerminal, os::fd::AsFd, process::ExitCode};

use clap::Parser;
use studio_contract::{
    lifecycle::{die_with_parent, read_app_key_from_stdin},
    output::{Stderr, eprint_line},
};
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

use crate::{Args, chain};
use studio_runner::client::{LAUNCHER_FLAG, LauncherCommand};

const EX_CONFIG: u8 = 64;

/// Runs studiod with `args` (the first is the program name, as in `std::env::args_os`),
/// for the `studiod` executable.
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    main_with(args, Vec::new())
}

/// Runs studiod with `args`; `leading` are the arguments that make this executable the
/// daemon (`["daemon"]` for `studio`), used again to start it as the job launcher.
pub fn main_with(args: impl IntoIterator<Item = OsString>, leading: Vec<OsString>) -> ExitCode {
    let args: Vec<OsString> = args.into_iter().collect();
    if args.get(1).is_some_and(|a| a == LAUNCHER_FLAG) {
        return launcher();
    }
    let args = match Args::try_parse_from(args) {
        Ok(args) => args,
        Err(e) if !e.use_stderr() => {
            let _ = e.print(); // --help, --version
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let text = e.to_string();
            eprint_line(format_args!(
                "studiod: {}",
                text.lines().next().unwrap_or("bad arguments")
            ));
            return ExitCode::from(EX_CONFIG);
        }
    };
    if let Some(pid) = args.supervisor_pid
        && let Err(e) = die_with_parent(pid)
    {
        eprint_line(format_args!("studiod: {e}"));
        return ExitCode::FAILURE;
    }
    let (open_files, _) = studio_frontdoor::raise_open_files();
    let config = match args.into_config(|k| std::env::var(k).ok(), read_app_key_from_stdin) {
        Ok(mut config) => {
            config.scheduler.launcher = match std::env::current_exe() {
                Ok(program) => Some(LauncherCommand {
                    program,
                    leading,
                    open_files: Some(open_files),
                }),
                Err(e) => {
                    eprint_line(format_args!("studiod: cannot find its own executable: {e}"));
                    return ExitCode::FAILURE;
                }
            };
            config
        }
        Err(e) => {
            eprint_line(format_args!("studiod: {}", chain(&e)));
            return ExitCode::from(EX_CONFIG);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(|| Stderr)
        // Its report of a failed write is an `eprintln!`, which would panic in turn.
        .log_internal_errors(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprint_line(format_args!("studiod: cannot start the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        // Registered before anything starts, so an early SIGTERM still stops cleanly.
        let (mut term, mut int) = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => (term, int),
            (Err(e), _) | (_, Err(e)) => {
                return Err(crate::DaemonError::io("cannot install signal handlers")(e));
            }
        };
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        };
        crate::run(config, shutdown).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Bad configuration, or a home another studiod keeps: one plain line, as above.
        Err(e) if e.is_config() => {
            eprint_line(format_args!("studiod: {}", chain(&e)));
            ExitCode::from(EX_CONFIG)
        }
        Err(e) => {
            tracing::error!(error = %chain(&e), "studiod failed");
            eprint_line(format_args!("studiod: {}", chain(&e)));
            ExitCode::from(1)
        }
    }
}

/// The job launcher: requests on stdin, the shims' reports on stdout, until stdin ends.
/// It dies with the studiod that started it (set up by `studio_runner::client`).
fn launcher() -> ExitCode {
    let served = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| e.to_string())
        .and_then(|report| {
            studio_runner::launcher::serve(std::io::stdin().lock(), File::from(report))
                .map_err(|e| e.to_string())
        });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprint_line(format_args!("studiod job launcher: {e}"));
            ExitCode::FAILURE
        }
    }
}
