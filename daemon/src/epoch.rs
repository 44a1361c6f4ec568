//! The epoch a studiod admits under, shared by everything that stamps it (admission,
//! the audit trail, the scheduler's own audit rows, worker enrolment). It is set once
//! at start and changes only when the epoch is rotated (`studio epoch rotate`, here or,
//! on a shared database, through another member).

use std::sync::{Arc, PoisonError, RwLock};

#[derive(Debug, Clone, Default)]
pub struct EpochCell(Arc<RwLock<Arc<str>>>);

impl EpochCell {
    pub fn new(epoch: &str) -> Self {
        Self(Arc::new(RwLock::new(Arc::from(epoch))))
    }

    /// The epoch now.
    pub fn get(&self) -> String {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .to_string()
    }

    /// Whether `epoch` is the epoch now.
    pub(crate) fn is(&self, epoch: &str) -> bool {
        **self.0.read().unwrap_or_else(PoisonError::into_inner) == *epoch
    }

    pub(crate) fn set(&self, epoch: &str) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::from(epoch);
    }
}

impl From<&str> for EpochCell {
    fn from(epoch: &str) -> Self {
        Self::new(epoch)
    }
}
