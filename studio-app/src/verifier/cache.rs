//! What the app knows of the daemon between calls: the `Watch` stream's liveness, the
//! current epoch, and the verdict cache that is only trusted while that stream is live.
//!
//! Invariant: a cached verdict is served only while a heartbeat arrived within
//! [`LIVE_WINDOW`], for the epoch it was issued in; a break, an epoch change or a
//! revocation naming its principal removes it before the next lookup can see it.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use studio_contract::{
    role::Role,
    secret::{self, Digest},
};

/// How recent the last event on the `Watch` stream must be for the stream to count as live.
pub(crate) const LIVE_WINDOW: Duration = Duration::from_millis(1500);

/// Bounds memory if many distinct bearers are presented; a full cache simply starts over.
const MAX_ENTRIES: usize = 4096;

/// An admitted caller, as the verifier described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Principal {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) epoch: String,
    /// 0 when the credential does not expire.
    pub(crate) expires_at_ms: i64,
    /// What it may do (studiod enforces it; the app hides what it cannot do).
    pub(crate) role: Role,
}

/// Cache key: one digest of the bearer (never the bearer itself) and the Origin it came
/// with, the bearer's length first so no two pairs read alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct VerdictKey(Digest);

impl VerdictKey {
    pub(crate) fn new(bearer: &str, origin: &str) -> Self {
        let length = (bearer.len() as u64).to_le_bytes();
        Self(secret::digest_parts(&[
            &length,
            bearer.as_bytes(),
            origin.as_bytes(),
        ]))
    }
}

/// The stream state and the verdicts it vouches for.
#[derive(Debug, Default)]
pub(crate) struct Verdicts {
    /// Shared with the requests they admit (a hit costs no copy).
    entries: HashMap<VerdictKey, Arc<Principal>>,
    epoch: Option<String>,
    stream_up: bool,
    last_event: Option<Instant>,
    /// Bumped by every event that invalidates verdicts, so an `Admit` answer that was in
    /// flight across a revocation is never stored afterwards.
    generation: u64,
}

impl Verdicts {
    /// Whether the `Watch` stream is up and heard from within [`LIVE_WINDOW`].
    pub(crate) fn is_live(&self, now: Instant) -> bool {
        self.stream_up
            && self
                .last_event
                .is_some_and(|t| now.saturating_duration_since(t) <= LIVE_WINDOW)
    }

    /// The epoch announced on the live stream, if any.
    pub(crate) fn epoch(&self, now: Instant) -> Option<&str> {
        self.is_live(now).then_some(self.epoch.as_deref()).flatten()
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// A cached verdict, only while the stream is live and the verdict still holds.
    pub(crate) fn get(
        &self,
        key: &VerdictKey,
        now: Instant,
        now_ms: i64,
    ) -> Option<&Arc<Principal>> {
        if !self.is_live(now) {
            return None;
        }
        self.entries.get(key).filter(|p| {
            Some(p.epoch.as_str()) == self.epoch.as_deref()
                && (p.expires_at_ms == 0 || now_ms < p.expires_at_ms)
        })
    }

    /// Stores a verdict obtained while `generation` was current; a stale one is dropped.
    pub(crate) fn insert(&mut self, key: VerdictKey, principal: Arc<Principal>, generation: u64) {
        if generation != self.generation || !self.stream_up {
            return;
        }
        if self.entries.len() >= MAX_ENTRIES {
            self.entries.clear();
        }
        self.entries.insert(key, principal);
    }

    /// The stream announced the epoch (its first event, or a change).
    pub(crate) fn on_epoch(&mut self, epoch: &str, now: Instant) {
        if self.epoch.as_deref() != Some(epoch) {
            self.invalidate();
            self.epoch = Some(epoch.to_owned());
        }
        self.stream_up = true;
        self.last_event = Some(now);
    }

    pub(crate) fn on_heartbeat(&mut self, now: Instant) {
        self.last_event = Some(now);
    }

    /// A principal was revoked or its role changed: what was cached for it is dropped.
    pub(crate) fn on_revoked(&mut self, principal_id: &str, now: Instant) {
        self.entries.retain(|_, p| p.id != principal_id);
        self.generation += 1;
        self.last_event = Some(now);
    }

    /// The stream broke or stalled: nothing it vouched for can be trusted any more.
    pub(crate) fn on_break(&mut self) {
        self.stream_up = false;
        self.last_event = None;
        self.invalidate();
    }

    /// Drops every verdict (also used after this app saw a credential being revoked).
    pub(crate) fn invalidate(&mut self) {
        self.entries.clear();
        self.generation += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(id: &str, epoch: &str) -> Arc<Principal> {
        Arc::new(Principal {
            id: id.into(),
            kind: "browser".into(),
            epoch: epoch.into(),
            expires_at_ms: 0,
            role: Role::Admin,
        })
    }

    fn live(now: Instant) -> (Verdicts, VerdictKey) {
        let mut v = Verdicts::default();
        v.on_epoch("e1", now);
        let key = VerdictKey::new("sta_x", "http://127.0.0.1:8765");
        let g = v.generation();
        v.insert(key.clone(), principal("p1", "e1"), g);
        (v, key)
    }

    #[test]
    fn a_key_tells_bearer_from_origin() {
        assert_ne!(
            VerdictKey::new("sta_ab", "c"),
            VerdictKey::new("sta_a", "bc")
        );
        assert_eq!(VerdictKey::new("sta_a", "o"), VerdictKey::new("sta_a", "o"));
    }

    #[test]
    fn served_only_while_live() {
        let t0 = Instant::now();
        let (mut v, key) = live(t0);
        assert_eq!(v.get(&key, t0, 0).map(|p| p.id.as_str()), Some("p1"));
        assert!(
            v.get(&VerdictKey::new("sta_x", "http://evil.example"), t0, 0)
                .is_none()
        );
        // No heartbeat for longer than the window: stale, not served.
        let later = t0 + LIVE_WINDOW + Duration::from_millis(1);
        assert!(v.get(&key, later, 0).is_none());
        assert!(!v.is_live(later));
        // A heartbeat revives the stream and the verdict with it.
        v.on_heartbeat(later);
        assert!(v.get(&key, later, 0).is_some());
    }

    #[test]
    fn a_break_empties_the_cache() {
        let t0 = Instant::now();
        let (mut v, key) = live(t0);
        v.on_break();
        assert!(!v.is_live(t0));
        v.on_epoch("e1", t0);
        assert!(v.get(&key, t0, 0).is_none(), "a break must drop verdicts");
    }

    #[test]
    fn an_epoch_change_empties_the_cache() {
        let t0 = Instant::now();
        let (mut v, key) = live(t0);
        v.on_epoch("e2", t0);
        assert!(v.get(&key, t0, 0).is_none());
        assert_eq!(v.epoch(t0), Some("e2"));
        // A verdict issued for an old epoch is never served under the new one.
        let g = v.generation();
        v.insert(key.clone(), principal("p1", "e1"), g);
        assert!(v.get(&key, t0, 0).is_none());
    }

    #[test]
    fn a_revocation_drops_only_that_principal() {
        let t0 = Instant::now();
        let (mut v, key) = live(t0);
        let other = VerdictKey::new("sta_y", "");
        let g = v.generation();
        v.insert(other.clone(), principal("p2", "e1"), g);
        v.on_revoked("p1", t0);
        assert!(v.get(&key, t0, 0).is_none());
        assert!(v.get(&other, t0, 0).is_some());
    }

    #[test]
    fn a_verdict_in_flight_across_a_revocation_is_not_stored() {
        let t0 = Instant::now();
        let mut v = Verdicts::default();
        v.on_epoch("e1", t0);
        let g = v.generation();
        v.on_revoked("p1", t0);
        let key = VerdictKey::new("sta_x", "");
        v.insert(key.clone(), principal("p1", "e1"), g);
        assert!(v.get(&key, t0, 0).is_none());
    }

    #[test]
    fn expired_credentials_are_not_served() {
        let t0 = Instant::now();
        let mut v = Verdicts::default();
        v.on_epoch("e1", t0);
        let key = VerdictKey::new("sta_x", "");
        let p = Arc::new(Principal {
            expires_at_ms: 1000,
            ..(*principal("p1", "e1")).clone()
        });
        let g = v.generation();
        v.insert(key.clone(), p, g);
        assert!(v.get(&key, t0, 999).is_some());
        assert!(v.get(&key, t0, 1000).is_none());
    }
}
