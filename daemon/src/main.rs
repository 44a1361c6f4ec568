//! `studiod`: parses its configuration and runs the daemon. Exit 64 on bad configuration.

use std::{io::IsTerminal, process::ExitCode};

use clap::Parser;
use studio_contract::lifecycle::{die_with_parent, read_app_key_from_stdin};
use studio_daemon::{Args, chain};
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

const EX_CONFIG: u8 = 64;

fn main() -> ExitCode {
    let args = match Args::try_parse() {
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
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = runtime.block_on(async {
        // Registered before anything starts, so an early SIGTERM still stops cleanly.
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        };
        studio_daemon::run(config, shutdown).await
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
