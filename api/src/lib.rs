//! studiod's HTTP API as one contract: every body as a Rust type ([`types`]), the route
//! inventory that builds studiod's router and tells studio-app what to forward
//! ([`routes`]), and the OpenAPI document written from both ([`openapi`]).
//!
//! studiod's handlers answer with these types, studio-app's pages and the CLI read them,
//! and the end-to-end tests decode them: a field changes in one place.
//! See docs/ARCHITECTURE.md, "The contract".

pub mod app;
pub mod openapi;
pub mod route;
pub mod routes;
pub mod types;

pub use studio_contract::error::{ApiError, Code, Detail, ErrorBody, FieldError};
pub use studio_contract::role::Role;
/// The schedule spec and the declaration document, as the API carries them.
pub use studio_schedule as schedule;
pub use types::*;

/// studiod's document: what `GET /api/openapi.json` answers and `docs/openapi.json` holds.
pub fn daemon_document() -> utoipa::openapi::OpenApi {
    openapi::document(
        "studiod",
        "Studio's scheduler and job runner (loopback; a bearer on every `/api` route)",
        routes::ROUTES,
    )
}
