//! The connections a listener holds, oldest first, and the rule for letting one go.
//!
//! A connection is *fresh* until its first request head is complete, then *serving* for
//! the rest of its life; an *evicted* one is closed without being served. The change
//! from fresh is one compare-and-set, so a connection is either served or evicted, never
//! both.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU8, Ordering},
    },
};

use tokio::sync::Notify;

const FRESH: u8 = 0;
const SERVING: u8 = 1;
const EVICTED: u8 = 2;

/// The connections of one listener.
#[derive(Clone)]
pub struct Slots(Arc<Shared>);

struct Shared {
    max: usize,
    held: Mutex<VecDeque<Arc<Conn>>>,
    /// Signalled whenever a connection ends.
    freed: Notify,
}

struct Conn {
    state: AtomicU8,
    evict: Notify,
}

/// One held connection; dropping it lets the slot go.
pub struct Slot {
    conn: Arc<Conn>,
    slots: Slots,
}

/// What a connection's service holds: it marks the connection serving, and lets no slot go.
#[derive(Clone)]
pub struct Marker(Arc<Conn>);

impl Slots {
    pub fn new(max: usize) -> Self {
        Self(Arc::new(Shared {
            max: max.max(1),
            held: Mutex::new(VecDeque::new()),
            freed: Notify::new(),
        }))
    }

    fn held(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Conn>>> {
        // A panic while holding the lock cannot leave the queue half-changed.
        self.0.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many connections are held.
    pub fn len(&self) -> usize {
        self.held().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves once one more connection may be held: below the cap, or at it while some
    /// held connection has not sent a request yet (taking the new one evicts it).
    pub async fn room(&self) {
        loop {
            let freed = self.0.freed.notified();
            if self.len() < self.0.max || self.has_fresh() {
                return;
            }
            freed.await;
        }
    }

    /// Takes a slot for an accepted connection; at the cap, the oldest connection that has
    /// not sent a request is evicted to make room (if one became serving meanwhile, the
    /// listener holds one over the cap until a connection ends).
    pub fn take(&self) -> Slot {
        if self.len() >= self.0.max {
            self.evict_oldest_fresh();
        }
        let conn = Arc::new(Conn {
            state: AtomicU8::new(FRESH),
            evict: Notify::new(),
        });
        self.held().push_back(conn.clone());
        Slot {
            conn,
            slots: self.clone(),
        }
    }

    fn has_fresh(&self) -> bool {
        self.held()
            .iter()
            .any(|c| c.state.load(Ordering::Acquire) == FRESH)
    }

    /// Evicts the oldest connection that has not sent a request; false when none is fresh.
    fn evict_oldest_fresh(&self) -> bool {
        let mut held = self.held();
        let Some(i) = held.iter().position(|c| {
            c.state
                .compare_exchange(FRESH, EVICTED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        }) else {
            return false;
        };
        if let Some(conn) = held.remove(i) {
            conn.evict.notify_one();
        }
        true
    }

    fn release(&self, conn: &Arc<Conn>) {
        let mut held = self.held();
        if let Some(i) = held.iter().position(|c| Arc::ptr_eq(c, conn)) {
            held.remove(i);
        }
        drop(held);
        self.0.freed.notify_one();
    }
}

impl Marker {
    /// Whether the connection has neither sent a request nor been evicted.
    pub fn is_fresh(&self) -> bool {
        self.0.state.load(Ordering::Acquire) == FRESH
    }

    /// Marks the connection as serving (its first request head is complete); false if it
    /// was evicted first.
    pub fn serving(&self) -> bool {
        match self
            .0
            .state
            .compare_exchange(FRESH, SERVING, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == SERVING,
        }
    }
}

impl Slot {
    /// The handle the connection's service keeps.
    pub fn marker(&self) -> Marker {
        Marker(self.conn.clone())
    }

    /// Resolves after `limit` unless the connection is serving by then (in which case it
    /// never resolves): a connection that sent no complete request head in time.
    pub fn first_request_within(
        &self,
        limit: std::time::Duration,
    ) -> impl Future<Output = ()> + use<> {
        let conn = self.conn.clone();
        async move {
            tokio::time::sleep(limit).await;
            let expired = conn
                .state
                .compare_exchange(FRESH, EVICTED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if !expired {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves when the connection is evicted.
    pub fn evicted(&self) -> impl Future<Output = ()> + use<> {
        let conn = self.conn.clone();
        async move { conn.evict.notified().await }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.release(&self.conn);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn at_the_cap_the_oldest_fresh_connection_makes_room() {
        let slots = Slots::new(2);
        let a = slots.take();
        let b = slots.take();
        assert!(a.marker().serving(), "a sent a request");
        let b_gone = b.evicted();
        slots.room().await;
        assert!(b.marker().is_fresh(), "making room alone evicts nobody");
        let _c = slots.take();
        tokio::time::timeout(Duration::from_secs(1), b_gone)
            .await
            .expect("b, fresh, is evicted for the newcomer");
        assert!(
            !b.marker().serving(),
            "an evicted connection is never served"
        );
        assert_eq!(slots.len(), 2, "a and the newcomer");
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_a_request_in_time_expires_and_a_serving_one_never() {
        let slots = Slots::new(4);
        let (idle, busy) = (slots.take(), slots.take());
        assert!(busy.marker().serving());
        let limit = Duration::from_secs(10);
        tokio::time::timeout(Duration::from_secs(11), idle.first_request_within(limit))
            .await
            .expect("the idle one expires");
        assert!(!idle.marker().serving(), "and is never served after");
        assert!(
            tokio::time::timeout(Duration::from_secs(60), busy.first_request_within(limit))
                .await
                .is_err(),
            "a serving connection does not expire"
        );
    }

    #[tokio::test]
    async fn when_every_connection_serves_accept_waits_for_one_to_end() {
        let slots = Slots::new(1);
        let a = slots.take();
        assert!(a.marker().serving());
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.room().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "a serving connection is never evicted"
        );
        drop(a);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("room once it ends")
            .expect("task");
        assert!(slots.is_empty());
    }
}
