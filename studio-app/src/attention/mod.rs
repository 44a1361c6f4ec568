//! The cockpit's attention queue: items derived on every read from studiod's failed and
//! timed-out runs, failing or overdue schedules and runs awaiting approval, and the
//! operators' dispositions of them (acknowledged, resolved, expected, snoozed) with an
//! append-only history, kept in the app's own `app.db`.
//!
//! Invariant: a disposition never touches the run or schedule it is about; the daemon's
//! records stay the honest account of what happened. See docs/ATTENTION.md.

mod derive;
pub(crate) mod routes;
mod source;
pub(crate) mod store;
