//! Runs one job and reports how it ended.
//!
//! Owns: the child's session and process group, its environment (cleared, then an
//! explicit allow-list), concurrent draining of stdout and stderr into capped log files
//! and 64 KiB tails, the deadline (TERM to the group, a grace, KILL to the group), cancel
//! through the same path, and the job's spend report; which process a pid names
//! (`identity`) and a launch's durable evidence (`evidence`, `docs/SHIMS.md`); the
//! launcher and the per-job shim that let a job outlive its daemon (`launcher`, `shim`,
//! their messages in `launch`, the daemon's side in `client`). Knows nothing of schedules or the store: the caller
//! decides what to run and records the outcome.
//!
//! Invariant: when [`Job::wait`] returns, no process of the job's group is left.

pub mod client;
pub mod env;
pub mod evidence;
pub mod identity;
pub mod job;
pub mod launch;
pub mod launcher;
pub mod program;
pub mod redact;
pub mod shim;
pub mod tail;

pub use identity::ProcessIdentity;
pub use job::{Canceller, Ending, Job, JobSpec, Outcome, Report, SpawnError, StreamSummary, spawn};
pub use launch::{LaunchReport, LaunchRequest, LaunchSpec};
pub use program::{ResolveError, resolve};
pub use redact::Redaction;
