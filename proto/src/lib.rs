//! The wire types and tonic stubs of the verifier (package `studio.verifier.v1`) and of
//! studiod's worker listener (package `studio.worker.v1`).
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

/// Version of the worker protocol spoken by this build; `Register` sends it.
pub const WORKER_PROTOCOL_VERSION: u32 = 1;

pub mod worker {
    pub mod v1 {
        tonic::include_proto!("studio.worker.v1");

        impl std::fmt::Debug for Secret {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct("Secret")
                    .field("variable", &self.variable)
                    .field("name", &self.name)
                    .finish_non_exhaustive()
            }
        }
    }
}
