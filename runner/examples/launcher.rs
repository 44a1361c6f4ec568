//! The launcher alone, for the shim tests (`runner/tests/shim.rs`): requests on stdin,
//! reports on stdout. A test process has threads, so it cannot fork a launcher itself.

use std::{fs::File, io, os::fd::AsFd};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stdout = File::from(io::stdout().as_fd().try_clone_to_owned()?);
    studio_runner::launcher::serve(io::stdin().lock(), stdout)?;
    Ok(())
}
