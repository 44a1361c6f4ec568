//! `studiod`: the daemon alone (the `studio` executable carries it too, as `studio daemon`).

fn main() -> std::process::ExitCode {
    studio_daemon::entry::main(std::env::args_os())
}
