//! `GET /api/summary`: what the cockpit's overview shows, in one answer, exact and
//! independent of how many runs are stored — schedule counts by health (one SQL
//! `GROUP BY` over `schedules_health`), the runs of the last 24 hours from the hourly
//! rollup, the active runs (counted, and the newest listed), the newest failures of the
//! last 24 hours, and the next fires (read in the due index's order).

use std::collections::BTreeMap;

use axum::{Json, extract::State};
use studio_api::{
    DaemonFacts, HourCount, LISTED, NextFire, RunCensus, RunListItem, RunStatus, ScheduleCensus,
    Summary, UP_NEXT,
};
use studio_contract::{
    VERSION,
    error::ApiError,
    time::{now_ms, rfc3339},
};

use super::{ApiState, schedules::store_error};
use crate::scheduling::{health::HEALTHS, store::RunFilter};

const HOUR_MS: i64 = 3_600_000;
/// Hourly buckets shown: the current hour and the 23 before it.
const HOURS: i64 = 24;

pub(crate) async fn summary(State(state): State<ApiState>) -> Result<Json<Summary>, ApiError> {
    let store = state.scheduler.reads();
    let now = now_ms();
    let first_hour = now - now.rem_euclid(HOUR_MS) - (HOURS - 1) * HOUR_MS;
    let up_next = i64::try_from(UP_NEXT).unwrap_or(i64::MAX);
    let listed = i64::try_from(LISTED).unwrap_or(i64::MAX);
    let running = RunFilter {
        statuses: vec![RunStatus::Queued, RunStatus::Running],
        limit: listed,
        ..RunFilter::default()
    };
    // One more than listed says whether there are more.
    let failed = RunFilter {
        statuses: vec![RunStatus::Failed, RunStatus::TimedOut],
        since_ms: Some(now - 24 * HOUR_MS),
        limit: listed + 1,
        ..RunFilter::default()
    };
    let (census, counts, active, next, running, failed) = tokio::join!(
        store.health_counts(now),
        store.run_counts_since(first_hour),
        store.active_count(),
        store.up_next(up_next),
        store.list_runs(&running),
        store.list_runs(&failed),
    );
    let item = |r: &crate::scheduling::model::RunRow| RunListItem { core: r.core() };
    let running: Vec<RunListItem> = running.map_err(store_error)?.iter().map(item).collect();
    let failed = failed.map_err(store_error)?;
    let more_failed = failed.len() > LISTED;
    let failed: Vec<RunListItem> = failed.iter().take(LISTED).map(item).collect();
    let up_next = next
        .map_err(store_error)?
        .into_iter()
        .map(|(schedule_id, name, at)| NextFire {
            schedule_id,
            name,
            at: rfc3339(at),
        })
        .collect();
    let census = census.map_err(store_error)?;
    let counts = counts.map_err(store_error)?;
    let active = active.map_err(store_error)?;

    let mut by_health: BTreeMap<String, i64> =
        HEALTHS.iter().map(|h| ((*h).to_owned(), 0)).collect();
    for (health, n) in &census {
        by_health.insert(health.clone(), *n);
    }
    let total: i64 = census.iter().map(|(_, n)| n).sum();

    let mut by_status: BTreeMap<String, i64> = BTreeMap::new();
    let mut hourly: Vec<(i64, i64)> = vec![(0, 0); usize::try_from(HOURS).unwrap_or(24)];
    for (hour, status, n) in &counts {
        let Some(slot) = usize::try_from((hour - first_hour) / HOUR_MS)
            .ok()
            .and_then(|i| hourly.get_mut(i))
        else {
            continue;
        };
        slot.0 += n;
        if matches!(status.as_str(), "failed" | "timed_out") {
            slot.1 += n;
        }
        *by_status.entry(status.clone()).or_default() += n;
    }
    let hours = hourly
        .iter()
        .zip(0..)
        .map(|((total, failed), i)| HourCount {
            hour: rfc3339(first_hour + i * HOUR_MS),
            total: *total,
            failed: *failed,
        })
        .collect();
    let pending_approvals = store.pending_approvals().await.map_err(store_error)?;
    let (running_tasks, waiting_tasks) = store.task_census().await.map_err(store_error)?;
    Ok(Json(Summary {
        pending_approvals,
        tasks: studio_api::TaskCensus {
            running: running_tasks,
            waiting: waiting_tasks,
        },
        as_of: rfc3339(now),
        daemon: DaemonFacts {
            version: VERSION.into(),
            started_at: rfc3339(state.started_at_ms),
            uptime_s: (now - state.started_at_ms).max(0) / 1000,
        },
        schedules: ScheduleCensus {
            total,
            by_health,
            up_next,
        },
        runs: RunCensus {
            active,
            running,
            failed,
            more_failed,
            since: rfc3339(first_hour),
            total: hourly.iter().map(|(t, _)| t).sum::<i64>(),
            by_status,
            hourly: hours,
        },
    }))
}
