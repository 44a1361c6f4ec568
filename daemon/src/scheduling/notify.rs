//! The notification sender (docs/OPERATIONS.md, "Notifications"): one task sleeps until
//! the earliest pending delivery (a run's event wakes it: its outbox rows were committed
//! with it), sends what is due, and records each attempt. A delivery is signed with its
//! endpoint's secret, never follows a redirect, takes at most [`ATTEMPT_TIMEOUT`], never
//! reaches studiod's, studio-app's or the worker listener's own ports (its host is
//! resolved here and the connection pinned to the addresses that are not), and is
//! retried on [`BACKOFF`] before it is dead.

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::{Duration, Instant},
};

use ring::hmac;
use serde_json::Value;
use studio_contract::time::now_ms;

use super::{
    Scheduler,
    engine::EngineError,
    store::{Attempted, DeliveryRow, EndpointDeleted, EndpointRow, Note},
};
use crate::audit::Kind;
use crate::{error::chain, store::StoreError};

/// The longest one attempt may take, connecting included.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The waits after each failed attempt; after the last, the delivery is dead.
pub(crate) const BACKOFF: [Duration; 5] = [
    Duration::from_secs(10),
    Duration::from_secs(60),
    Duration::from_secs(300),
    Duration::from_secs(1_800),
    Duration::from_secs(7_200),
];
/// The longest the sender sleeps before it looks again.
const IDLE: Duration = Duration::from_secs(60);
/// Deliveries sent at once.
const AT_ONCE: i64 = 16;
/// How much of a receiver's answer is kept with an attempt.
const ANSWER_KEPT: usize = 512;
/// What an endpoint's signing secret is sealed as (a namespace apart from secrets').
pub(crate) fn sealed_name(endpoint: &str) -> String {
    format!("notify:{endpoint}")
}

/// The waits after attempts 1, 2, … (`STUDIO_NOTIFY_BACKOFF_MS`, comma-separated, for
/// tests; else [`BACKOFF`]).
#[derive(Debug, Clone)]
pub struct Backoff(pub Vec<Duration>);

impl Default for Backoff {
    fn default() -> Self {
        Self(BACKOFF.to_vec())
    }
}

/// `Studio-Signature`: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.
pub(crate) fn signature(secret: &[u8], unix_s: i64, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(unix_s.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    let tag = ctx.sign();
    format!(
        "t={unix_s},v1={}",
        studio_contract::secret::hex(tag.as_ref())
    )
}

/// The body an endpoint of `format` receives for `payload`.
pub(crate) fn body_for(format: &str, payload: &str) -> String {
    if format != "slack" {
        return payload.to_owned();
    }
    let v: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
    let event = v["event"].as_str().unwrap_or("event");
    let text = if event == "test" {
        "Studio: a test notification; this endpoint receives them.".to_owned()
    } else {
        let what = v["schedule"]["name"]
            .as_str()
            .map(|n| format!("schedule {n}"))
            .or_else(|| v["task"]["id"].as_str().map(|t| format!("task {t}")))
            .unwrap_or_else(|| "a run".to_owned());
        let detail = v["run"]["error_line"]
            .as_str()
            .or_else(|| v["run"]["reason"].as_str())
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        format!(
            "Studio: {what} {}{detail} (run {})",
            event.replace('_', " "),
            v["run"]["id"].as_str().unwrap_or("?")
        )
    };
    serde_json::json!({ "text": text }).to_string()
}

/// Whether `addr` is one of this host's own listeners: a loopback or unspecified address
/// on one of `own_ports`.
pub(crate) fn is_own(addr: &SocketAddr, own_ports: &[u16]) -> bool {
    let local = match addr.ip() {
        IpAddr::V4(ip) => ip.is_loopback() || ip.is_unspecified(),
        IpAddr::V6(ip) => {
            ip.is_loopback()
                || ip.is_unspecified()
                || ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || v4.is_unspecified())
        }
    };
    local && own_ports.contains(&addr.port())
}

/// A client for one attempt to `url`: its host resolved here, this host's own listeners
/// left out, and the connection pinned to what is left (no second lookup to rebind).
pub(crate) async fn client_for(url: &str, own_ports: &[u16]) -> Result<reqwest::Client, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
    let host = parsed
        .host_str()
        .ok_or_else(|| "the URL names no host".to_owned())?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = parsed
        .port_or_known_default()
        .ok_or_else(|| "the URL names no port".to_owned())?;
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    let allowed: Vec<SocketAddr> = found
        .into_iter()
        .filter(|a| !is_own(a, own_ports))
        .collect();
    if allowed.is_empty() {
        return Err(format!(
            "{host}:{port} is one of this machine's own Studio listeners: not sent"
        ));
    }
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(ATTEMPT_TIMEOUT)
        .connect_timeout(ATTEMPT_TIMEOUT / 2)
        .resolve_to_addrs(&host, &allowed)
        .user_agent(format!("Studio/{}", studio_contract::VERSION))
        .build()
        .map_err(|e| chain(&e))
}

impl Scheduler {
    /// Makes endpoint `name` for `by` with a fresh signing secret (sealed; answered once);
    /// `None` when the name is taken.
    pub(crate) async fn create_endpoint(
        &self,
        name: &str,
        url: &str,
        format: &str,
        by: &crate::audit::Actor,
    ) -> Result<Option<(EndpointRow, String)>, EngineError> {
        let secret = studio_contract::secret::hex(&studio_contract::secret::random_bytes::<32>());
        let sealed = self.store.sealer().seal(&sealed_name(name), &secret)?;
        let row = EndpointRow {
            name: name.to_owned(),
            url: url.to_owned(),
            format: format.to_owned(),
            created_at_ms: now_ms(),
            created_by: Some(by.principal.clone()),
        };
        let note = Note {
            by,
            kind: Kind::EndpointCreated,
            object: format!("endpoint:{name}"),
            schedule_id: None,
            detail: serde_json::json!({
                "name": name,
                "url": crate::http::shown_url(url),
                "format": format,
            }),
        };
        let made = self.store.create_endpoint(&row, &sealed, &note).await?;
        Ok(made.then_some((row, secret)))
    }

    /// Deletes endpoint `name` for `by`, unless a rule sends to it.
    pub(crate) async fn delete_endpoint(
        &self,
        name: &str,
        by: &crate::audit::Actor,
    ) -> Result<EndpointRow, EngineError> {
        let note = Note {
            by,
            kind: Kind::EndpointDeleted,
            object: format!("endpoint:{name}"),
            schedule_id: None,
            detail: serde_json::json!({ "name": name }),
        };
        match self.store.delete_endpoint(name, &note, now_ms()).await? {
            EndpointDeleted::Deleted(row) => Ok(row),
            EndpointDeleted::NotFound => Err(EngineError::EndpointNotFound),
            EndpointDeleted::InUse(users) => Err(EngineError::EndpointInUse(users)),
        }
    }

    /// Queues a test delivery to endpoint `name` and wakes the sender; its id.
    pub(crate) async fn test_endpoint(&self, name: &str) -> Result<String, EngineError> {
        if self.store.endpoint(name).await?.is_none() {
            return Err(EngineError::EndpointNotFound);
        }
        let id = self.store.enqueue_test(name, now_ms()).await?;
        self.notify_wake.notify_one();
        Ok(id)
    }

    pub(super) async fn notify_forever(self: Arc<Self>) {
        let stop = self.stop.clone();
        loop {
            let sleep = match self.notify_pass().await {
                Ok(Some(next)) => Duration::from_millis(
                    u64::try_from(next.saturating_sub(now_ms())).unwrap_or(0) + 1,
                ),
                Ok(None) => IDLE,
                Err(error) => {
                    tracing::error!(error = %chain(&error), "notification pass failed; again in 1 s");
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                () = tokio::time::sleep(sleep.min(IDLE)) => {}
                () = self.notify_wake.notified() => {}
                () = stop.triggered() => return,
            }
        }
    }

    /// Sends every due delivery; when the next one is due.
    async fn notify_pass(&self) -> Result<Option<i64>, StoreError> {
        loop {
            let due = self.store.due_deliveries(now_ms(), AT_ONCE).await?;
            if due.is_empty() {
                break;
            }
            let sent = futures_util::future::join_all(due.iter().map(|d| self.deliver(d)));
            for result in sent.await {
                result?;
            }
        }
        self.store.next_delivery_at().await
    }

    /// One attempt of `d`, recorded.
    async fn deliver(&self, d: &DeliveryRow) -> Result<(), StoreError> {
        super::CrashPoint::reached(
            self.config.crash_at,
            super::CrashPoint::BeforeDelivery,
            &self.run_dir,
        );
        let began = Instant::now();
        let outcome = self.attempt(d).await;
        let took_ms = i64::try_from(began.elapsed().as_millis()).unwrap_or(i64::MAX);
        let (status, detail, delivered) = match outcome {
            Ok((status, _)) if (200..300).contains(&status) => (Some(status), None, true),
            Ok((status, answer)) => {
                let why = if (300..400).contains(&status) {
                    format!("answered {status}: redirects are not followed")
                } else {
                    format!("answered {status}: {answer}")
                };
                (Some(status), Some(why), false)
            }
            Err(why) => (None, Some(why), false),
        };
        let attempt = usize::try_from(d.attempts).unwrap_or(usize::MAX);
        let retry_at_ms = (!delivered)
            .then(|| self.config.notify_backoff.0.get(attempt))
            .flatten()
            .map(|wait| now_ms().saturating_add(i64::try_from(wait.as_millis()).unwrap_or(0)));
        let outcome = if delivered {
            "delivered"
        } else if retry_at_ms.is_some() {
            "retried"
        } else {
            "dead"
        };
        self.metrics.notified(outcome);
        if !delivered {
            tracing::warn!(
                delivery = %d.id,
                endpoint = %d.endpoint,
                outcome,
                detail = detail.as_deref().unwrap_or(""),
                "notification not delivered"
            );
        }
        let attempted = Attempted {
            took_ms,
            status,
            detail,
            delivered,
            retry_at_ms,
        };
        self.store.record_attempt(&d.id, &attempted, now_ms()).await
    }

    /// Sends `d` once: the receiver's status and the start of its answer, or why nothing
    /// answered.
    async fn attempt(&self, d: &DeliveryRow) -> Result<(u16, String), String> {
        let (endpoint, sealed) = self
            .store
            .endpoint(&d.endpoint)
            .await
            .map_err(|e| format!("cannot read the endpoint: {e}"))?
            .ok_or_else(|| format!("no endpoint is named {:?} any more", d.endpoint))?;
        let secret = self
            .store
            .sealer()
            .open(&sealed_name(&endpoint.name), &sealed)
            .map_err(|e| format!("the endpoint's signing secret cannot be opened: {e}"))?;
        let body = body_for(&endpoint.format, &d.payload);
        let unix_s = now_ms() / 1000;
        let client = client_for(&endpoint.url, &self.config.own_ports).await?;
        let answer = client
            .post(&endpoint.url)
            .header("content-type", "application/json")
            .header("studio-delivery", &d.id)
            .header("studio-event", &d.event)
            .header(
                "studio-signature",
                signature(secret.as_bytes(), unix_s, body.as_bytes()),
            )
            .body(body)
            .send()
            .await
            .map_err(|e| chain(&e))?;
        let status = answer.status().as_u16();
        let text = answer.text().await.unwrap_or_default();
        let mut kept: String = text.chars().take(ANSWER_KEPT).collect();
        if kept.len() < text.len() {
            kept.push('…');
        }
        Ok((status, kept))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_hmac_sha256_of_the_time_a_dot_and_the_body() {
        // Checked against an independent HMAC-SHA256 (RFC 4231 style inputs).
        let sig = signature(b"key", 1_700_000_000, b"{\"a\":1}");
        let key = hmac::Key::new(hmac::HMAC_SHA256, b"key");
        let want = hmac::sign(&key, b"1700000000.{\"a\":1}");
        assert_eq!(
            sig,
            format!(
                "t=1700000000,v1={}",
                studio_contract::secret::hex(want.as_ref())
            )
        );
    }

    #[test]
    fn own_listeners_are_refused_and_others_are_not() {
        let own = [8766, 8765, 8767];
        for addr in [
            "127.0.0.1:8766",
            "127.1.2.3:8765",
            "[::1]:8767",
            "0.0.0.0:8766",
            "[::ffff:127.0.0.1]:8766",
        ] {
            assert!(is_own(&addr.parse().expect("addr"), &own), "{addr}");
        }
        for addr in ["127.0.0.1:9000", "10.0.0.5:8766", "[2001:db8::1]:8766"] {
            assert!(!is_own(&addr.parse().expect("addr"), &own), "{addr}");
        }
    }

    #[test]
    fn slack_gets_one_line_and_json_the_event() {
        let payload = r#"{"event":"failed","run":{"id":"r1","error_line":"exit 3"},"schedule":{"id":"s","name":"nightly"}}"#;
        assert_eq!(body_for("json", payload), payload);
        let slack: Value = serde_json::from_str(&body_for("slack", payload)).expect("json");
        assert_eq!(
            slack["text"],
            "Studio: schedule nightly failed: exit 3 (run r1)"
        );
    }
}
