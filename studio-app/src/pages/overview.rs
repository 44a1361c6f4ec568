//! Overview (daemon identity, schedule health counts, runs of the last 24 h as an inline
//! SVG bar chart), the attention page shell, and Devices (paired browsers).

use std::collections::BTreeMap;

use askama::Template;
use axum::{extract::State, response::Response};
use http::HeaderMap;
use jiff::{SignedDuration, Timestamp};

use super::{Ctx, Nav, render, resolve, words};
use crate::{
    daemon::{Run, Session},
    http::AppState,
};

/// One hour's bar in the 24 h chart (`x`, `height` in SVG units).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bar {
    pub(crate) x: u32,
    pub(crate) y: u32,
    pub(crate) height: u32,
    pub(crate) failed_height: u32,
    pub(crate) failed_y: u32,
    pub(crate) label: String,
}

/// Chart height in SVG units.
const CHART_H: u32 = 60;

/// Hourly buckets of runs created in the 24 h before `now` (oldest first); failures
/// (failed, timed out) are drawn as their own segment.
pub(crate) fn hourly(runs: &[Run], now: Timestamp) -> Vec<Bar> {
    let mut total = [0u32; 24];
    let mut failed = [0u32; 24];
    for r in runs {
        let Some(at) = r
            .created_at
            .as_deref()
            .and_then(|t| t.parse::<Timestamp>().ok())
        else {
            continue;
        };
        let ago = now.as_second() - at.as_second();
        if !(0..86_400).contains(&ago) {
            continue;
        }
        let slot = 23 - usize::try_from(ago / 3600).unwrap_or(0);
        total[slot] += 1;
        if matches!(r.status.as_str(), "failed" | "timed_out") {
            failed[slot] += 1;
        }
    }
    let max = total.iter().copied().max().unwrap_or(0).max(1);
    (0..24)
        .map(|i| {
            let height = total[i] * CHART_H / max;
            let failed_height = failed[i] * CHART_H / max;
            Bar {
                x: u32::try_from(i).unwrap_or(0) * 10,
                y: CHART_H - height,
                height,
                failed_height,
                failed_y: CHART_H - failed_height,
                label: format!("{} h ago: {} runs, {} failed", 23 - i, total[i], failed[i]),
            }
        })
        .collect()
}

#[derive(Template)]
#[template(path = "overview.html")]
pub(crate) struct OverviewPage {
    pub(crate) ctx: Ctx,
    pub(crate) version: String,
    /// Schedule counts by health, over the first page of schedules.
    pub(crate) health: Vec<(String, usize)>,
    pub(crate) schedules_more: bool,
    pub(crate) runs_by_status: Vec<(String, usize)>,
    pub(crate) runs_total: usize,
    pub(crate) bars: Vec<Bar>,
}

fn counts<'a>(items: impl Iterator<Item = &'a str>) -> Vec<(String, usize)> {
    let mut m: BTreeMap<String, usize> = BTreeMap::new();
    for i in items {
        *m.entry(i.to_owned()).or_default() += 1;
    }
    m.into_iter().collect()
}

#[tracing::instrument(skip_all)]
pub(crate) async fn overview(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/identity", Nav::Overview).await;
    let mut page = OverviewPage {
        ctx: ctx.clone(),
        version: "—".into(),
        health: Vec::new(),
        schedules_more: false,
        runs_by_status: Vec::new(),
        runs_total: 0,
        bars: hourly(&[], ctx.now),
    };
    if let Some(p) = paired {
        let daemon = p.daemon(&state);
        let since = (ctx.now - SignedDuration::from_hours(24)).to_string();
        // Three calls, concurrently; the run list is one page (enough for a glance).
        let schedule_query = [("limit", "500")];
        let run_query = [("since", since.as_str()), ("limit", "500")];
        let (identity, schedules, runs) = tokio::join!(
            daemon.identity(),
            daemon.schedules(&schedule_query),
            daemon.runs(&run_query),
        );
        match identity {
            Ok(id) => {
                page.version = id
                    .get("version")
                    .and_then(|v| v.as_str())
                    .unwrap_or("—")
                    .to_owned();
            }
            Err(e) => ctx.fail(&e),
        }
        match schedules {
            Ok(s) => {
                page.health = counts(s.schedules.iter().map(|s| s.health.as_str()));
                page.schedules_more = s.next_cursor.is_some();
            }
            Err(e) => ctx.fail(&e),
        }
        match runs {
            Ok(r) => {
                page.runs_total = r.runs.len();
                page.runs_by_status = counts(r.runs.iter().map(|r| r.status.as_str()));
                page.bars = hourly(&r.runs, ctx.now);
            }
            Err(e) => ctx.fail(&e),
        }
        page.ctx = ctx;
    }
    render(&page)
}

/// The attention queue is rendered client-side from `/api/app/attention` (its own module
/// owns the data); the server renders the shell and the page state.
#[derive(Template)]
#[template(path = "attention.html")]
pub(crate) struct AttentionPage {
    pub(crate) ctx: Ctx,
}

pub(crate) async fn attention(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let (ctx, _) = resolve(&state, &headers, "/api/app/attention", Nav::Attention).await;
    render(&AttentionPage { ctx })
}

#[derive(Debug, Clone)]
pub(crate) struct DeviceRow {
    pub(crate) id: String,
    pub(crate) origin: String,
    pub(crate) created: Option<words::Stamp>,
    pub(crate) last_seen: Option<words::Stamp>,
    pub(crate) revoked: bool,
    pub(crate) current: bool,
}

impl DeviceRow {
    pub(crate) fn new(s: &Session, now: Timestamp) -> Self {
        Self {
            id: s.id.clone(),
            origin: s.origin.clone(),
            created: words::Stamp::parse(s.created_at.as_deref(), now),
            last_seen: words::Stamp::parse(s.last_seen_at.as_deref(), now),
            revoked: s.revoked_at.is_some(),
            current: s.current,
        }
    }
}

#[derive(Template)]
#[template(path = "devices.html")]
pub(crate) struct DevicesPage {
    pub(crate) ctx: Ctx,
    pub(crate) devices: Vec<DeviceRow>,
}

#[tracing::instrument(skip_all)]
pub(crate) async fn devices(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/studio/sessions", Nav::Devices).await;
    let mut page = DevicesPage {
        ctx: ctx.clone(),
        devices: Vec::new(),
    };
    if let Some(p) = paired {
        match p.daemon(&state).sessions().await {
            Ok(s) => {
                page.devices = s
                    .sessions
                    .iter()
                    .map(|s| DeviceRow::new(s, ctx.now))
                    .collect();
            }
            Err(e) => ctx.fail(&e),
        }
        page.ctx = ctx;
    }
    render(&page)
}
