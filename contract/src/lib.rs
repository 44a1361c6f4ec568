//! What the three Studio processes agree on, and nothing else.
//!
//! Invariant: this crate holds no state and starts nothing; studiod, studio-app and the
//! supervisor depend on it, never on each other.

pub mod control;
pub mod device;
pub mod error;
pub mod forward;
pub mod health;
pub mod home;
pub mod host;
pub mod jobenv;
pub mod lifecycle;
pub mod origin;
pub mod output;
pub mod ready;
pub mod role;
pub mod secret;
pub mod service;
pub mod socket;
pub mod time;

/// The identity `/api/identity` and `Hello` report.
pub const IDENTITY: &str = "studio";

/// The version every process reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Header carrying a browser's decision token.
pub const DECISION_HEADER: &str = "x-studio-decision-token";

/// Cookie holding a browser's admission token (set by studio-app, `HttpOnly`).
pub const ADMISSION_COOKIE: &str = "studio_admission";

/// How long an admission token is good for, from its redemption: a paired browser stays
/// paired across its own restarts for this long (unless revoked or the epoch ends), and
/// its cookie never outlives the token. Migration 0008 backfilled older rows with it.
pub const ADMISSION_TTL_MS: i64 = 30 * 24 * 60 * 60 * 1000;

/// The largest request body studiod's API reads; beyond it the answer is
/// `413 payload_too_large`, from studiod and from studio-app before it forwards anything.
pub const API_BODY_LIMIT: usize = 1024 * 1024;

/// How long a Studio HTTP listener waits for a request head: a new connection's first,
/// and each later one after the previous answer. A keep-alive connection idle this long
/// is closed.
pub const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a client keeps a pooled connection to a Studio listener idle before it opens
/// a fresh one: well inside [`HEADER_TIMEOUT`], so a request is never written onto a
/// connection the listener is closing at that moment (which fails it as unsendable).
pub const POOL_IDLE: std::time::Duration = std::time::Duration::from_secs(4);
