//! The daemon's authority over credentials: admitting bearers, resolving decision
//! tokens, redeeming pairing codes, revoking principals and ending the epoch. The HTTP
//! API and the verifier both call this one implementation, so their verdicts cannot
//! drift apart.
//!
//! The durable record (principals, pairing codes, the epoch) is the database's; what is
//! here is a cache of it ([`LivePrincipals`]) and the rate limit. On a database several
//! studiod share, any member admits a principal paired through another (read from its
//! row, then held), and a member tells the others of what it revoked, re-roled or
//! rotated (`NOTIFY studio_principals`, [`Authority::on_note`]); each re-reads the
//! state of what it holds every second as well ([`Authority::resync`]), so a change
//! reaches every member, and through its verifier stream every studio-app, within a
//! second even when an announcement is lost.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use serde_json::json;
use studio_contract::{
    ADMISSION_TTL_MS,
    control::PairingCode,
    device,
    error::{ApiError, Code},
    lifecycle::Shutdown,
    origin::{self, AllowedOrigins},
    role::Role,
    secret::{self, Digest},
    time::now_ms,
};
use tokio::sync::broadcast::{self, error::RecvError};

use crate::{
    audit::{Actor, Audit, Kind as AuditKind},
    epoch::EpochCell,
    error::chain,
    pairing::{CodeBook, MAX_OUTSTANDING},
    principals::{Live, LivePrincipals},
    store::{NewPrincipal, PrincipalRow, Store, StoreError, TokenKind},
};

/// How long a decision token is good for.
pub(crate) const DECISION_TTL_MS: i64 = 8 * 60 * 60 * 1000;
/// The id the daemon token is admitted as.
pub(crate) const DAEMON_PRINCIPAL: &str = "daemon";
/// How often a member of a cluster re-reads the epoch and the principals it holds.
pub(crate) const RESYNC: Duration = Duration::from_secs(1);

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
    /// The epoch it was admitted in (a verdict is good for that epoch only).
    pub epoch: String,
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
    /// The epoch it belongs to.
    pub epoch: String,
}

/// A rotation: the epoch that ended and the one that stands now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rotated {
    pub previous: String,
    pub epoch: String,
}

/// What happened to a principal, or to all of them, for the verifier's watchers: each
/// drops what it cached for that principal (for every one, when the epoch changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PrincipalEvent {
    Revoked(String),
    RoleChanged(String),
    EpochChanged(String),
}

pub(crate) struct Authority {
    epoch: EpochCell,
    /// This studiod's member id: it names the announcements it makes.
    member: String,
    store: Store,
    daemon_token: Digest,
    allowed: AllowedOrigins,
    /// The epoch's code book; held while the epoch changes, so a code is minted under
    /// the epoch its prefix names.
    codes: Mutex<(String, CodeBook)>,
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
        epoch: &str,
        past_epochs: &[String],
        daemon_token: &str,
        allowed: AllowedOrigins,
        pairing_ttl_ms: i64,
    ) -> Self {
        let (revocations, _) = broadcast::channel(256);
        let cell = EpochCell::new(epoch);
        Self {
            codes: Mutex::new((
                epoch.to_owned(),
                CodeBook::new(epoch, past_epochs, pairing_ttl_ms),
            )),
            audit: Audit::new(store.clone(), cell.clone()),
            epoch: cell,
            member: String::new(),
            store,
            daemon_token: secret::digest(daemon_token),
            allowed,
            live: LivePrincipals::default(),
            revocations,
        }
    }

    /// Names this studiod's announcements to the other members (`run/member`).
    pub(crate) fn for_member(mut self, member: &str) -> Self {
        member.clone_into(&mut self.member);
        self
    }

    /// The epoch now.
    pub(crate) fn epoch(&self) -> String {
        self.epoch.get()
    }

    /// The epoch, as it changes, for what stamps it elsewhere.
    pub(crate) fn epoch_cell(&self) -> &EpochCell {
        &self.epoch
    }

    pub(crate) fn audit(&self) -> &Audit {
        &self.audit
    }

    /// The store principals and enrolled apps are kept in.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Whether a presented Origin value is on the allow-list.
    pub(crate) fn origin_allowed(&self, origin: &str) -> bool {
        self.allowed.allows(origin)
    }

    /// Revocations, role changes and epoch changes, as they happen.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<PrincipalEvent> {
        self.revocations.subscribe()
    }

    fn codes(&self) -> std::sync::MutexGuard<'_, (String, CodeBook)> {
        self.codes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live principal holding a token of `kind` with this digest: from memory, or
    /// from its row when it is of the current epoch, unrevoked and unexpired (paired
    /// through another member, or forgotten here on a change that did not concern
    /// it); `Err` says why not.
    async fn live_by(
        &self,
        kind: TokenKind,
        digest: &Digest,
        epoch: &str,
        now_ms: i64,
    ) -> Result<Arc<Live>, ApiError> {
        let held = match kind {
            TokenKind::Admission => self.live.by_token(digest),
            TokenKind::Decision => self.live.by_decision(digest),
        };
        if let Some(live) = held.filter(|l| l.epoch == epoch) {
            return Ok(live);
        }
        // Read before the row: a forgetting in between leaves the principal unheld.
        let generation = self.live.generation();
        let found = self
            .store
            .principal_for_admission(kind, digest)
            .await
            .map_err(internal)?;
        let Some(found) = found else {
            return Err(unauthorized());
        };
        let r = &found.row;
        if r.revoked_at_ms.is_some()
            || r.epoch != epoch
            || r.expires_at_ms <= now_ms
            || r.kind != PrincipalKind::Browser.as_str()
        {
            return Err(self.classify(Some(found.row), epoch, now_ms));
        }
        let live = Live::new(
            r.id.clone(),
            r.epoch.clone(),
            r.origin.clone(),
            r.role,
            (found.token_digest, found.decision_digest),
            (r.decision_expires_at_ms, r.expires_at_ms),
            now_ms,
        );
        Ok(self.live.insert_unless_forgotten(live, generation))
    }

    /// Admits the daemon token or a current-epoch, unrevoked, unexpired admission token.
    #[tracing::instrument(skip_all, fields(principal))]
    pub(crate) async fn admit(&self, bearer: &str, now_ms: i64) -> Result<Admitted, ApiError> {
        let digest = secret::digest(bearer);
        let epoch = self.epoch.get();
        if secret::digests_equal(&digest, &self.daemon_token) {
            return Ok(Admitted {
                id: DAEMON_PRINCIPAL.to_owned(),
                kind: PrincipalKind::Daemon,
                role: Role::Admin,
                expires_at_ms: 0,
                epoch,
            });
        }
        let live = self
            .live_by(TokenKind::Admission, &digest, &epoch, now_ms)
            .await?;
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
        Ok(Admitted {
            id: live.id.clone(),
            kind: PrincipalKind::Browser,
            role: live.role(),
            expires_at_ms: live.expires_at_ms,
            epoch,
        })
    }

    /// Why a credential that is not a live principal of `epoch` is refused.
    fn classify(&self, row: Option<PrincipalRow>, epoch: &str, now_ms: i64) -> ApiError {
        match row {
            Some(r) if r.revoked_at_ms.is_some() => {
                ApiError::new(Code::Revoked, "this credential was revoked")
            }
            Some(r) if r.epoch != epoch => ApiError::new(
                Code::EpochEnded,
                "this credential belongs to an earlier epoch",
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
        let epoch = self.epoch.get();
        let live = self
            .live_by(TokenKind::Decision, &digest, &epoch, now_ms)
            .await?;
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
            epoch,
        })
    }

    /// Mints a pairing code for a local launcher; the browser that redeems it gets `role`.
    pub(crate) async fn mint_code(
        &self,
        via: &str,
        role: Role,
        now_ms: i64,
    ) -> Result<PairingCode, ApiError> {
        let (epoch, minted) = {
            let codes = self.codes();
            (codes.0.clone(), codes.1.mint(now_ms))
        };
        self.store
            .mint_code(
                &minted.digest,
                &epoch,
                role,
                (now_ms, minted.expires_at_ms),
                MAX_OUTSTANDING,
            )
            .await
            .map_err(internal)?;
        self.audit
            .record(
                AuditKind::PairingMinted,
                None,
                json!({ "via": via, "role": role.as_str(), "expires_at_ms": minted.expires_at_ms }),
            )
            .await;
        Ok(PairingCode {
            code: minted.code,
            epoch,
            expires_at_ms: minted.expires_at_ms,
        })
    }

    /// Spends `code` if it is an outstanding code of `epoch`: the role it was minted for.
    async fn spend(&self, code: &str, epoch: &str, now_ms: i64) -> Result<Role, ApiError> {
        // By its digest: the lookup's timing says nothing of any stored code.
        let spent = self
            .store
            .spend_code(&secret::digest(code), epoch, now_ms)
            .await
            .map_err(internal)?;
        spent.ok_or_else(|| self.codes().1.refuse(code, now_ms))
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
        let epoch = self.epoch.get();
        let checked = self.codes().1.check_rate(now_ms);
        let spent = match (checked, &allowed_origin) {
            (Err(limited), _) => Err(limited),
            // Checked before spending: a code shown to a refused origin stays valid.
            (Ok(()), None) => Err(ApiError::new(
                Code::OriginNotAllowed,
                "pairing needs an allowed Origin",
            )),
            (Ok(()), Some(_)) => self.spend(code, &epoch, now_ms).await,
        };
        let role = match spent {
            Ok(role) => role,
            Err(refusal) => {
                if !matches!(refusal.code, Code::RateLimited | Code::Internal) {
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
            epoch: epoch.clone(),
        };
        let (token_digest, decision_digest) = (
            secret::digest(&paired.token),
            secret::digest(&paired.decision_token),
        );
        self.store
            .insert_principal(&NewPrincipal {
                id: &paired.principal,
                epoch: &epoch,
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
            epoch.clone(),
            origin.clone(),
            role,
            (token_digest, decision_digest),
            (paired.decision_expires_at_ms, paired.expires_at_ms),
            now_ms,
        ));
        // The new session is its own pairing's author: its id, role and origin.
        let by = Actor {
            principal: paired.principal.clone(),
            role,
            origin: Some(origin.clone()),
            epoch,
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

    /// Tells the other members of a change (nothing on SQLite). A lost announcement is
    /// caught by their next [`Authority::resync`].
    async fn announce(&self, what: &str, id: &str) {
        if let Err(error) = self.store.announce_identity(&self.member, what, id).await {
            tracing::warn!(error = %chain(&error), what, "cannot announce an identity change");
        }
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
            .set_principal_role(id, &self.epoch.get(), role, now_ms)
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
        self.announce("role", id).await;
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
            self.announce("revoked", &row.id).await;
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
        let epoch = self.epoch.get();
        let Ok(live) = self
            .live_by(
                TokenKind::Admission,
                &secret::digest(bearer),
                &epoch,
                now_ms,
            )
            .await
        else {
            return Ok(None);
        };
        // The holder disconnects itself.
        let by = Actor {
            principal: live.id.clone(),
            role: live.role(),
            origin: Some(live.origin.clone()),
            epoch,
        };
        self.revoke(&live.id, reason, Some(&by), now_ms).await?;
        Ok(Some(live.id.clone()))
    }

    /// Ends the epoch on purpose: every browser of every member pairs again. Answers the
    /// epoch that ended and the one that stands (another member's, when it rotated at
    /// the same moment: the epoch ended either way).
    pub(crate) async fn rotate(&self, by: &Actor, now_ms: i64) -> Result<Rotated, ApiError> {
        let previous = self.epoch.get();
        let new = secret::hex(&secret::random_bytes::<16>());
        let outcome = self
            .store
            .rotate_epoch(&previous, &new, std::process::id(), now_ms)
            .await
            .map_err(internal)?;
        let epoch = match outcome {
            Ok(()) => {
                self.switch(&new);
                self.announce("epoch", &new).await;
                self.audit
                    .record_change(
                        AuditKind::EpochRotated,
                        by,
                        &format!("epoch:{new}"),
                        json!({ "previous": previous }),
                    )
                    .await;
                new
            }
            Err(standing) => {
                self.switch(&standing);
                standing
            }
        };
        Ok(Rotated { previous, epoch })
    }

    /// Admits under `new` from now on: the code book turns over, every held principal
    /// is forgotten and every verifier stream told.
    fn switch(&self, new: &str) {
        {
            let mut codes = self.codes();
            if codes.0 == new {
                return;
            }
            let next = codes.1.next(&codes.0, new);
            *codes = (new.to_owned(), next);
            self.epoch.set(new);
            self.live.clear();
        }
        let _ = self
            .revocations
            .send(PrincipalEvent::EpochChanged(new.to_owned()));
        tracing::info!(epoch = new, "epoch changed");
    }

    /// Forgets a principal another member changed and tells the verifier streams.
    fn forget(&self, id: &str, event: PrincipalEvent) {
        self.live.remove(id);
        let _ = self.revocations.send(event);
    }

    /// Another member's announcement (`<member> <what> <id>`: [`Authority::announce`]).
    pub(crate) async fn on_note(&self, payload: &str) {
        let mut parts = payload.splitn(3, ' ');
        let (Some(member), Some(what), Some(id)) = (parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        if member == self.member {
            return;
        }
        match what {
            "revoked" => self.forget(id, PrincipalEvent::Revoked(id.to_owned())),
            "role" => self.forget(id, PrincipalEvent::RoleChanged(id.to_owned())),
            // The cluster's epoch as it stands, not the payload's: two rotations' notes
            // must not leave a member on the first.
            "epoch" => self.resync(now_ms()).await,
            _ => {}
        }
    }

    /// Re-reads the cluster's epoch and the state of every principal held: what changed
    /// through another member without this one hearing of it is acted on now.
    pub(crate) async fn resync(&self, now_ms: i64) {
        let epoch = match self.store.cluster_epoch().await {
            Ok(Some(epoch)) => epoch,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(error = %chain(&error), "cannot read the cluster's epoch");
                return;
            }
        };
        if !self.epoch.is(&epoch) {
            self.switch(&epoch);
            return;
        }
        let held = self.live.ids();
        if held.is_empty() {
            return;
        }
        let states = match self.store.principal_states(&epoch, now_ms).await {
            Ok(states) => states,
            Err(error) => {
                tracing::warn!(error = %chain(&error), "cannot re-read the principals");
                return;
            }
        };
        let states: HashMap<_, _> = states.into_iter().map(|s| (s.id.clone(), s)).collect();
        for id in held {
            let Some(live) = self.live.by_id(&id) else {
                continue;
            };
            match states.get(&id) {
                // Expired (it refuses itself) or gone: nothing a stream could still hold.
                None => {
                    self.live.remove(&id);
                }
                Some(s) if s.revoked => self.forget(&id, PrincipalEvent::Revoked(id.clone())),
                Some(s) if s.role != live.role() => {
                    self.forget(&id, PrincipalEvent::RoleChanged(id.clone()));
                }
                Some(_) => {}
            }
        }
    }

    /// On a shared database: acts on the other members' announcements (`notes`, from
    /// the member's listener) and re-reads every [`RESYNC`], until stopped.
    pub(crate) async fn follow_cluster(
        self: Arc<Self>,
        mut notes: broadcast::Receiver<String>,
        stop: Shutdown,
    ) {
        let mut tick = tokio::time::interval(RESYNC);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                note = notes.recv() => match note {
                    Ok(payload) => self.on_note(&payload).await,
                    Err(RecvError::Lagged(_)) => self.resync(now_ms()).await,
                    Err(RecvError::Closed) => return,
                },
                _ = tick.tick() => self.resync(now_ms()).await,
                () = stop.triggered() => return,
            }
        }
    }

    /// A principal of the current epoch, revoked or not.
    pub(crate) async fn session(&self, id: &str) -> Result<Option<PrincipalRow>, ApiError> {
        let row = self.store.principal(id).await.map_err(internal)?;
        Ok(row.filter(|r| self.epoch.is(&r.epoch)))
    }

    /// Every principal of the current epoch, oldest first.
    pub(crate) async fn sessions(&self) -> Result<Vec<PrincipalRow>, ApiError> {
        self.store
            .principals_of_epoch(&self.epoch.get())
            .await
            .map_err(internal)
    }

    #[cfg(test)]
    pub(crate) fn code_prefix(&self) -> String {
        self.codes().1.prefix().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{APP, DAEMON_TOKEN, TempDir, authority};

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

        let code = a.mint_code("test", Role::Admin, 0).await.expect("mint");
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
        let code = a.mint_code("test", Role::Admin, 0).await.expect("mint");
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
        let code = first.mint_code("test", Role::Admin, 0).await.expect("mint");
        let p = first
            .redeem(&code.code, Some(APP), None, 1)
            .await
            .expect("paired");
        let stale_code = first.mint_code("test", Role::Admin, 2).await.expect("mint");

        // The next start of a studiod alone; on a shared database, a rotation.
        store
            .rotate_epoch("aaaaaaaa0000", "bbbbbbbb0000", 2, 10)
            .await
            .expect("second")
            .expect("rotated");
        let allowed = AllowedOrigins::new([APP.to_owned()]);
        let past = store.past_epochs("bbbbbbbb0000").await.expect("past");
        let second = Authority::new(store, "bbbbbbbb0000", &past, "t", allowed, 120_000);
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
        let code = a.mint_code("test", Role::Admin, 0).await.expect("mint");
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
        let code = a.mint_code("test", Role::Admin, 0).await.expect("mint");
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

    #[tokio::test]
    async fn pairing_codes_are_rows_spent_once_until_they_expire_and_bounded() {
        let dir = TempDir::new("adm-codes");
        let (_store, a) = authority(&dir, "ffffffff0000").await;
        let code = |r: Result<PairingCode, ApiError>| r.expect("mint").code;
        let once = code(a.mint_code("test", Role::Viewer, 0).await);
        let p = a.redeem(&once, Some(APP), None, 1).await.expect("paired");
        assert_eq!(
            a.admit(&p.token, 2).await.expect("admitted").role,
            Role::Viewer
        );
        assert_eq!(
            refusal(a.redeem(&once, Some(APP), None, 2).await),
            Code::PairingCodeInvalid
        );
        let late = a.mint_code("test", Role::Admin, 10).await.expect("mint");
        assert_eq!(
            refusal(
                a.redeem(&late.code, Some(APP), None, late.expires_at_ms)
                    .await
            ),
            Code::PairingCodeInvalid
        );
        // Beyond the bound the oldest outstanding code goes.
        let first = code(a.mint_code("test", Role::Admin, 20).await);
        let second = code(a.mint_code("test", Role::Admin, 21).await);
        for t in 0..MAX_OUTSTANDING as i64 - 1 {
            a.mint_code("test", Role::Admin, 22 + t)
                .await
                .expect("mint");
        }
        assert_eq!(
            refusal(a.redeem(&first, Some(APP), None, 50).await),
            Code::PairingCodeInvalid
        );
        assert!(a.redeem(&second, Some(APP), None, 50).await.is_ok());
    }

    /// Two studiod on one database: what one pairs, revokes, re-roles or rotates, the
    /// other admits or refuses alike, by its announcements or its next re-read.
    #[tokio::test]
    async fn members_share_pairings_revocations_roles_and_the_epoch() {
        let dir = TempDir::new("adm-members");
        let (store, a) = authority(&dir, "abababab0000").await;
        let a = a.for_member("a");
        let past = store.past_epochs("abababab0000").await.expect("past");
        let other = crate::testing::same_database(&store, &dir).await;
        let allowed = AllowedOrigins::new([APP.to_owned()]);
        let b = Authority::new(other, "abababab0000", &past, DAEMON_TOKEN, allowed, 120_000)
            .for_member("b");
        let mut heard = a.subscribe();

        // Minted through one, redeemed through the other, admitted by both.
        let code = a.mint_code("test", Role::Admin, 0).await.expect("mint");
        let p = b
            .redeem(&code.code, Some(APP), None, 1)
            .await
            .expect("paired");
        assert_eq!(a.admit(&p.token, 2).await.expect("by a").id, p.principal);
        assert_eq!(
            a.resolve_decision(&p.decision_token, APP, 2)
                .await
                .expect("a decision through a")
                .id,
            p.principal
        );
        assert_eq!(b.admit(&p.token, 2).await.expect("by b").id, p.principal);
        let q = {
            let code = b.mint_code("test", Role::Admin, 3).await.expect("mint");
            a.redeem(&code.code, Some(APP), None, 3)
                .await
                .expect("paired")
        };
        assert!(b.admit(&q.token, 4).await.is_ok());

        // A role changed through b: a hears it by its re-read (no announcement here).
        let admin = Actor::studiod("abababab0000");
        assert!(
            b.set_role(&p.principal, Role::Viewer, &admin, 5)
                .await
                .expect("role")
        );
        assert_eq!(a.admit(&p.token, 6).await.expect("held").role, Role::Admin);
        a.resync(6).await;
        assert_eq!(
            heard.recv().await.expect("event"),
            PrincipalEvent::RoleChanged(p.principal.clone())
        );
        assert_eq!(
            a.admit(&p.token, 7).await.expect("again").role,
            Role::Viewer
        );

        // A revocation through b: by its announcement, and by the re-read.
        assert!(
            b.revoke(&p.principal, "test", None, 8)
                .await
                .expect("revoke")
        );
        a.on_note(&format!("b revoked {}", p.principal)).await;
        assert_eq!(
            heard.recv().await.expect("event"),
            PrincipalEvent::Revoked(p.principal.clone())
        );
        assert_eq!(refusal(a.admit(&p.token, 9).await), Code::Revoked);
        assert!(
            b.revoke(&q.principal, "test", None, 10)
                .await
                .expect("revoke")
        );
        a.on_note(&format!("a revoked {}", q.principal)).await;
        assert!(
            a.admit(&q.token, 11).await.is_ok(),
            "its own note is no news"
        );
        a.resync(11).await;
        assert_eq!(
            heard.recv().await.expect("event"),
            PrincipalEvent::Revoked(q.principal.clone())
        );
        assert_eq!(refusal(a.admit(&q.token, 12).await), Code::Revoked);

        // The epoch rotated through b ends a's too: its sessions and codes are done.
        let r = {
            let code = a.mint_code("test", Role::Admin, 13).await.expect("mint");
            b.redeem(&code.code, Some(APP), None, 13)
                .await
                .expect("paired")
        };
        assert!(a.admit(&r.token, 14).await.is_ok());
        let unspent = a.mint_code("test", Role::Admin, 14).await.expect("mint");
        let rotated = b.rotate(&admin, 15).await.expect("rotate");
        assert_eq!(rotated.previous, "abababab0000");
        assert_eq!(b.epoch(), rotated.epoch);
        a.on_note(&format!("b epoch {}", rotated.epoch)).await;
        assert_eq!(a.epoch(), rotated.epoch);
        assert_eq!(
            heard.recv().await.expect("event"),
            PrincipalEvent::EpochChanged(rotated.epoch.clone())
        );
        for member in [&a, &b] {
            assert_eq!(refusal(member.admit(&r.token, 16).await), Code::EpochEnded);
            assert_eq!(
                refusal(member.resolve_decision(&r.decision_token, APP, 16).await),
                Code::EpochEnded
            );
        }
        assert_eq!(
            refusal(b.redeem(&unspent.code, Some(APP), None, 16).await),
            Code::EpochEnded
        );
        // Codes of the new epoch pair through either.
        let code = b.mint_code("test", Role::Admin, 17).await.expect("mint");
        assert!(code.code.starts_with(&rotated.epoch[..8]));
        let s = a
            .redeem(&code.code, Some(APP), None, 17)
            .await
            .expect("paired");
        assert_eq!(s.epoch, rotated.epoch);
        assert!(b.admit(&s.token, 18).await.is_ok());
        // Rotating from a stale epoch answers the one that stands.
        let c = Authority::new(
            crate::testing::same_database(&store, &dir).await,
            "abababab0000",
            &[],
            DAEMON_TOKEN,
            AllowedOrigins::new([APP.to_owned()]),
            120_000,
        );
        let late = c.rotate(&admin, 19).await.expect("rotate");
        assert_eq!(late.epoch, rotated.epoch);
        assert_eq!(c.epoch(), rotated.epoch);
    }

    /// Alone, each start is a new epoch; on a shared database a member adopts the
    /// cluster's, so its restart logs nobody out.
    #[tokio::test]
    async fn a_start_adopts_the_clusters_epoch_only_when_shared() {
        let dir = TempDir::new("adm-begin");
        let store = crate::testing::open_store(&dir).await;
        assert_eq!(
            store.begin_epoch("e1", 1, 0).await.expect("first"),
            ("e1".to_owned(), true)
        );
        let again = store.begin_epoch("e2", 2, 1).await.expect("second");
        if crate::testing::on_postgres() {
            assert_eq!(again, ("e1".to_owned(), false));
            assert_eq!(store.epoch_stopped_at("e1").await.expect("e1"), None);
        } else {
            assert_eq!(again, ("e2".to_owned(), true));
        }
        assert_eq!(store.cluster_epoch().await.expect("epoch"), Some(again.0));
    }
}
