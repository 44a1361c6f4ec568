//! Leadership: which studiod of those sharing a database schedules (docs/FLEETS.md,
//! "Leadership and terms").
//!
//! Every studiod is a member: it serves the API, the verifier and workers, and runs the
//! runs it claims or is granted. One member, the leader, also fires schedules and runs the
//! cluster-wide loops (retries of occurrences, approval expiry, the lease reaper,
//! notification delivery, retention, pruning). It leads in a **term**, taken when it
//! becomes leader; every fire and retry claim checks that term in its own statement.
//!
//! - SQLite: the home's lock already makes this studiod the only one; it takes a new
//!   term at start and leads until it stops.
//! - PostgreSQL: a member leads while it holds the advisory lock on a session of its
//!   own ([`LeaderSession`]), which it pings four times a silence; the session asks the server
//!   to end it after `failover − 2 ×` [`POLL`] of silence, so a leader that is killed,
//!   frozen (SIGSTOP) or cut off loses the lock within that time, and a follower, trying
//!   every [`POLL`], leads within the failover budget. A leader whose ping fails steps
//!   down at once; whatever it still tries to fire carries its old term and is refused.
//!
//! `Scheduler::leader` watches the term whose lock this studiod holds; once it has taken
//! office with it (armed every schedule, extended remote leases) `Scheduler::office`
//! names the term: [`Scheduler::term`] reads it, and [`Scheduler::while_leading`] runs a
//! loop only while it is set.

use std::{future::Future, sync::Arc, time::Duration};

use studio_contract::time::now_ms;
use tokio::sync::watch;

use super::{
    Scheduler,
    store::{LeaderSession, NewMember},
};
use crate::error::chain;

/// How often a follower tries the lock, and a member beats its heartbeat.
pub(super) const POLL: Duration = Duration::from_secs(1);
/// The leader pings its session four times within the silence that ends it, never more
/// often than this.
const MIN_PING: Duration = Duration::from_millis(100);

impl Scheduler {
    /// The term this studiod leads in, if it leads now (has taken office).
    pub(crate) fn term(&self) -> Option<i64> {
        *self.office.borrow()
    }

    /// How soon another member leads once the leader is gone or silent.
    pub(crate) fn failover(&self) -> Duration {
        self.config.failover
    }

    /// Joins the cluster, then leads or waits to lead until studiod stops, then leaves.
    pub(super) async fn campaign_forever(self: Arc<Self>) {
        let joined = NewMember {
            host: host_name(),
            pid: std::process::id(),
            addr: self.config.addr.clone(),
            started_at_ms: now_ms(),
        };
        if let Err(error) = self.store.join(&joined).await {
            tracing::error!(error = %chain(&error), "cannot record this member");
        }
        match self.store.shared_url().cloned() {
            None => self.lead_alone().await,
            Some(url) => self.campaign(&url).await,
        }
        if let Err(error) = self.store.leave(now_ms()).await {
            tracing::warn!(error = %chain(&error), "cannot record this member's stop");
        }
    }

    /// SQLite: takes a term and leads until the stop.
    async fn lead_alone(&self) {
        loop {
            match self.store.take_term(now_ms()).await {
                Ok(term) => {
                    self.leader.send_replace(Some(term));
                    break;
                }
                Err(error) => {
                    tracing::error!(error = %chain(&error), "cannot take a term; again in 1 s");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = self.stop.triggered() => return,
            }
        }
        self.stop.triggered().await;
        self.leader.send_replace(None);
    }

    /// PostgreSQL: tries the lock every [`POLL`] until it holds it, leads while its
    /// session answers, and tries again once it does not.
    async fn campaign(&self, url: &studio_store::DatabaseUrl) {
        let silence = self.config.failover.saturating_sub(2 * POLL).max(POLL);
        let mut session: Option<LeaderSession> = None;
        loop {
            if let Err(error) = self.store.heartbeat(now_ms()).await {
                tracing::warn!(error = %chain(&error), "cannot record this member's heartbeat");
            }
            let tried = match session.take() {
                Some(s) => Ok(s),
                None => LeaderSession::connect(url).await,
            };
            match tried {
                Ok(mut s) => match s.try_lead(silence, self.store.member(), now_ms()).await {
                    Ok(Some(term)) => {
                        if self.lead(s, term, silence).await {
                            return;
                        }
                    }
                    Ok(None) => session = Some(s),
                    Err(error) => {
                        tracing::warn!(error = %chain(&error), "cannot try the leader's lock");
                    }
                },
                Err(error) => {
                    tracing::warn!(error = %chain(&error), "cannot open the leader's session");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = self.stop.triggered() => return,
            }
        }
    }

    /// Leads in `term` while `session` answers its pings; true when studiod stopped (the
    /// lock is given up at once, for the next member to take). Pings come four times
    /// within `silence`, and carry the heartbeat each [`POLL`]: nothing else shares the
    /// session, so no other work can hold a ping back until the server ends it.
    async fn lead(&self, mut session: LeaderSession, term: i64, silence: Duration) -> bool {
        tracing::info!(term, "leading");
        self.leader.send_replace(Some(term));
        let every = (silence / 4).max(MIN_PING);
        let mut beat = tokio::time::Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = self.stop.triggered() => {
                    self.leader.send_replace(None);
                    session.resign().await;
                    tracing::info!(term, "stopped leading: studiod stops");
                    return true;
                }
            }
            let beating = beat.elapsed() >= POLL;
            if beating {
                beat = tokio::time::Instant::now();
            }
            let ping = session.ping(beating.then(|| (self.store.member(), now_ms())));
            // A slow answer keeps the session (a query in flight is not idle); only
            // one slower than the silence that ends an idle session means it is cut off.
            match tokio::time::timeout(silence, ping).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::warn!(term, error = %chain(&error), "lost the lead: the lock's session ended");
                    break;
                }
                Err(_) => {
                    tracing::warn!(term, "lost the lead: the lock's session does not answer");
                    break;
                }
            }
        }
        self.leader.send_replace(None);
        false
    }

    /// Runs `work` (a loop that returns when studiod stops) whenever this studiod leads:
    /// losing the lead drops it — its writes are fenced by the term or are
    /// compare-and-sets another leader would make the same — and a new term starts it
    /// again.
    pub(super) async fn while_leading<F, Fut>(self: Arc<Self>, what: &'static str, work: F)
    where
        F: Fn(Arc<Self>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut leading = self.office.subscribe();
        while let Some(term) = self.next_term(&mut leading).await {
            tokio::select! {
                () = work(self.clone()) => return,
                () = until_not(&mut leading, term) => {
                    tracing::info!(what, term, "paused: no longer leading");
                }
            }
        }
    }

    /// Waits until `leading` names a term (the lock's, or office's), or `None` once
    /// studiod stops.
    pub(super) async fn next_term(
        &self,
        leading: &mut watch::Receiver<Option<i64>>,
    ) -> Option<i64> {
        tokio::select! {
            biased;
            () = self.stop.triggered() => None,
            term = leading.wait_for(Option::is_some) => term.ok().and_then(|t| *t),
        }
    }
}

/// Resolves once the term is no longer `term` (or the watch is gone).
pub(super) async fn until_not(leading: &mut watch::Receiver<Option<i64>>, term: i64) {
    let _ = leading.wait_for(|t| *t != Some(term)).await;
}

/// This machine's name, as the members list shows it.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}
