//! The scheduler: turns schedules into runs and runs into finished, accounted jobs.
//!
//! Owns the due-time queue, the fire transaction, gates, dispatch through the runner,
//! startup recovery, the stale-run reaper and the event log. See `docs/SCHEDULER.md`.
//! Invariant: every status change is a compare-and-set in [`store`], committed with its
//! transition and its event.
//! Invariant: the scheduler is the only write path. A handler calls a command
//! (`commands`), which writes, publishes and re-arms; the store's writes, `publish` and
//! `rearm` are visible only inside this module.

pub(crate) mod allowlist;
pub(crate) mod approval;
mod commands;
pub(crate) mod compare;
mod decisions;
pub(crate) mod declare;
pub(crate) mod define;
pub(crate) mod engine;
pub(crate) mod export;
pub(crate) mod health;
mod launch;
mod leader;
mod listen;
pub(crate) mod model;
pub(crate) mod notify;
mod recovery;
pub(crate) mod retention;
#[cfg(test)]
mod retention_tests;
mod retries;
pub(crate) mod secrets;
pub(crate) mod store;
pub(crate) mod tasks;
#[cfg(test)]
mod tasks_tests;
#[cfg(test)]
mod tests;
pub(crate) mod workers;
#[cfg(test)]
mod workers_tests;

use std::{path::Path, time::Duration};

pub(crate) use engine::Scheduler;

/// The scheduler's settings (from the environment, read once in `config`).
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// `STUDIO_COMMAND_ALLOWLIST`: seeds the stored allow-list at the first start of a
    /// `state.db` (bare names or absolute paths); afterwards `studio allow` changes it.
    pub allowlist_seed: Vec<String>,
    /// studiod's own `PATH` (absolute directories only count): where allowed names and
    /// the agent command are found. Never the job's.
    pub search_path: String,
    /// `STUDIO_AGENT_COMMAND` split on whitespace (default `li agent`).
    pub agent_command: Vec<String>,
    /// `STUDIO_MAX_CONCURRENT_RUNS` (default 4).
    pub max_concurrent: usize,
    /// `STUDIO_LOCAL_LABELS`: the labels of studiod's built-in worker (default none: it
    /// runs tasks that need no label).
    pub local_labels: Vec<String>,
    /// `STUDIO_SCHEDULER_TZ`: the zone of cron schedules that name none.
    pub default_timezone: Option<String>,
    /// `STUDIO_RUN_LOG_CAP`: bytes of each stream kept in the run's log file.
    pub log_cap: u64,
    /// Between TERM and KILL when a deadline passes or a run is cancelled.
    pub job_grace: Duration,
    /// `STUDIO_MISSED_FIRE_GRACE_SECS` (default 60): how late a single fire may still run
    /// as scheduled before the missed-fire policy decides instead.
    pub missed_fire_grace_ms: i64,
    /// `STUDIO_TEST_CRASH_AT` (debug builds only).
    pub crash_at: Option<CrashPoint>,
    /// The variables of studiod's own environment a job may inherit (read once at start:
    /// `studio_runner::env::inheritable`).
    pub host_env: Vec<(String, String)>,
    /// How to start the job launcher (studiod's own executable, see `entry`); `None`
    /// for a daemon embedded where no launcher can run (unit tests): its launches fail.
    pub launcher: Option<studio_runner::client::LauncherCommand>,
    /// `STUDIO_LEASE_TTL_SECS` (default 30): how long a remote worker's lease lasts
    /// unless its heartbeat renews it.
    pub lease_ttl: Duration,
    /// `STUDIO_NOTIFY_BACKOFF_MS`: the waits between a notification's attempts (default
    /// 10 s, 1 m, 5 m, 30 m, 2 h; then it is dead).
    pub notify_backoff: notify::Backoff,
    /// The ports of this studiod's, its studio-app's and its worker listener's own
    /// listeners: a notification endpoint on this machine at one of them is refused.
    pub own_ports: Vec<u16>,
    /// `STUDIO_RETENTION`: the retention policy as JSON; when set, it is the policy at
    /// every start and the API cannot change it.
    pub retention: Option<studio_api::types::RetentionPolicy>,
    /// This studiod's epoch, for the audit rows of what it does by itself.
    pub epoch: crate::epoch::EpochCell,
    /// This studiod's HTTP address, as its member row shows it.
    pub addr: String,
    /// `STUDIO_FAILOVER_SECS` (default 5, at least 3): on a shared database, how soon
    /// another member leads once the leader is gone or silent (`leader`).
    pub failover: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            allowlist_seed: Vec::new(),
            search_path: studio_runner::env::DEFAULT_PATH.to_owned(),
            agent_command: vec!["li".into(), "agent".into()],
            max_concurrent: 4,
            local_labels: Vec::new(),
            default_timezone: None,
            log_cap: 64 * 1024 * 1024,
            job_grace: Duration::from_secs(5),
            missed_fire_grace_ms: 60_000,
            crash_at: None,
            host_env: Vec::new(),
            launcher: None,
            lease_ttl: Duration::from_secs(30),
            notify_backoff: notify::Backoff::default(),
            own_ports: Vec::new(),
            retention: None,
            epoch: crate::epoch::EpochCell::default(),
            addr: String::new(),
            failover: Duration::from_secs(5),
        }
    }
}

/// Where a test build may die as `kill -9` would, to test the delivery contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// The claim is committed; nothing is spawned.
    AfterClaim,
    /// A grant is committed (its run `queued`); nothing is launched.
    AfterGrant,
    /// The child is launched; `dispatched_at_ms` is not stamped.
    AfterSpawn,
    /// Stamped; the job runs.
    AfterDispatch,
    /// The job ended; its terminal write is not done.
    BeforeFinish,
    /// A notification's outbox row is committed; it has not been sent.
    BeforeDelivery,
}

impl CrashPoint {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "after_claim" => Some(Self::AfterClaim),
            "after_grant" => Some(Self::AfterGrant),
            "after_spawn" => Some(Self::AfterSpawn),
            "after_dispatch" => Some(Self::AfterDispatch),
            "before_finish" => Some(Self::BeforeFinish),
            "before_delivery" => Some(Self::BeforeDelivery),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::AfterClaim => "after_claim",
            Self::AfterGrant => "after_grant",
            Self::AfterSpawn => "after_spawn",
            Self::AfterDispatch => "after_dispatch",
            Self::BeforeFinish => "before_finish",
            Self::BeforeDelivery => "before_delivery",
        }
    }

    /// Dies here if this is the configured point and it has not fired in this home yet
    /// (a marker in `run/` makes each point fire once, so a restart can recover).
    pub(crate) fn reached(configured: Option<Self>, here: Self, run_dir: &Path) {
        if configured != Some(here) || !cfg!(debug_assertions) {
            return;
        }
        let marker = run_dir.join(format!("crashed-{}", here.as_str()));
        if marker.exists() {
            return;
        }
        let _ = std::fs::write(&marker, b"");
        tracing::error!(point = here.as_str(), "test crash point reached: aborting");
        std::process::abort();
    }
}
