//! Pairing links: a fresh code from studiod's control socket (`run/daemon.sock`), the
//! link a browser opens, a link from a running supervisor, printing one and opening it;
//! and the `detach` a daemon restart asks there.
//! A code is never logged: it reaches stdout (the one line the user asked for) or the
//! supervisor socket's reply, nothing else.

use std::{io, path::PathBuf, process::Stdio, time::Duration};

use studio_contract::{
    control::{self, DaemonReply, DaemonRequest, PairingCode},
    error::ErrorBody,
    home::Home,
    role::Role,
};

use crate::{
    Error,
    control::{self as supervisor, Reply, Request},
};

/// How long studiod may take to mint a code.
const DAEMON_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub(crate) enum PairError {
    #[error("studiod's control socket did not answer: {0}")]
    Unavailable(#[source] io::Error),
    #[error("studiod refused: {}: {}", .0.code, .0.message)]
    Refused(ErrorBody),
}

impl PairError {
    /// Whether nothing listens on the socket (as opposed to a refusal or a broken reply).
    pub(crate) fn is_absent(&self) -> bool {
        matches!(self, PairError::Unavailable(e)
            if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused))
    }
}

/// Asks studiod for a code for `role` (`None`: admin).
pub(crate) async fn daemon_code(
    socket: PathBuf,
    role: Option<Role>,
) -> Result<PairingCode, PairError> {
    match ask(socket, DaemonRequest::Pair { role }).await? {
        DaemonReply::Pair(code) => Ok(code),
        DaemonReply::Error(body) => Err(PairError::Refused(body)),
        other => Err(unexpected(&other)),
    }
}

/// Asks studiod to leave its running jobs to their shims at its coming stop (a restart
/// that must not cancel them); how many it leaves.
pub(crate) async fn detach_daemon(socket: PathBuf) -> Result<usize, PairError> {
    match ask(socket, DaemonRequest::Detach).await? {
        DaemonReply::Detached { running } => Ok(running),
        DaemonReply::Error(body) => Err(PairError::Refused(body)),
        other => Err(unexpected(&other)),
    }
}

/// One request on the control socket. The client is blocking std I/O, so it runs off the
/// runtime.
async fn ask(socket: PathBuf, req: DaemonRequest) -> Result<DaemonReply, PairError> {
    tokio::task::spawn_blocking(move || control::request(&socket, &req, DAEMON_TIMEOUT))
        .await
        .map_err(|e| PairError::Unavailable(io::Error::other(e)))?
        .map_err(PairError::Unavailable)
}

fn unexpected(reply: &DaemonReply) -> PairError {
    PairError::Unavailable(io::Error::other(format!(
        "an answer to another request: {reply:?}"
    )))
}

/// Like [`daemon_code`], but waits up to `patience` for the socket to appear: studiod may
/// announce readiness a moment before its control socket accepts.
pub(crate) async fn daemon_code_patiently(
    socket: PathBuf,
    patience: Duration,
) -> Result<PairingCode, PairError> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match daemon_code(socket.clone(), None).await {
            Err(e) if e.is_absent() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// `http://127.0.0.1:8765/#pair=<code>`: the code rides in the fragment, which browsers
/// never send to a server.
pub(crate) fn link(app_url: &str, code: &str) -> String {
    format!("{}/#pair={code}", app_url.trim_end_matches('/'))
}

/// Opens a link in the desktop's browser; failing to is a warning, not an error.
pub(crate) fn open(url: &str) {
    let spawned = tokio::process::Command::new("xdg-open")
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    match spawned {
        // Reap it in the background so no zombie is left behind.
        Ok(mut child) => {
            tokio::spawn(async move {
                if let Ok(status) = child.wait().await
                    && !status.success()
                {
                    tracing::warn!(%status, "xdg-open could not open the link; open it by hand");
                }
            });
        }
        Err(error) => {
            tracing::warn!(%error, "could not run xdg-open; open the link by hand");
        }
    }
}

/// A fresh pairing link for `role` from a running supervisor.
pub(crate) async fn supervisor_link(home: &Home, role: Option<Role>) -> Result<String, Error> {
    match supervisor::ask(home, &Request::Pair { role }).await? {
        Reply::Pair(link) => Ok(link.url),
        other => Err(supervisor::unexpected(&other)),
    }
}

/// The one place a pairing link is shown: stdout, and the browser if asked (even when
/// stdout is gone).
pub(crate) async fn print_link(url: &str, open: bool) -> Result<(), Error> {
    let printed = outln!("Studio is ready: {url}");
    if open {
        self::open(url);
        // Give xdg-open a moment before a short-lived process exits.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    printed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    #[test]
    fn links_carry_the_code_in_the_fragment() {
        assert_eq!(
            link("http://127.0.0.1:8765", "abc"),
            "http://127.0.0.1:8765/#pair=abc"
        );
        assert_eq!(
            link("https://studio.example/", "abc"),
            "https://studio.example/#pair=abc"
        );
    }

    #[tokio::test]
    async fn a_missing_daemon_socket_is_absent() {
        let dir = TestDir::new("pair");
        let err = daemon_code_patiently(dir.path().join("daemon.sock"), Duration::from_millis(200))
            .await
            .expect_err("no daemon");
        assert!(err.is_absent(), "{err}");
    }

    #[tokio::test]
    async fn codes_come_from_the_daemon_socket() {
        use std::io::{BufRead, BufReader, Write};
        let dir = TestDir::new("pair-ok");
        let path = dir.path().join("daemon.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut line = String::new();
            BufReader::new(&s).read_line(&mut line).expect("read");
            assert_eq!(line.trim(), r#"{"op":"pair"}"#);
            s.write_all(b"{\"pair\":{\"code\":\"c0de\",\"epoch\":\"e\",\"expires_at_ms\":9}}\n")
                .expect("write");
        });
        let code = daemon_code(path, None).await.expect("code");
        assert_eq!(code.code, "c0de");
        assert_eq!(code.expires_at_ms, 9);
        server.join().expect("server");
    }
}
