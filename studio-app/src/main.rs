//! The `studio-app` binary: parse the configuration, then hand over to the library.

use std::process::ExitCode;

use clap::Parser;
use studio_app::{Cli, Config, StartError};
use studio_contract::lifecycle;

/// Bad configuration (sysexits `EX_USAGE`).
const EXIT_CONFIG: u8 = 64;

fn main() -> ExitCode {
    // Before anything could build a TLS config: two linked backends would panic later.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            return e.print().map_or(ExitCode::FAILURE, |()| ExitCode::SUCCESS);
        }
        Err(e) => {
            let text = e.render().to_string();
            eprintln!(
                "studio-app: {}",
                text.lines().next().unwrap_or("invalid arguments")
            );
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if let Some(pid) = cli.supervisor_pid
        && let Err(e) = lifecycle::die_with_parent(pid)
    {
        eprintln!("studio-app: {e}");
        return ExitCode::FAILURE;
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let config = match Config::from_cli(cli, lifecycle::read_app_key_from_stdin) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("studio-app: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("studio-app: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(studio_app::run(config, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("studio-app: {e:#}");
            match e.downcast_ref::<StartError>() {
                Some(StartError::Config(_)) => ExitCode::from(EXIT_CONFIG),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

/// SIGTERM (the supervisor) or SIGINT (a terminal).
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        // Without signal handlers the process still dies by the default action.
        _ => std::future::pending().await,
    }
}
