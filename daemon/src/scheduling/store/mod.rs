//! Every SQL statement of the scheduler, one module for each thing stored: `schedules`
//! (rows, cursors, the derived cadence, health counts), `runs` (runs, their transitions,
//! the fire transaction, the hourly counts), `events` (the event log), `plans` (a
//! declarations plan's one transaction), `allowlist` (the command allow-list) and
//! `approvals` (requests for a person's decision and the evidence log), `cluster` (the
//! members sharing the database, the leader's term and its session), `audit` (the
//! trail's row of each change made through the API, in its transaction,
//! and the trail's reads). Each
//! change of a run or schedule writes its event in the same transaction, so the event
//! stream never shows what did not happen, nor misses what did.
//!
//! Reads are the crate's; every write is visible only inside `scheduling`, whose
//! scheduler is the one write path (`commands`).

use sqlx::AnyPool;

mod allowlist;
mod approvals;
mod audit;
mod cluster;
mod dialect;
mod events;
mod health;
mod notify;
mod plans;
mod retention;
mod runs;
mod schedules;
mod secrets;
mod statement;
mod tasks;
mod workers;

pub(crate) use allowlist::{ALLOWLIST_CHANNEL, AllowEntry};
pub(crate) use approvals::{ApprovalFilter, ApprovalRow, Decided, Verdict};
pub(crate) use audit::{AuditFilter, AuditRow, Note};
pub(crate) use cluster::{
    CANCEL_CHANNEL, CancelAsk, LeaderSession, MemberRow, NewMember, SCHEDULE_CHANNEL,
};
pub(crate) use notify::{Attempted, DeliveryFilter, DeliveryRow, EndpointDeleted, EndpointRow};
pub(crate) use plans::{PlanError, PlanWrite};
pub(crate) use retention::{Chunk, Deleted, EvidenceChunk, PassRow, PolicyRow, RestoreError, Rows};
pub(crate) use runs::{Claim, Cursor, Finish, NewRun, RunFilter};
pub(crate) use schedules::{ScheduleFilter, WriteError};
#[cfg(test)]
pub(in crate::scheduling) use schedules::{UP_NEXT, health_counts_sql, list_sql};
pub(crate) use secrets::{SecretDeleted, SecretRow};
pub(crate) use tasks::{Candidate, NewTask, Submitted, TaskFilter, TaskRow, serves};
pub(crate) use workers::{BUILTIN, Ended, NewWorker, WorkerRow, split};

/// The scheduler's tables in `state.db`: read through the reader pool, written through
/// the one writer.
#[derive(Debug, Clone)]
pub(crate) struct SchedStore {
    /// Readers.
    pool: AnyPool,
    /// The one writer (see `crate::store::Store`).
    writer: AnyPool,
    /// The SQL both speak, for the few statements written once per dialect.
    dialect: studio_store::Dialect,
    /// The PostgreSQL database's URL, for the work listener (`None` on SQLite).
    url: Option<studio_store::DatabaseUrl>,
    /// Seals evidence rows (`run/evidence.key`; never in the database).
    evidence_key: std::sync::Arc<studio_evidence::Key>,
    /// Seals secrets' values (`run/secrets.key`; never in the database).
    sealer: std::sync::Arc<crate::secrets::Sealer>,
    /// How long the hot write transactions take (a fire's claim, a transition, a task's
    /// submission), for `/metrics`.
    write_time: prometheus_client::metrics::histogram::Histogram,
    /// This studiod's member id (`run/member`): stamped on the runs it runs itself.
    member: std::sync::Arc<str>,
}

/// The member id of a store made without one (unit tests' single studiod).
const LONE_MEMBER: &str = "lone";

/// The PostgreSQL notification channel on which studiod processes tell each other that
/// claimable work changed (a task submitted, a slot freed, a lease ended).
pub(crate) const WORK_CHANNEL: &str = "studio_work";

/// Observes the time from its making to its drop into a histogram.
pub(super) struct Timed<'a> {
    into: &'a prometheus_client::metrics::histogram::Histogram,
    since: std::time::Instant,
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        self.into.observe(self.since.elapsed().as_secs_f64());
    }
}

/// The evidence key of unit tests' stores.
#[cfg(test)]
pub(crate) const TEST_EVIDENCE_KEY: &[u8] = b"the evidence key of unit tests";

/// An optional real number as its statement binds it: as text, which the statement casts
/// (`CAST($n AS DOUBLE PRECISION)`). PostgreSQL keeps a prepared statement's parameter
/// types from its first execution, and sqlx's `Any` declares a NULL `f64` as a 4-byte
/// real: a later value would then not fit. Text is one type, NULL or not; `f64`'s
/// `Display` is exact (it reads back as the same number).
fn real(value: Option<f64>) -> Option<String> {
    value.map(|v| v.to_string())
}

/// Text a job or a receiver wrote (a log tail, an answer), as both databases keep it: PostgreSQL's text holds no
/// NUL character, so each one is kept as U+FFFD (on SQLite too, so both show the same),
/// and the tail stays within its size by losing its oldest characters. The run's log
/// file keeps the bytes as written.
fn without_nul(text: Option<String>) -> Option<String> {
    text.map(|t| {
        if !t.contains('\0') {
            return t;
        }
        let limit = t.len();
        let mut kept = t.replace('\0', "\u{FFFD}");
        let over = kept.len().saturating_sub(limit);
        let cut = (over..=kept.len())
            .find(|&i| kept.is_char_boundary(i))
            .unwrap_or(kept.len());
        kept.drain(..cut);
        kept
    })
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

impl SchedStore {
    pub(crate) fn new(
        store: &crate::store::Store,
        evidence_key: std::sync::Arc<studio_evidence::Key>,
        sealer: std::sync::Arc<crate::secrets::Sealer>,
    ) -> Self {
        Self {
            pool: store.pool().clone(),
            writer: store.writer().clone(),
            dialect: store.dialect(),
            url: store.url().cloned(),
            evidence_key,
            sealer,
            write_time: crate::metrics::store_write_histogram(),
            member: LONE_MEMBER.into(),
        }
    }

    /// The store of member `id` of a cluster (every studiod is one: see `cluster`).
    pub(crate) fn for_member(mut self, id: &str) -> Self {
        self.member = id.into();
        self
    }

    /// This studiod's member id.
    pub(crate) fn member(&self) -> &str {
        &self.member
    }

    /// The histogram of the hot write transactions' times.
    pub(crate) fn write_time(&self) -> &prometheus_client::metrics::histogram::Histogram {
        &self.write_time
    }

    /// Times one write transaction until the guard drops.
    pub(super) fn timed(&self) -> Timed<'_> {
        Timed {
            into: &self.write_time,
            since: std::time::Instant::now(),
        }
    }

    /// Whether query plans are SQLite's (`EXPLAIN QUERY PLAN`), which the tests of index
    /// use read.
    #[cfg(test)]
    pub(crate) fn plans_are_sqlites(&self) -> bool {
        self.dialect == studio_store::Dialect::Sqlite
    }

    /// The database's URL when it is PostgreSQL (shared with other studiod processes).
    pub(crate) fn shared_url(&self) -> Option<&studio_store::DatabaseUrl> {
        self.url.as_ref()
    }

    /// Tells every studiod on this database that claimable work changed (PostgreSQL's
    /// `NOTIFY` on [`WORK_CHANNEL`], delivered once this statement commits; the payload
    /// names the sender, so it can skip its own). Nothing on SQLite, where the one studiod
    /// already knows.
    pub(crate) async fn announce_work(&self, sender: &str) -> Result<(), crate::store::StoreError> {
        if self.dialect == studio_store::Dialect::Postgres {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(WORK_CHANNEL)
                .bind(sender)
                .execute(&self.writer)
                .await?;
        }
        Ok(())
    }

    /// What seals and opens secrets' values.
    pub(crate) fn sealer(&self) -> &crate::secrets::Sealer {
        &self.sealer
    }

    /// The store with [`TEST_EVIDENCE_KEY`] and a fixed secrets key.
    #[cfg(test)]
    pub(crate) fn with_test_key(store: &crate::store::Store) -> Self {
        Self::new(
            store,
            std::sync::Arc::new(studio_evidence::Key::new(TEST_EVIDENCE_KEY)),
            std::sync::Arc::new(crate::secrets::Sealer::new(&[7u8; 32]).expect("a 32-byte key")),
        )
    }
}
