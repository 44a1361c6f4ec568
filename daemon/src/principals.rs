//! The current epoch's live principals, in memory: the fast path of every admission.
//! Keyed by the SHA-256 digests of their admission and decision tokens; `state.db`
//! remains the durable record, admits a principal of the epoch paired through another
//! studiod of a cluster (which is then held here too) and classifies whatever else is
//! not here. Each entry names its epoch: one taken in just as the epoch changed is
//! never admitted under the next.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicI64, AtomicU8, Ordering},
    },
};

use studio_contract::{role::Role, secret::Digest};

/// A role's place in [`Role::ALL`] (its declaration order).
fn role_index(role: Role) -> u8 {
    role as u8
}

/// `last_seen_at_ms` is written at most this often per principal.
pub(crate) const TOUCH_INTERVAL_MS: i64 = 60_000;

#[derive(Debug)]
pub(crate) struct Live {
    pub id: String,
    /// The epoch it was paired in.
    pub epoch: String,
    pub origin: String,
    /// Its role's place in [`Role::ALL`]: an admin may change it while it is live.
    role: AtomicU8,
    pub decision_expires_at_ms: i64,
    /// When the admission token stops being accepted (`studio_contract::ADMISSION_TTL_MS`
    /// after redemption).
    pub expires_at_ms: i64,
    token_digest: Digest,
    decision_digest: Digest,
    last_seen_ms: AtomicI64,
}

impl Live {
    /// `digests`: of the admission token, then of the decision token; `expiries`: of the
    /// decision token, then of the admission token.
    pub(crate) fn new(
        id: String,
        epoch: String,
        origin: String,
        role: Role,
        (token_digest, decision_digest): (Digest, Digest),
        (decision_expires_at_ms, expires_at_ms): (i64, i64),
        now_ms: i64,
    ) -> Self {
        Self {
            id,
            epoch,
            origin,
            role: AtomicU8::new(role_index(role)),
            decision_expires_at_ms,
            expires_at_ms,
            token_digest,
            decision_digest,
            last_seen_ms: AtomicI64::new(now_ms),
        }
    }

    pub(crate) fn role(&self) -> Role {
        Role::ALL
            .get(usize::from(self.role.load(Ordering::Relaxed)))
            .copied()
            // Only `set_role` and `new` store it, each a valid index.
            .unwrap_or(Role::Viewer)
    }

    pub(crate) fn set_role(&self, role: Role) {
        self.role.store(role_index(role), Ordering::Relaxed);
    }

    /// Whether the admission token has run out: being in memory is no licence past it.
    pub(crate) fn expired(&self, now_ms: i64) -> bool {
        self.expires_at_ms <= now_ms
    }

    /// Whether this use should be written as `last_seen_at_ms`; claims the slot if so.
    pub(crate) fn claim_touch(&self, now_ms: i64) -> bool {
        let last = self.last_seen_ms.load(Ordering::Relaxed);
        now_ms - last >= TOUCH_INTERVAL_MS
            && self
                .last_seen_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

#[derive(Debug, Default)]
struct Maps {
    by_token: HashMap<Digest, Arc<Live>>,
    by_decision: HashMap<Digest, Arc<Live>>,
    by_id: HashMap<String, Arc<Live>>,
    /// Bumped by every forgetting, so a principal read from its row just before one is
    /// not taken in after it ([`LivePrincipals::insert_unless_forgotten`]).
    generation: u64,
}

#[derive(Debug, Default)]
pub(crate) struct LivePrincipals {
    // Never held across an await.
    maps: Mutex<Maps>,
}

impl LivePrincipals {
    fn lock(&self) -> std::sync::MutexGuard<'_, Maps> {
        self.maps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn insert(&self, live: Live) {
        let live = Arc::new(live);
        Self::put(&mut self.lock(), live);
    }

    fn put(m: &mut Maps, live: Arc<Live>) {
        m.by_token.insert(live.token_digest, live.clone());
        m.by_decision.insert(live.decision_digest, live.clone());
        m.by_id.insert(live.id.clone(), live);
    }

    /// Where forgetting stands now: read it before reading a principal's row.
    pub(crate) fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Holds `live`, read from its row when forgetting stood at `generation`, unless
    /// something was forgotten since (it might have been this one: it is then read
    /// again at its next use). Answers it either way.
    pub(crate) fn insert_unless_forgotten(&self, live: Live, generation: u64) -> Arc<Live> {
        let live = Arc::new(live);
        let mut m = self.lock();
        if m.generation == generation {
            Self::put(&mut m, live.clone());
        }
        live
    }

    pub(crate) fn by_token(&self, digest: &Digest) -> Option<Arc<Live>> {
        self.lock().by_token.get(digest).cloned()
    }

    pub(crate) fn by_decision(&self, digest: &Digest) -> Option<Arc<Live>> {
        self.lock().by_decision.get(digest).cloned()
    }

    pub(crate) fn by_id(&self, id: &str) -> Option<Arc<Live>> {
        self.lock().by_id.get(id).cloned()
    }

    /// The ids of every principal held.
    pub(crate) fn ids(&self) -> Vec<String> {
        self.lock().by_id.keys().cloned().collect()
    }

    /// Forgets every principal (the epoch changed).
    pub(crate) fn clear(&self) {
        let mut m = self.lock();
        let generation = m.generation + 1;
        *m = Maps {
            generation,
            ..Maps::default()
        };
    }

    /// Forgets a principal (revoked): its tokens then fall through to the durable record.
    pub(crate) fn remove(&self, id: &str) -> Option<Arc<Live>> {
        let mut m = self.lock();
        m.generation += 1;
        let live = m.by_id.remove(id)?;
        m.by_token.remove(&live.token_digest);
        m.by_decision.remove(&live.decision_digest);
        Some(live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touches_at_most_once_a_minute() {
        let live = Live::new(
            "p".into(),
            "e".into(),
            "o".into(),
            Role::Admin,
            ([1; 32], [2; 32]),
            (0, i64::MAX),
            1_000,
        );
        assert!(!live.claim_touch(1_000 + TOUCH_INTERVAL_MS - 1));
        assert!(live.claim_touch(1_000 + TOUCH_INTERVAL_MS));
        assert!(!live.claim_touch(1_000 + TOUCH_INTERVAL_MS + 5));
    }

    #[test]
    fn a_live_role_reads_back_as_set() {
        let live = Live::new(
            "p".into(),
            "e".into(),
            "o".into(),
            Role::Viewer,
            ([1; 32], [2; 32]),
            (0, 1),
            0,
        );
        assert_eq!(live.role(), Role::Viewer);
        for role in Role::ALL {
            live.set_role(role);
            assert_eq!(live.role(), role);
        }
    }

    #[test]
    fn remove_forgets_every_key() {
        let set = LivePrincipals::default();
        set.insert(Live::new(
            "p".into(),
            "e".into(),
            "o".into(),
            Role::Admin,
            ([1; 32], [2; 32]),
            (0, 10),
            0,
        ));
        assert!(set.by_token(&[1; 32]).is_some());
        assert!(set.remove("p").is_some());
        assert!(set.by_token(&[1; 32]).is_none());
        assert!(set.by_decision(&[2; 32]).is_none());
        assert!(set.remove("p").is_none());
    }

    #[test]
    fn a_principal_read_before_a_forgetting_is_not_held_after_it() {
        let set = LivePrincipals::default();
        let live = |id: &str, digests| {
            Live::new(
                id.into(),
                "e".into(),
                "o".into(),
                Role::Admin,
                digests,
                (0, 10),
                0,
            )
        };
        let before = set.generation();
        set.remove("anyone");
        let answered = set.insert_unless_forgotten(live("p", ([1; 32], [2; 32])), before);
        assert_eq!(answered.id, "p", "answered for this use");
        assert!(set.by_token(&[1; 32]).is_none(), "but not held");
        let now = set.generation();
        set.insert_unless_forgotten(live("p", ([1; 32], [2; 32])), now);
        assert!(set.by_token(&[1; 32]).is_some());
        set.clear();
        assert!(set.by_id("p").is_none());
        assert_ne!(set.generation(), now);
    }

    #[test]
    fn expires_at_its_instant() {
        let live = Live::new(
            "p".into(),
            "e".into(),
            "o".into(),
            Role::Admin,
            ([1; 32], [2; 32]),
            (0, 10),
            0,
        );
        assert!(!live.expired(9));
        assert!(live.expired(10));
    }
}
