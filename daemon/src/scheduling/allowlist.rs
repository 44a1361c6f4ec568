//! The command allow-list: the machine owner's list of what `command` actions may run.
//!
//! Stored in `state.db` (seeded once from `STUDIO_COMMAND_ALLOWLIST`, then changed only
//! with the daemon token: `studio allow add|remove`), kept in memory for validation and
//! for the check immediately before every spawn. An entry is a bare name, found on
//! studiod's own `PATH` when a run starts, or an absolute path. What it protects against
//! and what it does not: `docs/SCHEDULER.md`, "The command allow-list".

use std::{
    path::PathBuf,
    sync::{Arc, PoisonError, RwLock},
};

use studio_contract::time::now_ms;

use super::{engine::Scheduler, store::AllowEntry};
use crate::store::StoreError;

/// The most entries one change may name.
pub(crate) const MAX_CHANGE: usize = 256;

/// The entries in memory, swapped whole on every change.
#[derive(Debug, Default)]
pub(crate) struct AllowList(RwLock<Arc<[String]>>);

impl AllowList {
    /// The list as it is now.
    pub(crate) fn snapshot(&self) -> Arc<[String]> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn allows(&self, executable: &str) -> bool {
        self.snapshot().iter().any(|e| e == executable)
    }

    fn replace(&self, entries: Vec<String>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = entries.into();
    }
}

pub(crate) use studio_runner::program::allow_entry_problem as entry_problem;

/// What a change did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Change {
    pub added: Vec<String>,
    pub removed: Vec<String>,
}

impl Scheduler {
    /// Seeds the stored list at the first start of `state.db`, then loads it.
    pub(super) async fn load_allowlist(&self) -> Result<(), StoreError> {
        let seed = &self.config.allowlist_seed;
        if self.store.seed_allowlist(seed, now_ms()).await? {
            tracing::info!(entries = seed.len(), "command allow-list seeded");
        } else if !seed.is_empty() {
            tracing::info!(
                "STUDIO_COMMAND_ALLOWLIST only seeds a new home; the stored list stands \
                 (studio allow list)"
            );
        }
        self.reload_allowlist().await
    }

    /// Another member changed the list (or this one listens again after a gap): read
    /// it again, in turn with this member's own changes.
    pub(super) async fn allowlist_changed_elsewhere(&self) {
        let _one = self.allowlist_writes.lock().await;
        if let Err(error) = self.reload_allowlist().await {
            tracing::warn!(error = %error, "cannot read the command allow-list again");
        }
    }

    async fn reload_allowlist(&self) -> Result<(), StoreError> {
        let entries = self.store.allowlist().await?;
        self.allowlist
            .replace(entries.into_iter().map(|e| e.executable).collect());
        Ok(())
    }

    /// The stored entries, each with where it resolves now on studiod's `PATH`.
    pub(crate) async fn allowlist_entries(
        &self,
    ) -> Result<Vec<(AllowEntry, Option<PathBuf>)>, StoreError> {
        let entries = self.store.allowlist().await?;
        Ok(entries
            .into_iter()
            .map(|e| {
                let resolved = studio_runner::resolve(&e.executable, &self.config.search_path).ok();
                (e, resolved)
            })
            .collect())
    }

    /// Adds and removes entries (already checked with [`entry_problem`]) in one
    /// transaction; the next spawn check sees the new list.
    pub(crate) async fn change_allowlist(
        &self,
        add: &[String],
        remove: &[String],
        by: &str,
    ) -> Result<Change, StoreError> {
        // One change at a time, so the memory follows the database in commit order.
        let _one = self.allowlist_writes.lock().await;
        let (added, removed) = self
            .store
            .change_allowlist(add, remove, by, now_ms())
            .await?;
        self.reload_allowlist().await?;
        Ok(Change { added, removed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_bare_names_or_plain_absolute_paths() {
        for good in ["echo", "reindex.sh", "/usr/bin/echo", "/opt/my tools/run"] {
            assert_eq!(entry_problem(good), None, "{good}");
        }
        for bad in [
            "",
            "bin/echo",
            "./echo",
            ".",
            "..",
            "/usr/bin/../bin/sh",
            "/usr//bin/sh",
            "/usr/bin/",
            "/",
            "ec\nho",
        ] {
            assert!(entry_problem(bad).is_some(), "{bad:?}");
        }
        assert!(entry_problem(&"a".repeat(4097)).is_some());
    }

    #[test]
    fn a_snapshot_is_the_list_at_that_moment() {
        let list = AllowList::default();
        list.replace(vec!["echo".into()]);
        let before = list.snapshot();
        list.replace(vec!["true".into()]);
        assert_eq!(&*before, ["echo".to_owned()]);
        assert!(list.allows("true") && !list.allows("echo"));
    }
}
