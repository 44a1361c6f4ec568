//! The background `Watch` task: keeps one `Hello` + `Watch` stream to the daemon open,
//! feeds its epoch, revocation and heartbeat events into [`Verdicts`], and reconnects with
//! backoff (100 ms doubling to 2 s) whenever the stream breaks or stalls.

use std::time::{Duration, Instant};

use studio_proto::{
    PROTOCOL_VERSION,
    v1::{HelloRequest, WatchRequest, watch_event::Event},
};

use super::{LIVE_WINDOW, Verifier, VerifierError};

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Why one stream ended.
#[derive(Debug, thiserror::Error)]
enum StreamEnd {
    #[error(transparent)]
    Verifier(#[from] VerifierError),
    #[error("protocol version {0} is not {PROTOCOL_VERSION}")]
    Version(u32),
    #[error("no event within {LIVE_WINDOW:?}")]
    Stalled,
    #[error("the daemon closed the stream")]
    Closed,
}

pub(super) fn hello() -> HelloRequest {
    HelloRequest {
        protocol_version: PROTOCOL_VERSION,
        client: format!("studio-app/{}", studio_contract::VERSION),
    }
}

/// Runs until the task is aborted.
pub(super) async fn run(verifier: Verifier) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let mut heard = false;
        let end = stream(&verifier, &mut heard).await;
        verifier.verdicts().on_break();
        if heard {
            // The stream had worked: the daemon probably restarted, try again soon.
            backoff = FIRST_BACKOFF;
            tracing::warn!(reason = %end, "verifier watch stream broke");
        } else {
            tracing::debug!(reason = %end, ?backoff, "verifier watch stream unavailable");
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One `Hello` + `Watch`; returns when the stream can no longer be trusted.
async fn stream(verifier: &Verifier, heard: &mut bool) -> StreamEnd {
    let mut client = verifier.client.clone();
    let reply = match verifier.bounded(client.hello(hello())).await {
        Ok(reply) => reply,
        Err(e) => return e.into(),
    };
    if reply.protocol_version != PROTOCOL_VERSION {
        return StreamEnd::Version(reply.protocol_version);
    }
    let mut events = match verifier.bounded(client.watch(WatchRequest {})).await {
        Ok(events) => events,
        Err(e) => return e.into(),
    };
    loop {
        // A stream that stays open but stops beating is as dead as a closed one.
        let event = match tokio::time::timeout(LIVE_WINDOW, events.message()).await {
            Err(_) => return StreamEnd::Stalled,
            Ok(Err(status)) => return VerifierError::Call(status).into(),
            Ok(Ok(None)) => return StreamEnd::Closed,
            Ok(Ok(Some(event))) => event,
        };
        let now = Instant::now();
        let mut verdicts = verifier.verdicts();
        match event.event {
            Some(Event::Epoch(epoch)) => {
                if !*heard {
                    tracing::info!(%epoch, "verifier watch stream live");
                }
                *heard = true;
                verdicts.on_epoch(&epoch, now);
            }
            Some(Event::RevokedPrincipal(id)) => {
                tracing::info!(principal = %id, "principal revoked");
                verdicts.on_revoked(&id, now);
            }
            // Its cached verdicts carry the old role: drop them, as for a revocation.
            Some(Event::ChangedPrincipal(id)) => {
                tracing::info!(principal = %id, "principal's role changed");
                verdicts.on_revoked(&id, now);
            }
            // Liveness begins with the epoch: a beat before it vouches for nothing.
            Some(Event::HeartbeatMs(_)) | None if *heard => verdicts.on_heartbeat(now),
            Some(Event::HeartbeatMs(_)) | None => {}
        }
    }
}
