//! Compiles `studio/verifier/v1/verifier.proto` with protox, so no `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let file = "studio/verifier/v1/verifier.proto";
    println!("cargo:rerun-if-changed={file}");
    let fds = protox::compile([file], ["."])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
