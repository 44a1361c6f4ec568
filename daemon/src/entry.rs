//! The daemon's process entry, shared by the `studiod` executable and `studio daemon`:
//! parse the flags, set up logging, run until SIGTERM or SIGINT. Exit 64 on bad
//! configuration or a home another studiod keeps. Nothing here writes with `eprintln!`:
//! a supervisor that died closes the stderr pipe, and a stop must not turn into a panic.

use std::{ffi::OsString, io::IsTerminal, process::ExitCode};

use clap::Parser;
use studio_contract::{
    lifecycle::{die_with_parent, read_app_key_from_stdin},
    output::{Stderr, eprint_line},
};
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

use crate::{Args, chain};

const EX_CONFIG: u8 = 64;

/// Runs studiod with `args` (the first is the program name, as in `std::env::args_os`).
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
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
    let config = match args.into_config(|k| std::env::var(k).ok(), read_app_key_from_stdin) {
        Ok(config) => config,
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
