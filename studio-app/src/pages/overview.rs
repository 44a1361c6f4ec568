//! Overview, the cockpit's home page: what is running now (with its elapsed time and a
//! cancel button), what failed in the last 24 h (with why), how many runs wait for a
//! person's approval, what fires next, schedule health counts and the runs of the last
//! 24 h as an inline SVG bar chart (each bar opens its hour's runs), how many tasks run
//! and wait; the daemon's version and epoch out of the way below. Also the attention
//! page shell, and Devices (paired browsers).

use askama::Template;
use axum::{extract::State, response::Response};
use http::HeaderMap;
use jiff::Timestamp;

use studio_api::RunListItem;

use super::{
    Ctx, Nav, render, resolve, runs::RunRow, schedules::HEALTHS, tasks::TaskCounts, words,
};
use crate::{
    daemon::{HourCount, Session, Summary, encode, with_query},
    state::AppState,
};

/// A fire to come, ready to print.
#[derive(Debug, Clone)]
pub(crate) struct UpNext {
    pub(crate) name: String,
    pub(crate) href: String,
    pub(crate) at: Option<words::Stamp>,
}

/// One hour's bar in the 24 h chart (`x`, `height` in SVG units).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bar {
    pub(crate) x: u32,
    pub(crate) y: u32,
    pub(crate) height: u32,
    pub(crate) failed_height: u32,
    pub(crate) failed_y: u32,
    pub(crate) label: String,
    /// The runs created in that hour.
    pub(crate) href: String,
}

/// Chart height in SVG units.
const CHART_H: u32 = 60;

/// Bars for the daemon's hourly counts (oldest first; failures, i.e. failed and timed
/// out, drawn as their own segment), each labelled with its UTC hour.
pub(crate) fn bars(hours: &[HourCount]) -> Vec<Bar> {
    let max = hours.iter().map(|h| h.total).max().unwrap_or(0).max(1);
    // In [0, CHART_H]: a count is at most `max`.
    let scaled = |n: i64| u32::try_from(n.clamp(0, max) * i64::from(CHART_H) / max).unwrap_or(0);
    hours
        .iter()
        .zip(0u32..)
        .map(|(h, i)| {
            let height = scaled(h.total);
            let failed_height = scaled(h.failed.min(h.total));
            let start = h.hour.parse::<Timestamp>().ok();
            let hour =
                start.map_or_else(|| h.hour.clone(), |t| t.strftime("%H:00 UTC").to_string());
            let href = start.map_or_else(
                || "/runs".to_owned(),
                |t| {
                    let end = t + jiff::SignedDuration::from_hours(1);
                    with_query(
                        "/runs",
                        &[("since", &t.to_string()), ("until", &end.to_string())],
                    )
                },
            );
            Bar {
                x: i * 10,
                y: CHART_H - height,
                height,
                failed_height,
                failed_y: CHART_H - failed_height,
                label: format!("from {hour}: {} runs, {} failed", h.total, h.failed),
                href,
            }
        })
        .collect()
}

#[derive(Template)]
#[template(path = "overview.html")]
pub(crate) struct OverviewPage {
    pub(crate) ctx: Ctx,
    pub(crate) version: String,
    /// How long the daemon has been up, and since when.
    pub(crate) uptime: Option<(String, words::Stamp)>,
    /// Schedule counts by health (non-zero only), worst first.
    pub(crate) health: Vec<(String, i64)>,
    pub(crate) schedules_total: i64,
    pub(crate) runs_by_status: Vec<(String, i64)>,
    pub(crate) runs_total: i64,
    pub(crate) runs_active: i64,
    pub(crate) bars: Vec<Bar>,
    /// Queued and running runs, newest first.
    pub(crate) running: Vec<RunRow>,
    /// Runs that failed or timed out in the last 24 h, newest first.
    pub(crate) failed: Vec<RunRow>,
    /// Whether more failed than are listed.
    pub(crate) more_failed: bool,
    /// The next fires, soonest first.
    pub(crate) up_next: Vec<UpNext>,
    /// Approval requests waiting for a person's decision.
    pub(crate) pending_approvals: i64,
    /// The tasks that run and wait (`None`: studiod did not say).
    pub(crate) tasks: Option<TaskCounts>,
}

impl OverviewPage {
    pub(crate) fn new(ctx: Ctx) -> Self {
        Self {
            ctx,
            version: "—".into(),
            uptime: None,
            health: Vec::new(),
            schedules_total: 0,
            runs_by_status: Vec::new(),
            runs_total: 0,
            runs_active: 0,
            bars: Vec::new(),
            running: Vec::new(),
            failed: Vec::new(),
            more_failed: false,
            up_next: Vec::new(),
            pending_approvals: 0,
            tasks: None,
        }
    }

    /// The address of the failures of the last 24 h.
    pub(crate) fn failed_href(&self) -> &'static str {
        "/runs?status=failed&status=timed_out&window=24h"
    }

    /// Fills the numbers from the daemon's summary.
    pub(crate) fn with_summary(mut self, s: &Summary) -> Self {
        self.tasks = Some(TaskCounts::of(&s.tasks));
        self.uptime = words::Stamp::parse(Some(&s.daemon.started_at), self.ctx.now).map(|since| {
            (
                words::human_secs(u64::try_from(s.daemon.uptime_s).unwrap_or(0)),
                since,
            )
        });
        let c = &s.schedules.by_health;
        self.health = HEALTHS
            .iter()
            .filter_map(|h| c.get(*h).filter(|n| **n > 0).map(|n| ((*h).to_owned(), *n)))
            .collect();
        self.schedules_total = s.schedules.total;
        self.runs_by_status = s
            .runs
            .by_status
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| (k.clone(), *n))
            .collect();
        self.runs_total = s.runs.total;
        self.runs_active = s.runs.active;
        self.bars = bars(&s.runs.hourly);
        self.version = s.daemon.version.clone();
        self.pending_approvals = s.pending_approvals;
        let rows = |runs: &[RunListItem]| -> Vec<RunRow> {
            runs.iter().map(|r| RunRow::list(r, &self.ctx)).collect()
        };
        self.running = rows(&s.runs.running);
        self.failed = rows(&s.runs.failed);
        self.more_failed = s.runs.more_failed;
        self.up_next = s
            .schedules
            .up_next
            .iter()
            .map(|n| UpNext {
                name: n.name.clone(),
                href: format!("/schedules/{}", encode(&n.schedule_id)),
                at: words::Stamp::parse(Some(&n.at), self.ctx.now),
            })
            .collect();
        self
    }
}

/// One call: the daemon's summary (its tasks' census included).
#[tracing::instrument(skip_all)]
pub(crate) async fn overview(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/summary", Nav::Overview).await;
    let mut page = OverviewPage::new(ctx.clone());
    if let Some(p) = paired {
        match p.daemon(&state).summary().await {
            Ok(s) => page = page.with_summary(&s),
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
    pub(crate) role: &'static str,
    /// "Firefox 133 on Windows", or "unknown browser".
    pub(crate) device: String,
    pub(crate) origin: String,
    pub(crate) created: Option<words::Stamp>,
    pub(crate) last_seen: Option<words::Stamp>,
    pub(crate) expires: Option<words::Stamp>,
    /// Past its expiry: the daemon refuses it, so there is nothing left to revoke.
    pub(crate) expired: bool,
    pub(crate) revoked: bool,
    pub(crate) current: bool,
}

impl DeviceRow {
    pub(crate) fn new(s: &Session, now: Timestamp) -> Self {
        Self {
            id: s.id.clone(),
            role: s.role.as_str(),
            device: s.device.clone().unwrap_or_else(|| "unknown browser".into()),
            origin: s.origin.clone(),
            created: words::Stamp::parse(Some(&s.created_at), now),
            last_seen: words::Stamp::parse(Some(&s.last_seen_at), now),
            expires: words::Stamp::parse(Some(&s.expires_at), now),
            expired: s.expires_at.parse::<Timestamp>().is_ok_and(|t| t <= now),
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
