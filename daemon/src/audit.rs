//! The admin audit trail (`admin_events`): which kinds exist and how a row is written.
//! Rows carry ids, origins and reason codes, never a secret.

use serde_json::Value;

use crate::store::Store;

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
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Audit {
    store: Store,
    epoch: String,
}

impl Audit {
    pub(crate) fn new(store: Store, epoch: String) -> Self {
        Self { store, epoch }
    }

    /// Appends one row. An audit write that fails is logged, not fatal: the action it
    /// records has already happened and must not be reported as failed.
    pub(crate) async fn record(&self, kind: Kind, principal_id: Option<&str>, detail: Value) {
        let now = studio_contract::time::now_ms();
        let detail = detail.to_string();
        if let Err(error) = self
            .store
            .append_event(now, kind.as_str(), &self.epoch, principal_id, &detail)
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
