//! Secrets (docs/OPERATIONS.md, "Secrets"): setting and deleting them through the one
//! write path, with their audit rows; and opening the ones a job names, at its spawn
//! only.

use std::collections::BTreeMap;

use serde_json::json;
use studio_contract::time::now_ms;
use studio_runner::Redaction;

use super::{
    Scheduler,
    engine::EngineError,
    store::{Note, SecretDeleted, SecretRow},
};
use crate::{
    audit::{Actor, Kind},
    secrets::SealError,
    store::StoreError,
};

/// Why a job's secrets cannot be given to it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SecretsUnavailable {
    #[error("no secret is named {0:?} any more (the job would run without {1})")]
    Missing(String, String),
    #[error("the secret {0:?} cannot be opened: {1}")]
    Unreadable(String, SealError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A job's secrets, opened: the variables for its environment and what its output must
/// not show.
#[derive(Default)]
pub(crate) struct Opened {
    pub env: BTreeMap<String, String>,
    pub redact: Vec<Redaction>,
}

impl Scheduler {
    /// The names of every secret.
    pub(crate) async fn secret_names(&self) -> Result<Vec<String>, StoreError> {
        self.store.secret_names().await
    }

    /// Sets secret `name` (checked by the caller) to `value` for `by`; `true` when it is
    /// new. The audit row names the secret, never its value.
    pub(crate) async fn set_secret(
        &self,
        name: &str,
        value: &str,
        by: &Actor,
    ) -> Result<bool, EngineError> {
        let sealed = self.store.sealer().seal(name, value)?;
        let note = Note {
            by,
            kind: Kind::SecretSet,
            object: format!("secret:{name}"),
            schedule_id: None,
            detail: json!({ "name": name }),
        };
        Ok(self
            .store
            .put_secret(name, &sealed, &note, now_ms())
            .await?)
    }

    /// Deletes secret `name` for `by`, unless a schedule or an unfinished task names it;
    /// the secret as it was.
    pub(crate) async fn delete_secret(
        &self,
        name: &str,
        by: &Actor,
    ) -> Result<SecretRow, EngineError> {
        let note = Note {
            by,
            kind: Kind::SecretDeleted,
            object: format!("secret:{name}"),
            schedule_id: None,
            detail: json!({ "name": name }),
        };
        match self.store.delete_secret(name, &note, now_ms()).await? {
            SecretDeleted::Deleted(row) => Ok(row),
            SecretDeleted::NotFound => Err(EngineError::SecretNotFound),
            SecretDeleted::InUse(users) => Err(EngineError::SecretInUse(users)),
        }
    }

    /// Opens the secrets `refs` names (environment variable → secret) for one job.
    pub(crate) async fn open_secrets(
        &self,
        refs: &BTreeMap<String, String>,
    ) -> Result<Opened, SecretsUnavailable> {
        if refs.is_empty() {
            return Ok(Opened::default());
        }
        let mut names: Vec<&str> = refs.values().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        let sealed = self.store.sealed_secrets(&names).await?;
        let mut values = BTreeMap::new();
        for (name, sealed) in &sealed {
            let value = self
                .store
                .sealer()
                .open(name, sealed)
                .map_err(|e| SecretsUnavailable::Unreadable(name.clone(), e))?;
            values.insert(name.as_str(), value);
        }
        let mut opened = Opened::default();
        for (variable, name) in refs {
            let value = values
                .get(name.as_str())
                .ok_or_else(|| SecretsUnavailable::Missing(name.clone(), variable.clone()))?;
            opened.env.insert(variable.clone(), value.clone());
        }
        opened.redact = values
            .into_iter()
            .map(|(name, value)| Redaction {
                name: name.to_owned(),
                value,
            })
            .collect();
        Ok(opened)
    }
}
