//! Prints studiod's OpenAPI document (`cargo run -p studio-api --example openapi`).

fn main() {
    print!(
        "{}",
        studio_api::openapi::to_text(&studio_api::daemon_document())
    );
}
