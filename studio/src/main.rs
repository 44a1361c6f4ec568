//! `studio`: one executable that is a whole installation. `studio daemon …` is studiod and
//! `studio app …` is studio-app (the same libraries and flags as those executables), save
//! `studio app token|list|revoke|join`; everything else is the supervisor and the user
//! CLI, whose `up` starts this very file twice. Each process runs only its own library:
//! the daemon runs no app code, the app none of the daemon's, and the supervisor neither.

use std::{ffi::OsString, process::ExitCode};

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let child = args.get(1).and_then(|a| a.to_str()).map(str::to_owned);
    // A worker's job launcher: before anything could start a thread (it forks).
    if child.as_deref() == Some(studio_worker::LAUNCHER_LEADING)
        && args
            .get(2)
            .is_some_and(|a| a == studio_runner::client::LAUNCHER_FLAG)
    {
        return studio_runner::launcher::main_stdio("studio worker");
    }
    match child.as_deref() {
        Some(name @ ("daemon" | "app")) if !studio_supervisor::entry::runs(&args) => {
            // `studio daemon --help` names itself as such.
            args.splice(0..2, [OsString::from(format!("studio {name}"))]);
            if name == "daemon" {
                studio_daemon::entry::main_with(args, vec![OsString::from("daemon")])
            } else {
                studio_app::entry::main(args)
            }
        }
        _ => studio_supervisor::entry::main(args),
    }
}
