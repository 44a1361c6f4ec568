//! `studio-app`: the app alone (the `studio` executable carries it too, as `studio app`).

fn main() -> std::process::ExitCode {
    studio_app::entry::main(std::env::args_os())
}
