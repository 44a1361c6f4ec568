//! The audit trail (`admin_events`, append-only): which kinds exist, who an API change
//! is made by ([`Actor`]) and how a row is written. Epoch, pairing and session rows are
//! written here; a change of a schedule or run is written by the scheduler's store in the
//! change's own transaction (`scheduling::store::audit`). Rows carry ids, names, origins
//! and reason codes, never a secret nor an environment value.

use serde_json::Value;
use studio_contract::role::Role;

use crate::{admission::Admitted, epoch::EpochCell, store::Store};

/// Who asked for a change through the API: the admitted principal (a paired browser, or
/// the daemon token as `daemon`), its role, the origin it came from, and the epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Actor {
    pub principal: String,
    pub role: Role,
    pub origin: Option<String>,
    pub epoch: String,
}

impl Actor {
    /// `who`, admitted in its epoch, asking from `origin`.
    pub(crate) fn new(who: &Admitted, origin: Option<String>) -> Self {
        Self {
            principal: who.id.clone(),
            role: who.role,
            origin,
            epoch: who.epoch.clone(),
        }
    }

    /// studiod itself (a retention pass, a policy from its configuration): its rows name
    /// no principal and no role.
    pub(crate) fn studiod(epoch: &str) -> Self {
        Self {
            principal: String::new(),
            role: Role::Admin,
            origin: None,
            epoch: epoch.to_owned(),
        }
    }

    fn is_studiod(&self) -> bool {
        self.principal.is_empty()
    }

    /// The principal and role a row records (none for studiod itself).
    pub(crate) fn recorded(&self) -> (Option<&str>, Option<&'static str>) {
        if self.is_studiod() {
            (None, None)
        } else {
            (Some(&self.principal), Some(self.role.as_str()))
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    EpochStarted,
    EpochStopped,
    PairingMinted,
    PairingRedeemed,
    PairingFailed,
    SessionRevoked,
    RoleChanged,
    AllowlistChanged,
    ScheduleCreated,
    ScheduleUpdated,
    ScheduleEnabled,
    ScheduleDisabled,
    ScheduleDeleted,
    RunTriggered,
    RunCancelled,
    ApprovalGranted,
    ApprovalDenied,
    TaskSubmitted,
    TaskCancelled,
    TaskRetried,
    WorkerTokenCreated,
    WorkerJoined,
    WorkerRevoked,
    SecretSet,
    SecretDeleted,
    EndpointCreated,
    EndpointDeleted,
    RetentionPolicySet,
    RetentionPass,
    WalCheckpoint,
    ArchiveRestored,
    EpochRotated,
    AppTokenCreated,
    AppJoined,
    AppRevoked,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::EpochStarted => "epoch_started",
            Kind::EpochStopped => "epoch_stopped",
            Kind::PairingMinted => "pairing_minted",
            Kind::PairingRedeemed => "pairing_redeemed",
            Kind::PairingFailed => "pairing_failed",
            Kind::SessionRevoked => "session_revoked",
            Kind::RoleChanged => "role_changed",
            Kind::AllowlistChanged => "allowlist_changed",
            Kind::ScheduleCreated => "schedule_created",
            Kind::ScheduleUpdated => "schedule_updated",
            Kind::ScheduleEnabled => "schedule_enabled",
            Kind::ScheduleDisabled => "schedule_disabled",
            Kind::ScheduleDeleted => "schedule_deleted",
            Kind::RunTriggered => "run_triggered",
            Kind::RunCancelled => "run_cancelled",
            Kind::ApprovalGranted => "approval_granted",
            Kind::ApprovalDenied => "approval_denied",
            Kind::TaskSubmitted => "task_submitted",
            Kind::TaskCancelled => "task_cancelled",
            Kind::TaskRetried => "task_retried",
            Kind::WorkerTokenCreated => "worker_token_created",
            Kind::WorkerJoined => "worker_joined",
            Kind::WorkerRevoked => "worker_revoked",
            Kind::SecretSet => "secret_set",
            Kind::SecretDeleted => "secret_deleted",
            Kind::EndpointCreated => "endpoint_created",
            Kind::EndpointDeleted => "endpoint_deleted",
            Kind::RetentionPolicySet => "retention_policy_set",
            Kind::RetentionPass => "retention_pass",
            Kind::WalCheckpoint => "wal_checkpoint",
            Kind::ArchiveRestored => "archive_restored",
            Kind::EpochRotated => "epoch_rotated",
            Kind::AppTokenCreated => "app_token_created",
            Kind::AppJoined => "app_joined",
            Kind::AppRevoked => "app_revoked",
        }
    }

    /// Every kind, for the API's filter and its documentation.
    #[cfg(test)]
    pub(crate) const ALL: [Kind; 35] = [
        Kind::EpochStarted,
        Kind::EpochStopped,
        Kind::PairingMinted,
        Kind::PairingRedeemed,
        Kind::PairingFailed,
        Kind::SessionRevoked,
        Kind::RoleChanged,
        Kind::AllowlistChanged,
        Kind::ScheduleCreated,
        Kind::ScheduleUpdated,
        Kind::ScheduleEnabled,
        Kind::ScheduleDisabled,
        Kind::ScheduleDeleted,
        Kind::RunTriggered,
        Kind::RunCancelled,
        Kind::ApprovalGranted,
        Kind::ApprovalDenied,
        Kind::TaskSubmitted,
        Kind::TaskCancelled,
        Kind::TaskRetried,
        Kind::WorkerTokenCreated,
        Kind::WorkerJoined,
        Kind::WorkerRevoked,
        Kind::SecretSet,
        Kind::SecretDeleted,
        Kind::EndpointCreated,
        Kind::EndpointDeleted,
        Kind::RetentionPolicySet,
        Kind::RetentionPass,
        Kind::WalCheckpoint,
        Kind::ArchiveRestored,
        Kind::EpochRotated,
        Kind::AppTokenCreated,
        Kind::AppJoined,
        Kind::AppRevoked,
    ];
}

#[derive(Debug, Clone)]
pub(crate) struct Audit {
    store: Store,
    epoch: EpochCell,
}

impl Audit {
    pub(crate) fn new(store: Store, epoch: EpochCell) -> Self {
        Self { store, epoch }
    }

    /// Appends the row of a change `by` made to `object`; failures as for [`Audit::record`].
    pub(crate) async fn record_change(&self, kind: Kind, by: &Actor, object: &str, detail: Value) {
        let detail = detail.to_string();
        let row = crate::store::ChangeRecord {
            at_ms: studio_contract::time::now_ms(),
            kind: kind.as_str(),
            by,
            object,
            detail: &detail,
        };
        if let Err(error) = self.store.append_change(&row).await {
            tracing::error!(
                error = %crate::error::chain(&error),
                kind = kind.as_str(),
                "audit write failed"
            );
        }
    }

    /// Appends one row. An audit write that fails is logged, not fatal: the action it
    /// records has already happened and must not be reported as failed.
    pub(crate) async fn record(&self, kind: Kind, principal_id: Option<&str>, detail: Value) {
        let now = studio_contract::time::now_ms();
        let detail = detail.to_string();
        if let Err(error) = self
            .store
            .append_event(now, kind.as_str(), &self.epoch.get(), principal_id, &detail)
            .await
        {
            tracing::error!(
                error = %crate::error::chain(&error),
                kind = kind.as_str(),
                "audit write failed"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_names_every_kind_the_trail_writes() {
        let written: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(written, studio_api::AUDIT_KINDS);
    }
}
