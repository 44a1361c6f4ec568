//! The daemon's process entry, shared by the `studiod` executable and `studio daemon`:
//! parse the flags, set up logging, run until SIGTERM or SIGINT. Exit 64 on bad
//! configuration.

use std::{ffi::OsString, io::IsTerminal, process::ExitCode};

use clap::Parser;
use studio_contract::lifecycle::{die_with_parent, read_app_key_from_stdin};
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
            eprintln!(
                "studiod: {}",
                text.lines().next().unwrap_or("bad arguments")
            );
            return ExitCode::from(EX_CONFIG);
        }
    };
    if let Some(pid) = args.supervisor_pid
        && let Err(e) = die_with_parent(pid)
    {
        eprintln!("studiod: {e}");
        return ExitCode::FAILURE;
    }
    let config = match args.into_config(|k| std::env::var(k).ok(), read_app_key_from_stdin) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("studiod: {}", chain(&e));
            return ExitCode::from(EX_CONFIG);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("studiod: cannot start the runtime: {e}");
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
        Err(e) => {
            tracing::error!(error = %chain(&e), "studiod failed");
            eprintln!("studiod: {}", chain(&e));
            ExitCode::from(if e.is_config() { EX_CONFIG } else { 1 })
        }
    }
}
