//! The daemon's process entry, shared by the `studiod` executable and `studio daemon`:
//! parse the flags, set up logging, run until SIGTERM or SIGINT. Exit 64 on bad
//! configuration or a home another studiod keeps. Nothing here writes with `eprintln!`:
//! a supervisor that died closes the stderr pipe, and a stop must not turn into a panic.
//!
//! The same executable is also the job launcher (`docs/SHIMS.md`): with the hidden
//! `--job-launcher` flag it serves launch requests, single-threaded, before any runtime,
//! logging or argument parsing could start a thread.

use std::{ffi::OsString, process::ExitCode};

use studio_contract::lifecycle::{
    EXIT_CONFIG, die_with_parent, fail, init_tracing, parse_args, read_app_key_from_stdin,
    stop_signal,
};

use crate::{Args, chain};
use studio_runner::client::{LAUNCHER_FLAG, LauncherCommand};

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
        return studio_runner::launcher::main_stdio("studiod");
    }
    let args: Args = match parse_args("studiod", args) {
        Ok(args) => args,
        Err(code) => return code,
    };
    // One TLS provider for the worker listener and the notification sender.
    let _ = rustls::crypto::ring::default_provider().install_default();
    if let Some(pid) = args.supervisor_pid
        && let Err(e) = die_with_parent(pid)
    {
        return fail("studiod", e, 1);
    }
    let (open_files, _) = studio_frontdoor::raise_open_files();
    let mut config = match args.into_config(|k| std::env::var(k).ok(), read_app_key_from_stdin) {
        Ok(config) => config,
        Err(e) => return fail("studiod", chain(&e), EXIT_CONFIG),
    };
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(e) => {
            return fail(
                "studiod",
                format_args!("cannot find its own executable: {e}"),
                1,
            );
        }
    };
    config.scheduler.launcher = Some(LauncherCommand {
        program,
        leading,
        open_files: Some(open_files),
    });
    init_tracing(None, "info");
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => return fail("studiod", format_args!("cannot start the runtime: {e}"), 1),
    };
    let result = runtime.block_on(async {
        let stop =
            stop_signal().map_err(crate::DaemonError::io("cannot install signal handlers"))?;
        crate::run(config, stop).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Bad configuration, or a home another studiod keeps: one plain line, as above.
        Err(e) if e.is_config() => fail("studiod", chain(&e), EXIT_CONFIG),
        Err(e) => {
            tracing::error!(error = %chain(&e), "studiod failed");
            fail("studiod", chain(&e), 1)
        }
    }
}
