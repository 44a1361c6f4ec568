//! The app's process entry, shared by the `studio-app` executable and `studio app`: parse
//! the flags, set up logging, serve until SIGTERM or SIGINT. Exit 64 on bad configuration.
//! Nothing here writes with `eprintln!`: a supervisor that died closes the stderr pipe,
//! and a stop must not turn into a panic.

use std::{ffi::OsString, process::ExitCode};

use clap::Parser;
use studio_contract::{lifecycle, output};

use crate::{Cli, Config, StartError, shutdown_signal};

/// Bad configuration (sysexits `EX_USAGE`).
const EXIT_CONFIG: u8 = 64;

/// Runs studio-app with `args` (the first is the program name, as in `std::env::args_os`).
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    // Before anything could build a TLS config: two linked backends would panic later.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            return e.print().map_or(ExitCode::FAILURE, |()| ExitCode::SUCCESS);
        }
        Err(e) => {
            return fail(
                e.render()
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or("bad arguments"),
                EXIT_CONFIG,
            );
        }
    };
    if let Some(pid) = cli.supervisor_pid
        && let Err(e) = lifecycle::die_with_parent(pid)
    {
        return fail(&e.to_string(), 1);
    }
    // The listener's connection cap is a share of this (studio-app starts no jobs).
    studio_frontdoor::raise_open_files();
    tracing_subscriber::fmt()
        .with_writer(|| output::Stderr)
        // Its report of a failed write is an `eprintln!`, which would panic in turn.
        .log_internal_errors(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let config = match Config::from_cli(cli, lifecycle::read_app_key_from_stdin) {
        Ok(config) => config,
        Err(e) => return fail(&e.to_string(), EXIT_CONFIG),
    };
    let served = tokio::runtime::Runtime::new()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(crate::run(config, shutdown_signal())));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if matches!(e.downcast_ref(), Some(StartError::Config(_))) => {
            fail(&format!("{e:#}"), EXIT_CONFIG)
        }
        Err(e) => fail(&format!("{e:#}"), 1),
    }
}

/// One line on stderr, then the exit status.
fn fail(line: &str, code: u8) -> ExitCode {
    output::eprint_line(format_args!("studio-app: {line}"));
    ExitCode::from(code)
}
