//! What `studio up` runs: one supervisor per home, the launch sequence of studiod and
//! studio-app, each child's restarts and backoff, and the control socket's server.
//!
//! Invariant: this tree imports nothing from the user commands (`cli`); it stands on what
//! both use at the crate root (`control`, `pairing`, `logs`, `config`, `output`). The
//! CLI reaches it only through [`up`] and [`UpConfig`].

mod child;
mod discover;
mod lifecycle;
mod policy;
mod up;

pub use up::{UpConfig, up};
