//! The verifier's wire types and tonic stubs (package `studio.verifier.v1`).
//!
//! Invariant: this crate knows nothing of axum, sqlx or either process.

#![allow(clippy::all, clippy::pedantic)]

/// Version of the verifier protocol spoken by this build; `Hello` exchanges it.
pub const PROTOCOL_VERSION: u32 = 1;

/// Metadata key carrying the launch's app key on every verifier call.
pub const APP_KEY_METADATA: &str = "x-studio-app-key";

pub mod v1 {
    tonic::include_proto!("studio.verifier.v1");
}
