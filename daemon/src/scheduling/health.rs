//! A schedule's health, derived (never stored): `disabled`, `never-fired`, `no-evidence`,
//! `overdue`, `failing` or `healthy`.

use studio_schedule::Armed;

use super::model::{RunRow, RunStatus, ScheduleRow};

/// Overdue when the last evidence is older than max(3 × cadence, cadence + 300 s).
pub(crate) fn health(
    row: &ScheduleRow,
    armed: Option<&Armed>,
    any_run: bool,
    last: Option<&RunRow>,
    now: i64,
) -> &'static str {
    if !row.enabled {
        return "disabled";
    }
    if !any_run && row.last_fired_at_ms.is_none() {
        return "never-fired";
    }
    let Some(last) = last else {
        return "no-evidence";
    };
    let evidence = last.finished_at_ms.unwrap_or(last.created_at_ms);
    let cadence = armed.and_then(|a| a.cadence_ms(now, row.anchor_ms));
    if let Some(c) = cadence
        && row.next_fire_at_ms.is_some()
        && now - evidence > (3 * c).max(c + 300_000)
    {
        return "overdue";
    }
    if matches!(last.status(), Some(RunStatus::Failed | RunStatus::TimedOut)) {
        return "failing";
    }
    "healthy"
}
