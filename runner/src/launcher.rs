//! The launcher (`docs/SHIMS.md`): a small process that reads launch requests, one JSON
//! line each, and forks one shim per request. It never execs and never waits: a fork of a
//! small process costs far less than starting a new executable, and a shim outlives the
//! launcher as easily as the daemon.
//!
//! Invariant: the process is single-threaded whenever it forks. `fork` copies only the
//! calling thread, so a lock another thread held (the allocator's, stdout's) would stay
//! held forever in the child; with one thread there is none. [`serve`] refuses to start
//! otherwise and never starts a thread itself.

use std::{
    fs::File,
    io::{self, BufRead, Write},
};

use crate::{
    launch::{LaunchReport, LaunchRequest},
    shim,
};

/// Why the launcher does not serve.
#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    #[error("the launcher must be single-threaded to fork, but runs {0} threads")]
    Threads(usize),
    #[error("cannot read launch requests: {0}")]
    Input(io::Error),
    #[error("cannot count the launcher's threads: {0}")]
    Proc(io::Error),
}

/// The launcher process's whole life (`--job-launcher`): requests on stdin, the shims'
/// reports on stdout, until stdin ends. `who` names the process in its one error line.
/// Call before any runtime or thread starts: it forks without exec.
pub fn main_stdio(who: &str) -> std::process::ExitCode {
    use std::os::fd::AsFd;
    let served = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| e.to_string())
        .and_then(|report| {
            serve(std::io::stdin().lock(), File::from(report)).map_err(|e| e.to_string())
        });
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            studio_contract::output::eprint_line(format_args!("{who} job launcher: {e}"));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Forks a shim for each request line of `input` until its end; each shim writes its
/// report line to `report`. Returns at the end of `input`: the shims run on.
pub fn serve(mut input: impl BufRead, report: File) -> Result<(), LauncherError> {
    let threads = std::fs::read_dir("/proc/self/task")
        .map_err(LauncherError::Proc)?
        .count();
    if threads != 1 {
        return Err(LauncherError::Threads(threads));
    }
    ignore_children();
    let mut line = String::new();
    loop {
        line.clear();
        if input.read_line(&mut line).map_err(LauncherError::Input)? == 0 {
            return Ok(());
        }
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<LaunchRequest>(&line) {
            Ok(req) => launch(req, &report),
            Err(e) => refuse(&line, &format!("not a launch request: {e}"), &report),
        }
    }
}

/// Forks the shim of `req`; the child runs it and exits, never returning here.
fn launch(req: LaunchRequest, report: &File) {
    // The shim's own descriptor: the launcher keeps its copy for the next shims.
    let shim_report = match report.try_clone() {
        Ok(file) => file,
        Err(e) => return refuse_request(&req, &format!("cannot start a shim: {e}"), report),
    };
    // SAFETY: this process is single-threaded (checked in `serve`, which starts no
    // thread), so the child is a complete copy with no lock held by a thread it lacks.
    #[allow(unsafe_code)]
    let pid = unsafe { libc::fork() };
    match pid {
        0 => {
            // The launcher lets the kernel reap its shims; a shim reaps its own job, so it
            // needs SIGCHLD back before anything spawns.
            default_children();
            let code = shim::run(req, shim_report);
            std::process::exit(code);
        }
        -1 => {
            let e = io::Error::last_os_error();
            refuse_request(&req, &format!("cannot start a shim: {e}"), report);
        }
        _ => {}
    }
}

/// Reports a request that started nothing.
fn refuse_request(req: &LaunchRequest, message: &str, report: &File) {
    write_report(
        &LaunchReport {
            run_id: req.run_id.clone(),
            shim: None,
            result: Err(message.to_owned()),
        },
        report,
    );
}

/// Reports a line that is no request, under its `run_id` if one can be read.
fn refuse(line: &str, message: &str, report: &File) {
    let run_id = serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v.get("run_id")?.as_str().map(str::to_owned))
        .unwrap_or_default();
    write_report(
        &LaunchReport {
            run_id,
            shim: None,
            result: Err(message.to_owned()),
        },
        report,
    );
}

fn write_report(report: &LaunchReport, mut to: &File) {
    // A reader gone is seen at the end of the input; nothing else to do here.
    let _ = to.write_all(&report.to_line());
}

/// Shims are never waited for: with SIGCHLD ignored the kernel reaps them at once, so
/// none lingers as a zombie of the launcher.
fn ignore_children() {
    // SAFETY: sets a disposition (no handler code runs); single-threaded.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_IGN);
    }
}

fn default_children() {
    // SAFETY: sets a disposition (no handler code runs); the forked child has one thread.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    }
}
