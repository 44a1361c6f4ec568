//! The attention queue, derived: a pure function from studiod's failed and timed-out runs,
//! its failing or overdue schedules, the approval requests waiting for a decision, the
//! operators' dispositions and "now" to the items that need a person, each with the
//! disposition that applies to it.
//!
//! Invariant: deriving reads its inputs only — it never changes a run's or a schedule's
//! own status, which stays the honest record of what happened.

use std::collections::HashMap;

/// What an operator decided about one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Acknowledged,
    Resolved,
    Expected,
    Snoozed,
}

impl State {
    pub(crate) const ALL: &[State] = &[
        State::Acknowledged,
        State::Resolved,
        State::Expected,
        State::Snoozed,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            State::Acknowledged => "acknowledged",
            State::Resolved => "resolved",
            State::Expected => "expected",
            State::Snoozed => "snoozed",
        }
    }

    /// The API's word for it.
    pub(crate) fn wire(self) -> studio_api::app::Decision {
        use studio_api::app::Decision;
        match self {
            State::Acknowledged => Decision::Acknowledged,
            State::Resolved => Decision::Resolved,
            State::Expected => Decision::Expected,
            State::Snoozed => Decision::Snoozed,
        }
    }

    pub(crate) fn parse(s: &str) -> Option<State> {
        State::ALL.iter().copied().find(|st| st.as_str() == s)
    }
}

/// An active disposition as derivation sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Disposition {
    pub(crate) state: State,
    pub(crate) reason: String,
    pub(crate) until_ms: Option<i64>,
    /// The newest failure instant the decision covered.
    pub(crate) covers_ms: i64,
    pub(crate) revision: i64,
    pub(crate) principal_id: String,
    pub(crate) at_ms: i64,
}

/// A failed or timed-out run, as read from studiod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunFact {
    pub(crate) id: String,
    pub(crate) schedule_id: Option<String>,
    /// The name the run ran under.
    pub(crate) schedule_name: Option<String>,
    pub(crate) status: String,
    /// How it ended, in words.
    pub(crate) outcome: String,
    /// Why it failed, in one line.
    pub(crate) error_line: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) exit_code: Option<i64>,
    pub(crate) created_at_ms: i64,
    pub(crate) finished_at_ms: Option<i64>,
}

impl RunFact {
    /// When the failure happened: its finish, else (never finished cleanly) its creation.
    fn at_ms(&self) -> i64 {
        self.finished_at_ms.unwrap_or(self.created_at_ms)
    }
}

/// A schedule, as read from studiod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScheduleFact {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) health: String,
    pub(crate) last_outcome: Option<String>,
    pub(crate) last_fired_at_ms: Option<i64>,
}

/// A request waiting for a person's decision, as read from studiod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalFact {
    pub(crate) id: String,
    /// The run that waits for it.
    pub(crate) run_id: String,
    pub(crate) schedule_id: Option<String>,
    pub(crate) schedule_name: Option<String>,
    /// What a grant lets run, in one line.
    pub(crate) what: String,
    pub(crate) requested_at_ms: i64,
    pub(crate) expires_at_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Run,
    Sched,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Run => "run",
            Kind::Sched => "sched",
        }
    }
}

/// One derived item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) id: String,
    pub(crate) kind: Kind,
    pub(crate) title: String,
    pub(crate) detail: String,
    pub(crate) since_ms: i64,
    pub(crate) link: String,
    /// The newest instant of evidence behind the item; a disposition that covered an older
    /// instant no longer hides it.
    pub(crate) evidence_ms: i64,
    pub(crate) disposition: Option<Disposition>,
    /// Whether the disposition currently takes the item out of the queue.
    pub(crate) hidden: bool,
    /// The schedule it is about: id and name, when known.
    pub(crate) schedule_id: Option<String>,
    pub(crate) schedule_name: Option<String>,
}

/// A run id or schedule id as an item id; `None` when `id` names neither kind.
pub(crate) fn parse_item_id(id: &str) -> Option<(Kind, &str)> {
    let (kind, rest) = id.split_once(':')?;
    let kind = match kind {
        "run" => Kind::Run,
        "sched" => Kind::Sched,
        _ => return None,
    };
    let plausible = !rest.is_empty()
        && rest.len() <= 200
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    plausible.then_some((kind, rest))
}

/// Whether `d` takes an item with evidence up to `evidence_ms` out of the queue at `now_ms`.
///
/// A snooze holds until its `until` whatever happens meanwhile (that is what it was asked
/// for); the other states hold until a failure newer than the one they covered.
pub(crate) fn hides(d: &Disposition, evidence_ms: i64, now_ms: i64) -> bool {
    match d.state {
        State::Snoozed => d.until_ms.is_some_and(|until| now_ms < until),
        State::Acknowledged | State::Resolved | State::Expected => evidence_ms <= d.covers_ms,
    }
}

/// Every item, hidden ones included (flagged), newest evidence first.
pub(crate) fn derive(
    runs: &[RunFact],
    schedules: &[ScheduleFact],
    approvals: &[ApprovalFact],
    dispositions: &HashMap<String, Disposition>,
    now_ms: i64,
) -> Vec<Item> {
    let names: HashMap<&str, &str> = schedules
        .iter()
        .map(|s| (s.id.as_str(), s.name.as_str()))
        .collect();
    let mut latest_failure: HashMap<&str, i64> = HashMap::new();
    let mut items = Vec::new();
    for run in runs.iter().filter(|r| counts_as_failure(r)) {
        if let Some(sid) = run.schedule_id.as_deref() {
            let at = latest_failure.entry(sid).or_insert(run.at_ms());
            *at = (*at).max(run.at_ms());
        }
        items.push(run_item(run, &names));
    }
    for schedule in schedules {
        if let Some(item) = schedule_item(schedule, latest_failure.get(schedule.id.as_str())) {
            items.push(item);
        }
    }
    // A request past its expiry can no longer be decided (studiod ends its run shortly);
    // a run is one item, whichever way it was read.
    for approval in approvals.iter().filter(|a| now_ms < a.expires_at_ms) {
        let item = approval_item(approval, &names);
        if !items.iter().any(|i| i.id == item.id) {
            items.push(item);
        }
    }
    for item in &mut items {
        item.disposition = dispositions.get(&item.id).cloned();
        item.hidden = item
            .disposition
            .as_ref()
            .is_some_and(|d| hides(d, item.evidence_ms, now_ms));
    }
    items.sort_by(|a, b| b.evidence_ms.cmp(&a.evidence_ms).then(a.id.cmp(&b.id)));
    items
}

/// Failed and timed-out runs, except the daemon's own bookkeeping: a run tombstoned as
/// `never_dispatched` was replaced by a fresh run of the same occurrence and never ran.
fn counts_as_failure(run: &RunFact) -> bool {
    matches!(run.status.as_str(), "failed" | "timed_out")
        && run.reason.as_deref() != Some("never_dispatched")
}

fn run_item(run: &RunFact, names: &HashMap<&str, &str>) -> Item {
    let what = if run.status == "timed_out" {
        "timed out"
    } else {
        "failed"
    };
    let name = run.schedule_name.as_deref().or_else(|| {
        run.schedule_id
            .as_deref()
            .and_then(|s| names.get(s).copied())
    });
    let title = match name {
        Some(name) => format!("{name}: run {what}"),
        None => format!("run {what}"),
    };
    // The outcome, and the line that says why unless the outcome already quotes it.
    let detail = match run.error_line.as_deref() {
        Some(line) if !run.outcome.contains(line) => format!("{}: {line}", run.outcome),
        _ => run.outcome.clone(),
    };
    Item {
        id: format!("run:{}", run.id),
        kind: Kind::Run,
        title,
        detail,
        since_ms: run.at_ms(),
        link: format!("/runs/{}", run.id),
        evidence_ms: run.at_ms(),
        disposition: None,
        hidden: false,
        schedule_id: run.schedule_id.clone(),
        schedule_name: name.map(str::to_owned),
    }
}

/// A run waiting for a person's grant, as a run item: its evidence is the request, and
/// it links to where the request is decided.
fn approval_item(a: &ApprovalFact, names: &HashMap<&str, &str>) -> Item {
    let name = a
        .schedule_name
        .as_deref()
        .or_else(|| a.schedule_id.as_deref().and_then(|s| names.get(s).copied()));
    let title = match name {
        Some(name) => format!("{name}: run awaits approval"),
        None => String::from("run awaits approval"),
    };
    let expires = jiff::Timestamp::from_millisecond(a.expires_at_ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default();
    Item {
        id: format!("run:{}", a.run_id),
        kind: Kind::Run,
        title,
        detail: format!("{} · decide before {expires}", a.what),
        since_ms: a.requested_at_ms,
        link: format!("/approvals#approval-{}", a.id),
        evidence_ms: a.requested_at_ms,
        disposition: None,
        hidden: false,
        schedule_id: a.schedule_id.clone(),
        schedule_name: name.map(str::to_owned),
    }
}

/// A failing or overdue schedule. Its evidence is its newest failure; an overdue one also
/// counts its last fire, so a schedule that fired, recovered and went quiet again is a
/// new episode rather than the one already decided.
fn schedule_item(s: &ScheduleFact, latest_failure: Option<&i64>) -> Option<Item> {
    let failure = latest_failure.copied();
    let (title, since_ms, evidence_ms) = match s.health.as_str() {
        "failing" => {
            let since = failure.or(s.last_fired_at_ms).unwrap_or(0);
            (format!("{} is failing", s.name), since, since)
        }
        "overdue" => {
            let since = s.last_fired_at_ms.unwrap_or(0);
            let evidence = failure.unwrap_or(0).max(since);
            (format!("{} is overdue", s.name), since, evidence)
        }
        _ => return None,
    };
    let detail = match &s.last_outcome {
        Some(outcome) => format!("last outcome {outcome}"),
        None => String::from("no finished run"),
    };
    Some(Item {
        id: format!("sched:{}", s.id),
        kind: Kind::Sched,
        title,
        detail,
        since_ms,
        link: format!("/schedules/{}", s.id),
        evidence_ms,
        disposition: None,
        hidden: false,
        schedule_id: Some(s.id.clone()),
        schedule_name: Some(s.name.clone()),
    })
}

#[cfg(test)]
#[path = "derive_tests.rs"]
mod tests;
