//! Compiles the verifier's and the worker listener's protobufs with protox, so no `protoc`
//! is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "studio/verifier/v1/verifier.proto",
        "studio/worker/v1/worker.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let fds = protox::compile(files, ["."])?;
    tonic_prost_build::configure()
        // A secret's value must not reach a log through `{:?}`: its Debug is written by
        // hand (src/lib.rs).
        .skip_debug([".studio.worker.v1.Secret"])
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
