//! The app's process entry, shared by the `studio-app` executable and `studio app`: parse
//! the flags, set up logging, serve until SIGTERM or SIGINT. Exit 64 on bad configuration.
//! Nothing here writes with `eprintln!`: a supervisor that died closes the stderr pipe,
//! and a stop must not turn into a panic.

use std::{ffi::OsString, process::ExitCode};

use studio_contract::lifecycle::{
    EXIT_CONFIG, die_with_parent, fail, init_tracing, parse_args, read_app_key_from_stdin,
    stop_signal,
};

use studio_frontdoor::LaneThreads;

use crate::{Cli, Config, StartError};

/// Runs studio-app with `args` (the first is the program name, as in `std::env::args_os`).
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    // Before anything could build a TLS config: two linked backends would panic later.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli: Cli = match parse_args("studio-app", args) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    if let Some(pid) = cli.supervisor_pid
        && let Err(e) = die_with_parent(pid)
    {
        return fail("studio-app", e, 1);
    }
    // The listener's connection cap is a share of this (studio-app starts no jobs).
    studio_frontdoor::raise_open_files();
    init_tracing(None, "info");
    let config = match Config::from_cli(cli, read_app_key_from_stdin) {
        Ok(config) => config,
        Err(e) => return fail("studio-app", e, EXIT_CONFIG),
    };
    // A single-thread runtime per core, each connection on one of them: no request wakes
    // a task on another thread (docs/PERFORMANCE.md, "Lanes").
    let served = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .and_then(|rt| Ok((rt, LaneThreads::start(cores(), "studio-app")?)))
        .map_err(anyhow::Error::from)
        .and_then(|(rt, lanes)| {
            rt.block_on(async {
                let stop = stop_signal()?;
                crate::run(config, lanes.lanes(), stop).await
            })
        });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if matches!(e.downcast_ref(), Some(StartError::Config(_))) => {
            fail("studio-app", format_args!("{e:#}"), EXIT_CONFIG)
        }
        Err(e) => fail("studio-app", format_args!("{e:#}"), 1),
    }
}

/// The cores this process may run on.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}
