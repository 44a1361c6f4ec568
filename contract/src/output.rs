//! Process output that a closed pipe cannot turn into a panic.
//!
//! The supervisor reads its children's stderr and stdout through pipes; when it dies
//! (even `kill -9`) those pipes close, and the children are asked to stop by SIGTERM.
//! Rust's `eprintln!` panics on a failed write, and so does the tracing formatter's own
//! report of one, so a child would die with status 101 at its next log line instead of
//! stopping cleanly. Logs therefore go through [`Stderr`], which drops what cannot be
//! written: with no reader, nobody is left to tell.

use std::{fmt, io};

/// Standard error that swallows write errors (`EPIPE` above all). Give it to the tracing
/// formatter as `.with_writer(|| Stderr)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stderr;

impl io::Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // One locked write_all per event keeps lines whole when threads log at once.
        let _ = io::Write::write_all(&mut io::stderr().lock(), buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::Write::flush(&mut io::stderr());
        Ok(())
    }
}

/// One line on stderr, as `eprintln!` would print it, without its panic.
pub fn eprint_line(line: impl fmt::Display) {
    let _ = io::Write::write_all(&mut Stderr, format!("{line}\n").as_bytes());
}
