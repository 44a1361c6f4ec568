//! A schedule's health, derived (never stored): `disabled`, `never-fired`, `no-evidence`,
//! `overdue`, `failing` or `healthy`.

use studio_schedule::Armed;

use super::model::{RunStatus, ScheduleRow};

/// Every health, in the order the cockpit lists them.
pub(crate) const HEALTHS: &[&str] = &[
    "failing",
    "overdue",
    "no-evidence",
    "never-fired",
    "healthy",
    "disabled",
];

/// Evidence younger than this is never overdue, whatever the cadence.
pub(crate) const OVERDUE_SLACK_MS: i64 = 300_000;

/// Whether the row's health depends on its cadence (so on arming its trigger): only an
/// armed schedule whose latest evidence is older than the slack can be overdue.
pub(crate) fn needs_cadence(row: &ScheduleRow, now: i64) -> bool {
    row.enabled
        && row.next_fire_at_ms.is_some()
        && row
            .stats
            .last_outcome
            .as_ref()
            .is_some_and(|o| now - o.at_ms > OVERDUE_SLACK_MS)
}

/// Overdue when the last evidence is older than max(3 × cadence, cadence + 300 s).
/// `armed` is consulted only when [`needs_cadence`] holds.
pub(crate) fn health(row: &ScheduleRow, armed: Option<&Armed>, now: i64) -> &'static str {
    if !row.enabled {
        return "disabled";
    }
    if !row.stats.has_runs && row.last_fired_at_ms.is_none() {
        return "never-fired";
    }
    let Some(last) = &row.stats.last_outcome else {
        return "no-evidence";
    };
    if needs_cadence(row, now)
        && let Some(c) = armed.and_then(|a| a.cadence_ms(now, row.anchor_ms))
        && now - last.at_ms > (3 * c).max(c + OVERDUE_SLACK_MS)
    {
        return "overdue";
    }
    if matches!(last.status(), Some(RunStatus::Failed | RunStatus::TimedOut)) {
        return "failing";
    }
    "healthy"
}
