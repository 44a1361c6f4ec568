//! A schedule's health, derived (never stored): `disabled`, `never-fired`, `no-evidence`,
//! `overdue`, `failing` or `healthy`. One rule, written twice — [`health`] for a row in
//! hand and [`health_sql`] for SQL to count or filter every row without reading them —
//! and a test holds the two to the same answers.

use super::model::{RunStatus, ScheduleRow};

pub(crate) use studio_contract::health::HEALTHS;

/// Evidence is overdue when older than max(3 × cadence, cadence + this).
pub(crate) const OVERDUE_SLACK_MS: i64 = 300_000;

/// The health of `row` at `now`. Overdue (an armed schedule whose latest outcome is older
/// than max(3 × cadence, cadence + 300 s)) outranks failing.
pub(crate) fn health(row: &ScheduleRow, now: i64) -> &'static str {
    if !row.enabled {
        return "disabled";
    }
    if !row.stats.has_runs && row.last_fired_at_ms.is_none() {
        return "never-fired";
    }
    let Some(last) = &row.stats.last_outcome else {
        return "no-evidence";
    };
    if let (Some(_), Some(c)) = (row.next_fire_at_ms, row.cadence_ms)
        && now - last.at_ms > (3 * c).max(c + OVERDUE_SLACK_MS)
    {
        return "overdue";
    }
    if matches!(last.status(), Some(RunStatus::Failed | RunStatus::TimedOut)) {
        return "failing";
    }
    "healthy"
}

/// [`health`] as a SQL expression over a `schedules` row, with now bound as the
/// parameter `now` (`$5`, or `?` in a fragment the store numbers).
pub(crate) fn health_sql(now: &str) -> String {
    format!(
        "CASE WHEN enabled = 0 THEN 'disabled' \
         WHEN has_runs = 0 AND last_fired_at_ms IS NULL THEN 'never-fired' \
         WHEN last_outcome IS NULL THEN 'no-evidence' \
         WHEN next_fire_at_ms IS NOT NULL AND cadence_ms IS NOT NULL \
             AND {now} - last_outcome_at_ms > CASE WHEN 3 * cadence_ms > cadence_ms + {OVERDUE_SLACK_MS} \
                 THEN 3 * cadence_ms ELSE cadence_ms + {OVERDUE_SLACK_MS} END \
             THEN 'overdue' \
         WHEN last_outcome IN ('failed', 'timed_out') THEN 'failing' \
         ELSE 'healthy' END"
    )
}
