//! On PostgreSQL, what the other studiod processes sharing the database announce: a
//! listener on the work channel (`LISTEN studio_work`) wakes this process's built-in
//! worker and its workers' assignment streams, as a submission through this process
//! does; one on the schedule channel (`studio_schedules`) lets the leader arm a schedule
//! another member changed (its fire loop also re-reads every armed schedule each
//! [`SHARED_IDLE`]); one on the cancel channel (`studio_cancels`) lets a member cancel
//! a run it runs when a person asked another member; one on the principals channel
//! (`studio_principals`) hands what other members revoked, re-roled or rotated to the
//! authority (`Authority::follow_cluster`, which also re-reads each second); one on the
//! allow-list channel (`studio_allowlist`) makes this member read the command allow-list
//! again, which it keeps in memory for every check. A lost connection is made again
//! after a second; whatever was announced meanwhile is caught by the claimers' slow poll
//! ([`SHARED_IDLE`]) and by the look the listener takes as soon as it listens again (the
//! work it may have missed, and the allow-list read again). Nothing of this runs on
//! SQLite.

use std::{sync::Arc, time::Duration};

use super::{
    Scheduler,
    store::{ALLOWLIST_CHANNEL, CANCEL_CHANNEL, CancelAsk, SCHEDULE_CHANNEL, WORK_CHANNEL},
};
use crate::{error::chain, store::PRINCIPALS_CHANNEL};

/// How long a claimer waits without news before looking again when the database is
/// shared: the safety net under the notifications.
pub(super) const SHARED_IDLE: Duration = Duration::from_secs(10);

impl Scheduler {
    /// Listens on the work channel until stopped (returns at once on SQLite).
    pub(super) async fn listen_forever(self: Arc<Self>) {
        let Some(url) = self.store.shared_url().cloned() else {
            return;
        };
        let stop = self.stop.clone();
        loop {
            match self.listen(&url).await {
                Ok(()) => return,
                Err(error) => {
                    tracing::warn!(error = %chain(&error), "work listener lost; again in 1 s");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                () = stop.triggered() => return,
            }
        }
    }

    /// One listening session: `Ok` once stopped.
    async fn listen(&self, url: &studio_store::DatabaseUrl) -> Result<(), sqlx::Error> {
        let mut listener = sqlx::postgres::PgListener::connect(url.expose()).await?;
        listener
            .listen_all([
                WORK_CHANNEL,
                SCHEDULE_CHANNEL,
                CANCEL_CHANNEL,
                PRINCIPALS_CHANNEL,
                ALLOWLIST_CHANNEL,
            ])
            .await?;
        // What another process announced while this one was not listening.
        self.work_arrived();
        self.allowlist_changed_elsewhere().await;
        let stop = self.stop.clone();
        loop {
            tokio::select! {
                note = listener.recv() => {
                    let note = note?;
                    if note.channel() == SCHEDULE_CHANNEL {
                        self.schedule_changed(note.payload()).await;
                    } else if note.channel() == CANCEL_CHANNEL {
                        self.cancel_asked(note.payload()).await;
                    } else if note.channel() == ALLOWLIST_CHANNEL {
                        if note.payload() != self.store.member() {
                            self.allowlist_changed_elsewhere().await;
                        }
                    } else if note.channel() == PRINCIPALS_CHANNEL {
                        // Nobody following (a test's scheduler alone) is fine.
                        let _ = self.identity_notes.send(note.payload().to_owned());
                    } else if note.payload() != self.store.member() {
                        self.work_arrived();
                    }
                }
                () = stop.triggered() => return Ok(()),
            }
        }
    }

    /// Another member asks this one to cancel a run it runs (a person asked there; the
    /// audit row is written there).
    async fn cancel_asked(&self, payload: &str) {
        let Ok(ask) = serde_json::from_str::<CancelAsk>(payload) else {
            return;
        };
        if ask.member != self.store.member() {
            return;
        }
        match self.cancel(&ask.run, &ask.reason, None).await {
            Ok(_) => tracing::info!(run = %ask.run, "cancelled at another member's request"),
            Err(error) => {
                tracing::info!(run = %ask.run, error = %error, "cancel request not applied")
            }
        }
    }

    /// Another member changed a schedule (`<member> <schedule id>`): the leader arms it
    /// as it now stands.
    async fn schedule_changed(&self, payload: &str) {
        let Some((member, id)) = payload.split_once(' ') else {
            return;
        };
        if member == self.store.member() || self.term().is_none() {
            return;
        }
        if let Err(error) = self.rearm_from_store(id).await {
            tracing::warn!(schedule = %id, error = %chain(&error), "cannot re-arm a schedule");
        }
    }
}
