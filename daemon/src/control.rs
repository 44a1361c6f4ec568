//! The control socket `run/daemon.sock` (`contract::control`): a same-user launcher asks
//! for a pairing code, or the supervisor for a `detach` before it restarts the daemon,
//! with one JSON line, and gets one JSON line back. Codes are never logged.

use std::{sync::Arc, time::Duration};
use studio_contract::lifecycle::Shutdown;

use studio_contract::{
    control::{DaemonReply, DaemonRequest},
    error::{ApiError, Code},
    role::Role,
    time::now_ms,
};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{UnixListener, UnixStream},
};

use crate::{admission::Authority, scheduling::Scheduler};

const MAX_LINE: u64 = 4096;
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts connections until `stop` turns true.
pub(crate) async fn serve(
    listener: UnixListener,
    authority: Arc<Authority>,
    scheduler: Arc<Scheduler>,
    stop: Shutdown,
) {
    let uid = crate::socket::own_uid();
    loop {
        tokio::select! {
            () = stop.triggered() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(handle(stream, authority.clone(), scheduler.clone(), uid));
                }
                Err(error) => {
                    // Usually fd exhaustion: back off instead of spinning.
                    tracing::warn!(%error, "control socket accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

#[tracing::instrument(skip_all, name = "control")]
async fn handle(
    stream: UnixStream,
    authority: Arc<Authority>,
    scheduler: Arc<Scheduler>,
    uid: u32,
) {
    let same_user = stream.peer_cred().is_ok_and(|c| c.uid() == uid);
    let (read, mut write) = stream.into_split();
    let reply = if same_user {
        match tokio::time::timeout(IO_TIMEOUT, read_request(read)).await {
            Ok(Ok(DaemonRequest::Pair { role })) => match authority
                .mint_code("control", role.unwrap_or(Role::Admin), now_ms())
                .await
            {
                Ok(code) => DaemonReply::Pair(code),
                Err(e) => DaemonReply::Error(e.body()),
            },
            Ok(Ok(DaemonRequest::Detach)) => {
                let running = scheduler.detach();
                tracing::info!(
                    running,
                    "detached: the next stop leaves running jobs to their shims"
                );
                DaemonReply::Detached { running }
            }
            Ok(Err(e)) => DaemonReply::Error(e.body()),
            Err(_) => return,
        }
    } else {
        tracing::warn!("control connection from another user refused");
        DaemonReply::Error(ApiError::new(Code::Unauthorized, "not the daemon's user").body())
    };
    let Ok(mut line) = serde_json::to_string(&reply) else {
        return;
    };
    line.push('\n');
    let write_all = async {
        write.write_all(line.as_bytes()).await?;
        write.shutdown().await
    };
    if let Ok(Err(error)) = tokio::time::timeout(IO_TIMEOUT, write_all).await {
        tracing::debug!(%error, "control reply not delivered");
    }
}

async fn read_request(read: tokio::net::unix::OwnedReadHalf) -> Result<DaemonRequest, ApiError> {
    let mut line = String::new();
    BufReader::new(read.take(MAX_LINE))
        .read_line(&mut line)
        .await
        .map_err(|_| ApiError::new(Code::BadRequest, "unreadable request"))?;
    serde_json::from_str(&line).map_err(|_| ApiError::new(Code::BadRequest, "unknown request"))
}
