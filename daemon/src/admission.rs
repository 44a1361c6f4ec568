//! The daemon's authority over credentials: admitting bearers, resolving decision
//! tokens, redeeming pairing codes and revoking principals. The HTTP API and the
//! verifier both call this one implementation, so their verdicts cannot drift apart.

use std::sync::{Mutex, PoisonError};

use serde_json::json;
use studio_contract::{
    ADMISSION_TTL_MS,
    control::PairingCode,
    device,
    error::{ApiError, Code},
    origin::{self, AllowedOrigins},
    role::Role,
    secret::{self, Digest},
};
use tokio::sync::broadcast;

use crate::{
    audit::{Actor, Audit, Kind as AuditKind},
    error::chain,
    pairing::CodeBook,
    principals::{Live, LivePrincipals},
    store::{NewPrincipal, PrincipalRow, Store, StoreError},
};

/// How long a decision token is good for.
pub(crate) const DECISION_TTL_MS: i64 = 8 * 60 * 60 * 1000;
/// The id the daemon token is admitted as.
pub(crate) const DAEMON_PRINCIPAL: &str = "daemon";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PrincipalKind {
    Daemon,
    Browser,
}

impl PrincipalKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PrincipalKind::Daemon => "daemon",
            PrincipalKind::Browser => "browser",
        }
    }
}

/// Who a credential was admitted as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Admitted {
    pub id: String,
    pub kind: PrincipalKind,
    /// What it may do: a browser its pairing's role; the daemon token every role.
    pub role: Role,
    /// 0 when the credential does not expire (the daemon token).
    pub expires_at_ms: i64,
}

/// A successful redemption: the secrets leave the daemon exactly once, here.
#[derive(Debug, Clone)]
pub(crate) struct Paired {
    pub token: String,
    pub decision_token: String,
    pub principal: String,
    pub decision_expires_at_ms: i64,
    /// When the admission token stops being accepted.
    pub expires_at_ms: i64,
}

/// What happened to a principal, for the verifier's watchers: each drops what it cached
/// for that principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PrincipalEvent {
    Revoked(String),
    RoleChanged(String),
}

pub(crate) struct Authority {
    epoch: String,
    store: Store,
    daemon_token: Digest,
    allowed: AllowedOrigins,
    codes: Mutex<CodeBook>,
    live: LivePrincipals,
    revocations: broadcast::Sender<PrincipalEvent>,
    audit: Audit,
}

fn internal(error: StoreError) -> ApiError {
    tracing::error!(error = %chain(&error), "store failure");
    ApiError::new(Code::Internal, "internal error")
}

fn unauthorized() -> ApiError {
    ApiError::new(Code::Unauthorized, "missing or unknown credential")
}

fn session_expired() -> ApiError {
    ApiError::new(
        Code::SessionExpired,
        "this pairing has expired; pair again with `studio pair`",
    )
}

impl Authority {
    pub(crate) fn new(
        store: Store,
        epoch: String,
        past_epochs: &[String],
        daemon_token: &str,
        allowed: AllowedOrigins,
        pairing_ttl_ms: i64,
    ) -> Self {
        let (revocations, _) = broadcast::channel(256);
        Self {
            codes: Mutex::new(CodeBook::new(&epoch, past_epochs, pairing_ttl_ms)),
            audit: Audit::new(store.clone(), epoch.clone()),
            epoch,
            store,
            daemon_token: secret::digest(daemon_token),
            allowed,
            live: LivePrincipals::default(),
            revocations,
        }
    }

    pub(crate) fn epoch(&self) -> &str {
        &self.epoch
    }

    pub(crate) fn audit(&self) -> &Audit {
        &self.audit
    }

    /// Whether a presented Origin value is on the allow-list.
    pub(crate) fn origin_allowed(&self, origin: &str) -> bool {
        self.allowed.allows(origin)
    }

    /// Revocations and role changes, as they happen.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<PrincipalEvent> {
        self.revocations.subscribe()
    }

    fn codes(&self) -> std::sync::MutexGuard<'_, CodeBook> {
        self.codes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits the daemon token or a current-epoch, unrevoked, unexpired admission token.
    #[tracing::instrument(skip_all, fields(principal))]
    pub(crate) async fn admit(&self, bearer: &str, now_ms: i64) -> Result<Admitted, ApiError> {
        let digest = secret::digest(bearer);
        if secret::digests_equal(&digest, &self.daemon_token) {
            return Ok(Admitted {
                id: DAEMON_PRINCIPAL.to_owned(),
                kind: PrincipalKind::Daemon,
                role: Role::Admin,
                expires_at_ms: 0,
            });
        }
        if let Some(live) = self.live.by_token(&digest) {
            tracing::Span::current().record("principal", live.id.as_str());
            if live.expired(now_ms) {
                // Forgotten here; its durable row answers the same from now on.
                self.live.remove(&live.id);
                return Err(session_expired());
            }
            if live.claim_touch(now_ms)
                && let Err(error) = self.store.touch_principal(&live.id, now_ms).await
            {
                // Losing a last-seen update is harmless; refusing the request is not.
                tracing::warn!(error = %chain(&error), "last-seen update failed");
            }
            return Ok(Admitted {
                id: live.id.clone(),
                kind: PrincipalKind::Browser,
                role: live.role(),
                expires_at_ms: live.expires_at_ms,
            });
        }
        let row = self
            .store
            .principal_by_token(&digest)
            .await
            .map_err(internal)?;
        Err(self.classify(row, now_ms))
    }

    /// Why a credential not among the live principals is refused.
    fn classify(&self, row: Option<PrincipalRow>, now_ms: i64) -> ApiError {
        match row {
            Some(r) if r.revoked_at_ms.is_some() => {
                ApiError::new(Code::Revoked, "this credential was revoked")
            }
            Some(r) if r.epoch != self.epoch => ApiError::new(
                Code::EpochEnded,
                "this credential belongs to an earlier daemon start",
            ),
            Some(r) if r.expires_at_ms <= now_ms => session_expired(),
            _ => unauthorized(),
        }
    }

    /// Resolves a decision token presented from `origin` (it must be the bound one).
    #[tracing::instrument(skip_all, fields(principal))]
    pub(crate) async fn resolve_decision(
        &self,
        token: &str,
        origin: &str,
        now_ms: i64,
    ) -> Result<Admitted, ApiError> {
        let digest = secret::digest(token);
        let Some(live) = self.live.by_decision(&digest) else {
            let row = self
                .store
                .principal_by_decision(&digest)
                .await
                .map_err(internal)?;
            return Err(self.classify(row, now_ms));
        };
        tracing::Span::current().record("principal", live.id.as_str());
        // A decision needs a live pairing: an expired session's decision token is done too.
        if live.expired(now_ms) {
            return Err(session_expired());
        }
        if origin::normalize(origin).as_deref() != Some(live.origin.as_str()) {
            return Err(ApiError::new(
                Code::OriginNotAllowed,
                "this decision token is bound to another origin",
            ));
        }
        if live.decision_expires_at_ms <= now_ms {
            return Err(ApiError::new(
                Code::Expired,
                "this decision token has expired",
            ));
        }
        Ok(Admitted {
            id: live.id.clone(),
            kind: PrincipalKind::Browser,
            role: live.role(),
            expires_at_ms: live.decision_expires_at_ms,
        })
    }

    /// Mints a pairing code for a local launcher; the browser that redeems it gets `role`.
    pub(crate) async fn mint_code(&self, via: &str, role: Role, now_ms: i64) -> PairingCode {
        let (code, expires_at_ms) = self.codes().mint(role, now_ms);
        self.audit
            .record(
                AuditKind::PairingMinted,
                None,
                json!({ "via": via, "role": role.as_str(), "expires_at_ms": expires_at_ms }),
            )
            .await;
        PairingCode {
            code,
            epoch: self.epoch.clone(),
            expires_at_ms,
        }
    }

    /// Redeems a pairing code presented from `origin` (the effective Origin, if any) by
    /// a browser whose `User-Agent` was `user_agent`: its session keeps only the device
    /// label made from it.
    #[tracing::instrument(skip_all, fields(origin = origin.unwrap_or("")))]
    pub(crate) async fn redeem(
        &self,
        code: &str,
        origin: Option<&str>,
        user_agent: Option<&str>,
        now_ms: i64,
    ) -> Result<Paired, ApiError> {
        let allowed_origin = origin
            .filter(|o| self.allowed.allows(o))
            .and_then(origin::normalize);
        let spent = {
            let mut codes = self.codes();
            codes
                .check_rate(now_ms)
                .and_then(|()| match &allowed_origin {
                    // Checked before spending: a code shown to a refused origin stays valid.
                    None => Err(ApiError::new(
                        Code::OriginNotAllowed,
                        "pairing needs an allowed Origin",
                    )),
                    Some(_) => codes.spend(code, now_ms),
                })
        };
        let role = match spent {
            Ok(role) => role,
            Err(refusal) => {
                if refusal.code != Code::RateLimited {
                    let detail = json!({ "reason": refusal.code.as_str(), "origin": origin });
                    self.audit
                        .record(AuditKind::PairingFailed, None, detail)
                        .await;
                }
                tracing::info!(reason = refusal.code.as_str(), "pairing refused");
                return Err(refusal);
            }
        };
        let origin = allowed_origin.unwrap_or_default();
        let device = user_agent.and_then(device::label);
        let paired = Paired {
            token: secret::mint::<32>("sta_"),
            decision_token: secret::mint::<32>("std_"),
            principal: uuid::Uuid::now_v7().to_string(),
            decision_expires_at_ms: now_ms + DECISION_TTL_MS,
            expires_at_ms: now_ms + ADMISSION_TTL_MS,
        };
        let (token_digest, decision_digest) = (
            secret::digest(&paired.token),
            secret::digest(&paired.decision_token),
        );
        self.store
            .insert_principal(&NewPrincipal {
                id: &paired.principal,
                epoch: &self.epoch,
                kind: PrincipalKind::Browser.as_str(),
                origin: &origin,
                role,
                device: device.as_deref(),
                token_digest: &token_digest,
                decision_digest: &decision_digest,
                decision_expires_at_ms: paired.decision_expires_at_ms,
                expires_at_ms: paired.expires_at_ms,
                now_ms,
            })
            .await
            .map_err(internal)?;
        self.live.insert(Live::new(
            paired.principal.clone(),
            origin.clone(),
            role,
            (token_digest, decision_digest),
            paired.decision_expires_at_ms,
            paired.expires_at_ms,
            now_ms,
        ));
        // The new session is its own pairing's author: its id, role and origin.
        let by = Actor {
            principal: paired.principal.clone(),
            role,
            origin: Some(origin.clone()),
            epoch: self.epoch.clone(),
        };
        self.audit
            .record_change(
                AuditKind::PairingRedeemed,
                &by,
                &format!("session:{}", paired.principal),
                json!({ "device": device.as_deref() }),
            )
            .await;
        tracing::info!(principal = %paired.principal, "browser paired");
        Ok(paired)
    }

    /// Changes a current-epoch, unrevoked session's role at once (its next request is
    /// judged by the new one); `false` when there is no such session.
    pub(crate) async fn set_role(
        &self,
        id: &str,
        role: Role,
        by: &Actor,
        now_ms: i64,
    ) -> Result<bool, ApiError> {
        let changed = self
            .store
            .set_principal_role(id, &self.epoch, role, now_ms)
            .await
            .map_err(internal)?;
        if !changed {
            return Ok(false);
        }
        if let Some(live) = self.live.by_id(id) {
            live.set_role(role);
        }
        let _ = self
            .revocations
            .send(PrincipalEvent::RoleChanged(id.to_owned()));
        self.audit
            .record_change(
                AuditKind::RoleChanged,
                by,
                &format!("session:{id}"),
                json!({ "role": role.as_str() }),
            )
            .await;
        tracing::info!(principal = id, role = role.as_str(), "role changed");
        Ok(true)
    }

    /// Revokes a current-epoch principal; `false` when unknown or already revoked. `by`
    /// is who asked (`None`: the app, for a reason of its own), for the audit trail.
    #[tracing::instrument(skip_all, fields(principal = id, reason))]
    pub(crate) async fn revoke(
        &self,
        id: &str,
        reason: &str,
        by: Option<&Actor>,
        now_ms: i64,
    ) -> Result<bool, ApiError> {
        let Some(row) = self.session(id).await? else {
            return Ok(false);
        };
        let revoked = self
            .store
            .revoke_principal(&row.id, reason, now_ms)
            .await
            .map_err(internal)?;
        self.live.remove(&row.id);
        if revoked {
            // No receivers (no app watching) is fine.
            let _ = self
                .revocations
                .send(PrincipalEvent::Revoked(row.id.clone()));
            let object = format!("session:{}", row.id);
            let detail = json!({ "reason": reason });
            match by {
                Some(by) => {
                    self.audit
                        .record_change(AuditKind::SessionRevoked, by, &object, detail)
                        .await;
                }
                None => {
                    self.audit
                        .record(AuditKind::SessionRevoked, Some(&row.id), detail)
                        .await;
                }
            }
            tracing::info!("session revoked");
        }
        Ok(revoked)
    }

    /// Revokes whoever holds `bearer`; `None` when it names no live browser principal.
    pub(crate) async fn revoke_bearer(
        &self,
        bearer: &str,
        reason: &str,
        now_ms: i64,
    ) -> Result<Option<String>, ApiError> {
        let Some(live) = self.live.by_token(&secret::digest(bearer)) else {
            return Ok(None);
        };
        // The holder disconnects itself.
        let by = Actor {
            principal: live.id.clone(),
            role: live.role(),
            origin: Some(live.origin.clone()),
            epoch: self.epoch.clone(),
        };
        self.revoke(&live.id, reason, Some(&by), now_ms).await?;
        Ok(Some(live.id.clone()))
    }

    /// A principal of the current epoch, revoked or not.
    pub(crate) async fn session(&self, id: &str) -> Result<Option<PrincipalRow>, ApiError> {
        let row = self.store.principal(id).await.map_err(internal)?;
        Ok(row.filter(|r| r.epoch == self.epoch))
    }

    /// Every principal of the current epoch, oldest first.
    pub(crate) async fn sessions(&self) -> Result<Vec<PrincipalRow>, ApiError> {
        self.store
            .principals_of_epoch(&self.epoch)
            .await
            .map_err(internal)
    }

    #[cfg(test)]
    pub(crate) fn code_prefix(&self) -> String {
        self.codes().prefix().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{APP, TempDir, authority};

    fn refusal<T: std::fmt::Debug>(r: Result<T, ApiError>) -> Code {
        r.expect_err("refused").code
    }

    #[tokio::test]
    async fn admits_daemon_and_browser_tokens_and_refuses_others() {
        let dir = TempDir::new("adm");
        let (_store, a) = authority(&dir, "e1000000aaaa").await;
        let d = a.admit("daemon-token", 0).await.expect("daemon");
        assert_eq!(
            (d.id.as_str(), d.kind),
            (DAEMON_PRINCIPAL, PrincipalKind::Daemon)
        );
        assert_eq!(
            refusal(a.admit("daemon-tokeN", 0).await),
            Code::Unauthorized
        );

        let code = a.mint_code("test", Role::Admin, 0).await;
        assert!(code.code.starts_with(&a.code_prefix()));
        let p = a
            .redeem(&code.code, Some(APP), None, 1)
            .await
            .expect("paired");
        assert!(p.token.starts_with("sta_") && p.decision_token.starts_with("std_"));
        assert_eq!(p.decision_expires_at_ms, 1 + DECISION_TTL_MS);
        let b = a.admit(&p.token, 2).await.expect("browser");
        assert_eq!(
            (b.id.as_str(), b.kind),
            (p.principal.as_str(), PrincipalKind::Browser)
        );
        // The decision token is not an admission token.
        assert_eq!(
            refusal(a.admit(&p.decision_token, 2).await),
            Code::Unauthorized
        );

        let r = a
            .resolve_decision(&p.decision_token, APP, 3)
            .await
            .expect("decision");
        assert_eq!(r.id, p.principal);
        assert_eq!(
            refusal(
                a.resolve_decision(&p.decision_token, "http://evil.example", 3)
                    .await
            ),
            Code::OriginNotAllowed
        );
        assert_eq!(
            refusal(
                a.resolve_decision(&p.decision_token, APP, p.decision_expires_at_ms)
                    .await
            ),
            Code::Expired
        );

        assert!(
            a.revoke(&p.principal, "test", None, 4)
                .await
                .expect("revoke")
        );
        assert!(
            !a.revoke(&p.principal, "test", None, 5)
                .await
                .expect("again")
        );
        assert_eq!(refusal(a.admit(&p.token, 6).await), Code::Revoked);
        assert_eq!(
            refusal(a.resolve_decision(&p.decision_token, APP, 6).await),
            Code::Revoked
        );
    }

    #[tokio::test]
    async fn admission_tokens_expire_in_memory_and_in_the_durable_record() {
        let dir = TempDir::new("adm-exp");
        let (store, a) = authority(&dir, "eeeeeeee0000").await;
        let code = a.mint_code("test", Role::Admin, 0).await;
        let p = a
            .redeem(&code.code, Some(APP), None, 1)
            .await
            .expect("paired");
        assert_eq!(p.expires_at_ms, 1 + ADMISSION_TTL_MS);
        let end = p.expires_at_ms;
        let b = a.admit(&p.token, end - 1).await.expect("good until then");
        assert_eq!(
            b.expires_at_ms, end,
            "the app may cache the verdict only so long"
        );
        // The fast path refuses at the instant, then the durable row answers the same.
        assert_eq!(refusal(a.admit(&p.token, end).await), Code::SessionExpired);
        assert_eq!(
            refusal(a.admit(&p.token, end + 1).await),
            Code::SessionExpired
        );
        assert_eq!(
            refusal(a.resolve_decision(&p.decision_token, APP, end).await),
            Code::SessionExpired
        );
        let sessions = a.sessions().await.expect("sessions");
        assert_eq!(sessions[0].expires_at_ms, end);
        assert!(
            a.revoke(&p.principal, "test", None, end + 2)
                .await
                .expect("revoke")
        );
        assert_eq!(refusal(a.admit(&p.token, end + 3).await), Code::Revoked);

        // A row that never was in memory: only the durable record can refuse it.
        let (token_digest, decision_digest) = (secret::digest("sta_stale"), [8u8; 32]);
        store
            .insert_principal(&NewPrincipal {
                id: "stale",
                epoch: "eeeeeeee0000",
                kind: "browser",
                origin: APP,
                role: Role::Viewer,
                device: None,
                token_digest: &token_digest,
                decision_digest: &decision_digest,
                decision_expires_at_ms: 50,
                expires_at_ms: 100,
                now_ms: 0,
            })
            .await
            .expect("insert");
        assert_eq!(
            refusal(a.admit("sta_stale", 100).await),
            Code::SessionExpired
        );
    }

    #[tokio::test]
    async fn old_epoch_tokens_answer_epoch_ended() {
        let dir = TempDir::new("adm-epoch");
        let (store, first) = authority(&dir, "aaaaaaaa0000").await;
        let code = first.mint_code("test", Role::Admin, 0).await;
        let p = first
            .redeem(&code.code, Some(APP), None, 1)
            .await
            .expect("paired");
        let stale_code = first.mint_code("test", Role::Admin, 2).await;

        store
            .start_epoch("bbbbbbbb0000", 2, 10)
            .await
            .expect("second");
        let allowed = AllowedOrigins::new([APP.to_owned()]);
        let past = store.past_epochs("bbbbbbbb0000").await.expect("past");
        let second = Authority::new(store, "bbbbbbbb0000".into(), &past, "t", allowed, 120_000);
        assert_eq!(refusal(second.admit(&p.token, 11).await), Code::EpochEnded);
        assert_eq!(
            refusal(second.resolve_decision(&p.decision_token, APP, 11).await),
            Code::EpochEnded
        );
        assert_eq!(
            refusal(second.redeem(&stale_code.code, Some(APP), None, 12).await),
            Code::EpochEnded
        );
        assert!(second.sessions().await.expect("list").is_empty());
        assert!(second.session(&p.principal).await.expect("one").is_none());
    }

    #[tokio::test]
    async fn refused_origin_does_not_spend_the_code() {
        let dir = TempDir::new("adm-origin");
        let (store, a) = authority(&dir, "cccccccc0000").await;
        let code = a.mint_code("test", Role::Admin, 0).await;
        for bad in [None, Some("http://evil.example"), Some("null")] {
            assert_eq!(
                refusal(a.redeem(&code.code, bad, None, 1).await),
                Code::OriginNotAllowed
            );
        }
        let p = a
            .redeem(&code.code, Some("HTTP://127.0.0.1:8765"), None, 2)
            .await
            .expect("paired");
        assert_eq!(
            refusal(a.redeem(&code.code, Some(APP), None, 3).await),
            Code::PairingCodeInvalid
        );
        let kinds: Vec<String> = store
            .events_of_epoch("cccccccc0000")
            .await
            .expect("events")
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert_eq!(kinds.iter().filter(|k| *k == "pairing_failed").count(), 4);
        assert!(kinds.contains(&"pairing_minted".to_owned()));
        assert!(kinds.contains(&"pairing_redeemed".to_owned()));
        let sessions = a.sessions().await.expect("sessions");
        assert_eq!(sessions.len(), 1);
        assert_eq!(sessions[0].origin, APP);
        assert_eq!(sessions[0].id, p.principal);
    }

    #[tokio::test]
    async fn revocations_are_broadcast_and_bearers_revoke_themselves() {
        let dir = TempDir::new("adm-rev");
        let (_store, a) = authority(&dir, "dddddddd0000").await;
        let mut rx = a.subscribe();
        let code = a.mint_code("test", Role::Admin, 0).await;
        let p = a
            .redeem(&code.code, Some(APP), None, 1)
            .await
            .expect("paired");
        assert_eq!(
            a.revoke_bearer("daemon-token", "x", 2).await.expect("noop"),
            None
        );
        assert_eq!(
            a.revoke_bearer(&p.token, "disconnect", 2)
                .await
                .expect("revoke"),
            Some(p.principal.clone())
        );
        assert_eq!(
            rx.recv().await.expect("event"),
            PrincipalEvent::Revoked(p.principal.clone())
        );
        assert_eq!(refusal(a.admit(&p.token, 3).await), Code::Revoked);
    }
}
