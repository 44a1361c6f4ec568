//! The life of every Studio process, the same in the three binaries: how it reads its
//! flags (a bad one is one line and exit 64), sets up its logging, turns SIGTERM and
//! SIGINT into one [`Shutdown`] its tasks watch; what a supervised child does at start
//! (tie its life to the supervisor, take the app key from stdin, never from the
//! environment or the command line, so never in `ps`); and how long each side of a stop
//! may take, ordered so that a clean stop is never a kill.

use std::{
    ffi::OsString,
    fmt,
    future::Future,
    io::{self, BufRead, IsTerminal},
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

use tokio::sync::watch;

use crate::{output, secret::AppKey};

/// The exit status of a process refused its configuration (sysexits' `EX_USAGE`): the
/// supervisor does not restart a child that exits with it.
pub const EXIT_CONFIG: u8 = 64;

/// One line on stderr naming the program, then `code`.
pub fn fail(program: &str, line: impl fmt::Display, code: u8) -> ExitCode {
    output::eprint_line(format_args!("{program}: {line}"));
    ExitCode::from(code)
}

/// The command line, or the exit status to end with: `--help` and `--version` print and
/// succeed; anything clap refuses is its first line and [`EXIT_CONFIG`].
pub fn parse_args<P: clap::Parser>(
    program: &str,
    args: impl IntoIterator<Item = OsString>,
) -> Result<P, ExitCode> {
    P::try_parse_from(args).map_err(|e| {
        if e.use_stderr() {
            let text = e.render().to_string();
            fail(
                program,
                text.lines().next().unwrap_or("bad arguments"),
                EXIT_CONFIG,
            )
        } else {
            e.print().map_or(ExitCode::FAILURE, |()| ExitCode::SUCCESS)
        }
    })
}

/// Log lines on stderr through [`output::Stderr`] (a closed pipe costs lines, never a
/// panic), coloured on a terminal. The filter: `directives` when given and valid, else
/// `RUST_LOG`, else `default`.
pub fn init_tracing(directives: Option<&str>, default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = directives
        .and_then(|d| EnvFilter::try_new(d).ok())
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_writer(|| output::Stderr)
        // Its report of a failed write is an `eprintln!`, which would panic in turn.
        .log_internal_errors(false)
        .with_ansi(io::stderr().is_terminal())
        .with_env_filter(filter)
        .init();
}

/// Resolves at the first SIGTERM or SIGINT. The handlers are installed by this call (it
/// needs a runtime): call it before starting anything, so an early signal stops cleanly.
pub fn stop_signal() -> io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// A process's stop, shared by every task that must end with it: set once, by anyone
/// holding a clone; watched by all.
#[derive(Debug, Clone)]
pub struct Shutdown {
    sender: Arc<watch::Sender<bool>>,
    receiver: watch::Receiver<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    pub fn new() -> Self {
        let (sender, receiver) = watch::channel(false);
        Self {
            sender: Arc::new(sender),
            receiver,
        }
    }

    /// Asks every watcher to stop (again is harmless).
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }

    pub fn is_triggered(&self) -> bool {
        *self.receiver.borrow()
    }

    /// Resolves once the stop was asked (at once if it already was).
    pub fn triggered(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut receiver = self.receiver.clone();
        async move {
            // The sender lives in `self`'s clones; if all are gone nobody can stop us
            // later either, so that counts as a stop.
            let _ = receiver.wait_for(|stop| *stop).await;
        }
    }
}

/// How long the supervisor waits after SIGTERM before it sends SIGKILL to a child (the
/// default of `STUDIO_STOP_GRACE_MS`), in milliseconds.
pub const STOP_GRACE_MS: u64 = 5_000;
/// The longest studiod's drain of in-flight work and jobs may take once asked to stop; its
/// last writes (sockets, the epoch's end, the store: milliseconds) follow. Shorter than
/// the supervisor's grace, so a clean stop is never turned into a kill.
pub const DAEMON_DRAIN: Duration = Duration::from_secs(4);
/// The longest studio-app's own stop may take (open event streams included).
pub const APP_DRAIN: Duration = Duration::from_secs(2);

const _: () = assert!(
    DAEMON_DRAIN.as_millis() < STOP_GRACE_MS as u128
        && APP_DRAIN.as_millis() < STOP_GRACE_MS as u128,
    "a child's drain must end before the supervisor's TERM-to-KILL grace"
);

/// Asks the kernel to send SIGTERM when the parent dies, then checks the parent is still
/// `supervisor_pid` (it may have died before the request took effect).
pub fn die_with_parent(supervisor_pid: u32) -> io::Result<()> {
    use rustix::process::{Signal, getppid, set_parent_process_death_signal};
    set_parent_process_death_signal(Some(Signal::TERM))?;
    let parent = getppid().map_or(0, |p| p.as_raw_nonzero().get().unsigned_abs());
    if parent != supervisor_pid {
        return Err(io::Error::other(format!(
            "supervisor {supervisor_pid} is gone (parent is now {parent})"
        )));
    }
    Ok(())
}

/// Reads the app key, one hex line, from stdin.
pub fn read_app_key_from_stdin() -> io::Result<AppKey> {
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    AppKey::from_hex(&line)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "stdin did not carry an app key"))
}

#[cfg(test)]
mod shutdown_tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_sees_one_trigger() {
        let shutdown = Shutdown::new();
        let watcher = shutdown.clone();
        let waiting = tokio::spawn(watcher.triggered());
        assert!(!shutdown.is_triggered());
        shutdown.trigger();
        waiting.await.expect("resolved");
        assert!(watcher.is_triggered());
        // Late watchers resolve at once.
        tokio::time::timeout(Duration::from_secs(1), watcher.triggered())
            .await
            .expect("already triggered");
    }

    #[derive(Debug, clap::Parser)]
    struct Flags {
        #[arg(long)]
        port: u16,
    }

    #[test]
    fn a_refused_flag_is_exit_64() {
        let refused = parse_args::<Flags>("t", ["t", "--port", "x"].map(OsString::from));
        assert_eq!(refused.expect_err("refused"), ExitCode::from(EXIT_CONFIG));
        let ok = parse_args::<Flags>("t", ["t", "--port", "1"].map(OsString::from));
        assert_eq!(ok.expect("parsed").port, 1);
    }
}
