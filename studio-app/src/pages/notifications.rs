//! A run's notifications as its page shows them: each delivery the run's `notify` rules
//! made (`GET /api/notify/deliveries?run=ID`), with the receiver's last answer and when
//! it was delivered or is next tried (docs/OPERATIONS.md, "Notifications").

use studio_api::{Delivery, DeliveryList, DeliveryStatus};

use super::{Ctx, words};
use crate::daemon::DaemonError;

/// The most characters of a receiver's answer the page shows.
const DETAIL_CHARS: usize = 200;

/// One delivery, ready to print.
#[derive(Debug, Clone)]
pub(crate) struct NotificationRow {
    /// The event in words: "timed out", "succeeded after failure".
    pub(crate) event: String,
    pub(crate) endpoint: String,
    /// `pending`, `delivered` or `dead`.
    pub(crate) status: &'static str,
    pub(crate) attempts: usize,
    /// The receiver's HTTP status at the last attempt, when one answered.
    pub(crate) answer_status: Option<i64>,
    /// The start of its answer, or why nothing answered, in one line (escaped by the
    /// template: it is the receiver's text).
    pub(crate) answer_detail: String,
    pub(crate) delivered: Option<words::Stamp>,
    /// When the next attempt is made, while it is pending.
    pub(crate) next: Option<words::Stamp>,
    /// When the last attempt was made (a dead one's last word).
    pub(crate) last_tried: Option<words::Stamp>,
}

impl NotificationRow {
    pub(crate) fn new(d: &Delivery, ctx: &Ctx) -> Self {
        let last = d.attempts.last();
        let status = match d.status {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Dead => "dead",
        };
        Self {
            event: d.event.replace('_', " "),
            endpoint: d.endpoint.clone(),
            status,
            attempts: d.attempts.len(),
            answer_status: last.and_then(|a| a.status),
            answer_detail: last
                .and_then(|a| Some(one_line(answer_of(a.detail.as_deref()?, a.status))))
                .unwrap_or_default(),
            delivered: words::Stamp::parse(d.delivered_at.as_deref(), ctx.now),
            next: match d.status {
                DeliveryStatus::Pending => {
                    words::Stamp::parse(d.next_attempt_at.as_deref(), ctx.now)
                }
                _ => None,
            },
            last_tried: last.and_then(|a| words::Stamp::parse(Some(&a.at), ctx.now)),
        }
    }

    /// Whether an attempt was made and got no answer worth showing.
    pub(crate) fn unanswered(&self) -> bool {
        self.attempts > 0 && self.answer_status.is_none() && self.answer_detail.is_empty()
    }
}

/// The rows of studiod's answer. The section is an extra: whatever keeps it from being
/// read (a studiod without notifications, a refusal) leaves it out, and never changes
/// the page's state.
pub(crate) fn rows(answer: Result<DeliveryList, DaemonError>, ctx: &Ctx) -> Vec<NotificationRow> {
    match answer {
        Ok(list) => list
            .deliveries
            .iter()
            .map(|d| NotificationRow::new(d, ctx))
            .collect(),
        Err(e) => {
            tracing::debug!(error = %e, "the run's notifications are left out");
            Vec::new()
        }
    }
}

/// What the receiver said, without the `answered 502: ` studiod puts before it (the
/// page shows the status on its own).
fn answer_of(detail: &str, status: Option<i64>) -> &str {
    status
        .and_then(|s| detail.strip_prefix(&format!("answered {s}")))
        .map_or(detail, |rest| rest.trim_start_matches(':').trim_start())
}

/// `s` on one line, control characters as spaces, cut at [`DETAIL_CHARS`].
fn one_line(s: &str) -> String {
    let words: Vec<&str> = s
        .split(|c: char| c.is_control() || c.is_whitespace())
        .filter(|w| !w.is_empty())
        .collect();
    let line = words.join(" ");
    if line.chars().count() <= DETAIL_CHARS {
        return line;
    }
    let mut cut: String = line.chars().take(DETAIL_CHARS - 1).collect();
    cut.push('…');
    cut
}
