//! What the CLI prints, without the panics of `println!` and `eprintln!`.
//!
//! stdout: a reader that goes away (`studio runs | head -1`) ends the command quietly,
//! through [`Error::Output`], which `entry` turns into a silent exit 0. stderr carries
//! notes beside the output and the logs; a failed write there is dropped, since nobody
//! is left to read a report of it. `studio up` keeps supervising whatever happens to
//! either pipe.

use std::{
    fmt,
    io::{self, Write},
};

use serde::Serialize;

use crate::Error;

/// `print!` that returns [`Error::Output`] instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::stdout(format_args!($($arg)*))
    };
}

/// `println!` that returns [`Error::Output`] instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` that never fails.
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::output::stderr(format_args!($($arg)*))
    };
}

/// `eprintln!` that never fails.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes and flushes at once, so a closed pipe is noticed at this write, not at exit.
pub(crate) fn stdout(args: fmt::Arguments<'_>) -> Result<(), Error> {
    let mut out = io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.flush())
        .map_err(Error::Output)
}

pub(crate) fn stderr(args: fmt::Arguments<'_>) {
    let _ = studio_contract::output::Stderr.write_fmt(args);
}

/// `value` as JSON for `--json`.
pub(crate) fn print_json<T: Serialize>(value: &T) -> Result<(), Error> {
    let text = pretty(value).map_err(|e| Error::Failed(format!("cannot print JSON: {e}")))?;
    outln!("{text}")?;
    Ok(())
}

/// Pretty JSON with the keys of every object in alphabetical order (through a `Value`,
/// whose maps are sorted), as the CLI has always printed studiod's answers.
pub(crate) fn pretty<T: Serialize>(value: &T) -> serde_json::Result<String> {
    serde_json::to_value(value).and_then(|v| serde_json::to_string_pretty(&v))
}

/// `value` as one line of JSON, its keys ordered as [`print_json`] orders them.
pub(crate) fn json_line<T: Serialize>(value: &T) -> Result<String, Error> {
    serde_json::to_value(value)
        .map(|v| v.to_string())
        .map_err(|e| Error::Failed(format!("cannot print JSON: {e}")))
}
