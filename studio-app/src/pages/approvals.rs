//! The Approvals page: the requests that wait for a person's decision, soonest to expire
//! first, each with exactly what a grant lets run, who asked, a countdown to its expiry
//! and (for an operator or an admin) Grant and Deny with a reason, which `cockpit.js`
//! sends with the browser's decision token; below, the decided ones, newest first, with
//! a cursor to older ones. Also the rows a run's page shows of its requests and evidence.

use askama::Template;
use axum::{
    extract::{Query, State},
    response::Response,
};
use http::HeaderMap;
use serde::Deserialize;
use studio_api::ApprovalStatus;

use super::{
    Ctx, Nav, render, resolve,
    words::{self, short_id},
};
use crate::{
    approval::{Bound, short_hash},
    daemon::{Approval, EvidenceRow, encode, with_query},
    state::AppState,
};

/// The most pending requests the page lists: studiod's largest page.
const PENDING: usize = 500;
/// Decided requests per page of the history.
const DECIDED: &str = "50";
/// Every status but `pending`: the history's filter.
const DECIDED_STATUSES: &str = "granted,denied,expired,voided,consumed";

/// Who asked for a run or decided it, in words: "the clock", "daemon token", or a
/// browser by its short id ("browser 0a1b2c3d (this browser)").
pub(crate) fn who(principal: Option<&str>, ctx: &Ctx) -> String {
    match principal {
        None => "the clock".into(),
        Some("daemon") => "daemon token".into(),
        Some(p) if ctx.principal.as_deref() == Some(p) => {
            format!("browser {} (this browser)", short_id(p))
        }
        Some(p) => format!("browser {}", short_id(p)),
    }
}

/// One request, ready to print.
#[derive(Debug, Clone)]
pub(crate) struct ApprovalView {
    pub(crate) id: String,
    pub(crate) run_id: String,
    pub(crate) schedule_id: Option<String>,
    pub(crate) schedule_name: Option<String>,
    pub(crate) status: ApprovalStatus,
    /// What a grant lets run; `None` when this version cannot read the binding, which is
    /// then shown as `raw`.
    pub(crate) bound: Option<Bound>,
    pub(crate) raw: String,
    pub(crate) hash: String,
    pub(crate) requester: String,
    /// This browser asked for the run.
    pub(crate) mine: bool,
    /// A browser asked, and may not decide (the clock and the daemon token never decide).
    pub(crate) distinct: bool,
    pub(crate) requested: Option<words::Stamp>,
    pub(crate) expires: Option<words::Stamp>,
    /// The expiry as RFC 3339, which the countdown ticks towards.
    pub(crate) expires_at: String,
    /// The time left as the page was rendered ("14 min 59 s left", "expired").
    pub(crate) left: String,
    /// Past its expiry as the page was rendered.
    pub(crate) expired: bool,
    pub(crate) decider: Option<String>,
    pub(crate) decided_role: Option<&'static str>,
    pub(crate) decided_origin: Option<String>,
    pub(crate) decided: Option<words::Stamp>,
    pub(crate) reason: String,
}

impl ApprovalView {
    pub(crate) fn new(a: &Approval, ctx: &Ctx) -> Self {
        let expires = words::Stamp::parse(Some(&a.expires_at), ctx.now);
        let secs = expires.map_or(0, |e| e.secs_from_now());
        Self {
            id: a.id.clone(),
            run_id: a.run_id.clone(),
            schedule_id: a.schedule_id.clone(),
            schedule_name: a.schedule_name.clone(),
            status: a.status,
            bound: Bound::read(&a.action),
            raw: serde_json::to_string_pretty(&a.action).unwrap_or_default(),
            hash: a.action_sha256.clone(),
            requester: who(a.requested_by.as_deref(), ctx),
            mine: a.requested_by.is_some() && a.requested_by == ctx.principal,
            distinct: a.distinct_from_requester
                && a.requested_by.as_deref().is_some_and(|p| p != "daemon"),
            requested: words::Stamp::parse(Some(&a.requested_at), ctx.now),
            expires,
            expires_at: a.expires_at.clone(),
            left: words::countdown(secs),
            expired: secs <= 0,
            decider: a.decided_by.as_deref().map(|p| who(Some(p), ctx)),
            decided_role: a.decided_role.map(|r| r.as_str()),
            decided_origin: a.decided_origin.clone(),
            decided: words::Stamp::parse(a.decided_at.as_deref(), ctx.now),
            reason: a.reason.clone().unwrap_or_default(),
        }
    }

    pub(crate) fn pending(&self) -> bool {
        self.status == ApprovalStatus::Pending
    }

    /// Still waiting, and not yet past its expiry (studiod sweeps expired ones shortly).
    pub(crate) fn open(&self) -> bool {
        self.pending() && !self.expired
    }

    /// The countdown's tooltip: the instant it counts to.
    pub(crate) fn expires_title(&self) -> String {
        self.expires
            .map_or_else(String::new, |e| format!("expires {} UTC", e.utc()))
    }

    /// `POST` here grants it (`decision` `grant`) or denies it (`deny`).
    pub(crate) fn decide_url(&self, decision: &str) -> String {
        format!("/api/approvals/{}/{decision}", encode(&self.id))
    }

    /// Its status in words.
    pub(crate) fn status_words(&self) -> &'static str {
        match self.status {
            ApprovalStatus::Pending => "waiting for a decision",
            ApprovalStatus::Granted => "granted",
            ApprovalStatus::Consumed => "granted, its run launched",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired without a decision",
            ApprovalStatus::Voided => "voided: what it would run changed",
        }
    }

    pub(crate) fn short_hash(&self) -> &str {
        short_hash(&self.hash)
    }

    pub(crate) fn run_short(&self) -> &str {
        short_id(&self.run_id)
    }

    pub(crate) fn run_href(&self) -> String {
        format!("/runs/{}", encode(&self.run_id))
    }

    pub(crate) fn schedule_href(&self) -> Option<String> {
        self.schedule_id
            .as_deref()
            .map(|id| format!("/schedules/{}", encode(id)))
    }

    /// Its schedule's name, else "—" (a schedule gone before names were kept).
    pub(crate) fn name(&self) -> &str {
        self.schedule_name.as_deref().unwrap_or("—")
    }

    /// Where it is decided: its card on the Approvals page.
    pub(crate) fn decide_href(&self) -> String {
        format!("/approvals#approval-{}", encode(&self.id))
    }
}

/// One evidence row of a run, ready to print.
#[derive(Debug, Clone)]
pub(crate) struct EvidenceView {
    pub(crate) seq: i64,
    pub(crate) kind: String,
    pub(crate) at: Option<words::Stamp>,
    pub(crate) chain: String,
}

impl EvidenceView {
    pub(crate) fn new(e: &EvidenceRow, ctx: &Ctx) -> Self {
        Self {
            seq: e.seq,
            kind: e.kind.clone(),
            at: words::Stamp::from_ms(e.at_ms, ctx.now),
            chain: e.chain_sha256.clone(),
        }
    }

    pub(crate) fn short_chain(&self) -> &str {
        short_hash(&self.chain)
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ApprovalsQuery {
    /// The history's cursor.
    #[serde(default)]
    pub(crate) cursor: String,
}

#[derive(Template)]
#[template(path = "approvals.html")]
pub(crate) struct ApprovalsPage {
    pub(crate) ctx: Ctx,
    /// Soonest to expire first.
    pub(crate) pending: Vec<ApprovalView>,
    /// More are pending than are listed.
    pub(crate) more_pending: bool,
    /// Newest first.
    pub(crate) decided: Vec<ApprovalView>,
    pub(crate) query: ApprovalsQuery,
    pub(crate) next: Option<String>,
}

impl ApprovalsPage {
    pub(crate) fn new(ctx: Ctx, query: ApprovalsQuery) -> Self {
        Self {
            ctx,
            pending: Vec::new(),
            more_pending: false,
            decided: Vec::new(),
            query,
            next: None,
        }
    }

    pub(crate) fn next_href(&self) -> Option<String> {
        let cursor = self.next.as_deref()?;
        Some(with_query("/approvals", &[("cursor", cursor)]))
    }
}

#[tracing::instrument(skip_all)]
pub(crate) async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<ApprovalsQuery>,
) -> Response {
    let (mut ctx, paired) = resolve(&state, &headers, "/api/approvals", Nav::Approvals).await;
    let mut page = ApprovalsPage::new(ctx.clone(), query);
    if let Some(p) = paired {
        let daemon = p.daemon(&state);
        let limit = PENDING.to_string();
        let pending = [("status", "pending"), ("limit", limit.as_str())];
        let decided = [
            ("status", DECIDED_STATUSES),
            ("limit", DECIDED),
            ("cursor", page.query.cursor.as_str()),
        ];
        let (pending, decided) =
            tokio::join!(daemon.approvals(&pending), daemon.approvals(&decided));
        match pending {
            Ok(list) => {
                page.more_pending = list.next_cursor.is_some();
                let mut views: Vec<ApprovalView> = list
                    .approvals
                    .iter()
                    .map(|a| ApprovalView::new(a, &ctx))
                    .collect();
                // RFC 3339 in UTC, as studiod writes every instant: text order is time order.
                views.sort_by(|a, b| a.expires_at.cmp(&b.expires_at));
                page.pending = views;
            }
            Err(e) => ctx.fail(&e),
        }
        match decided {
            Ok(list) => {
                page.decided = list
                    .approvals
                    .iter()
                    .map(|a| ApprovalView::new(a, &ctx))
                    .collect();
                page.next = list.next_cursor;
            }
            Err(e) => ctx.fail(&e),
        }
        page.ctx = ctx;
    }
    render(&page)
}

#[cfg(test)]
#[path = "approvals_tests.rs"]
mod tests;
