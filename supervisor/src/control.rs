//! `run/supervisor.sock`: the supervisor's control socket. One JSON request line, one JSON
//! reply line (docs/ARCHITECTURE.md, "Supervisor"). The wire types, the server (0600,
//! peer uid checked before anything is read) and the client the CLI uses.

use std::{
    fs, future::Future, io, os::unix::fs::PermissionsExt, path::Path, sync::Arc, time::Duration,
};

use serde::{Deserialize, Serialize};
use studio_contract::{
    error::{ApiError, Code, ErrorBody},
    home::Home,
    role::Role,
    socket::{Removal, SocketFile},
};
use tokio::{
    io::{AsyncWriteExt, BufReader},
    net::{UnixListener, UnixStream},
};

use crate::{Error, logs::read_line_bounded};

/// A request line longer than this is refused: every valid one is tiny.
const MAX_REQUEST: usize = 4096;
/// How long a peer may take to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one exchange with the supervisor (a pair request waits on studiod too).
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChildName {
    Daemon,
    App,
}

impl ChildName {
    pub fn as_str(self) -> &'static str {
        match self {
            ChildName::Daemon => "daemon",
            ChildName::App => "app",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Status,
    Restart {
        child: ChildName,
    },
    Stop,
    /// A fresh pairing link; the browser that opens it gets `role` (absent: admin).
    Pair {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<Role>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Status(Box<Status>),
    Ok(bool),
    Pair(PairLink),
    Error(ErrorBody),
}

impl Reply {
    pub(crate) fn error(code: Code, message: impl Into<String>) -> Self {
        Reply::Error(ApiError::new(code, message).body())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub supervisor: SupervisorInfo,
    pub app_url: String,
    /// Where studio-app listens on this machine (the same as `app_url` unless a public
    /// origin fronts it): what this machine's own commands call, never through a proxy.
    #[serde(default)]
    pub app_origin: String,
    pub children: Children,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorInfo {
    pub pid: u32,
    pub home: String,
    pub started_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Children {
    pub daemon: ChildStatus,
    pub app: ChildStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Starting,
    Running,
    Backoff,
    Failed,
    Stopped,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Running => "running",
            State::Backoff => "backoff",
            State::Failed => "failed",
            State::Stopped => "stopped",
        }
    }
}

/// One child as `status` reports it; unknown values are `null`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildStatus {
    pub pid: Option<u32>,
    pub state: State,
    pub restarts: u32,
    /// RFC 3339, when the current process was started.
    pub started_at: Option<String>,
    /// studiod only: the epoch its readiness line announced.
    pub epoch: Option<String>,
    pub addr: Option<String>,
    /// Why the last process ended, when it ended on its own.
    #[serde(default)]
    pub last_exit: Option<String>,
}

impl ChildStatus {
    pub(crate) fn stopped() -> Self {
        Self {
            pid: None,
            state: State::Stopped,
            restarts: 0,
            started_at: None,
            epoch: None,
            addr: None,
            last_exit: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairLink {
    pub url: String,
    pub expires_at_ms: i64,
}

/// What answers requests; the supervisor implements it, tests fake it.
pub(crate) trait Handler: Send + Sync + 'static {
    fn handle(&self, req: Request) -> impl Future<Output = Reply> + Send;
}

/// Binds the socket (replacing a stale one: the caller holds the home's lock) as 0600,
/// and records which file it is, so the stop removes this one and never a successor's.
pub(crate) fn bind(path: &Path) -> io::Result<(UnixListener, SocketFile)> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    // run/ is 0700, so nobody else could reach the socket before this narrows it.
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    // After the chmod, which changes the status time that identifies the file.
    let file = SocketFile::bound(path)?;
    Ok((listener, file))
}

/// Removes the socket [`bind`] made, unless another process has bound the path since.
pub(crate) fn unbind(file: &SocketFile) {
    match file.remove() {
        Ok(Removal::Removed | Removal::Missing) => {}
        Ok(Removal::Replaced) => tracing::info!(
            path = %file.path().display(),
            "left the socket another process bound in its place"
        ),
        Err(error) => tracing::warn!(
            path = %file.path().display(),
            %error,
            "cannot remove the control socket"
        ),
    }
}

/// Answers connections until the task is dropped.
pub(crate) async fn serve<H: Handler>(listener: UnixListener, handler: Arc<H>) {
    let own_uid = rustix::process::getuid().as_raw();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "control socket accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            if let Err(error) = connection(stream, own_uid, handler).await {
                tracing::debug!(%error, "control connection ended");
            }
        });
    }
}

async fn connection<H: Handler>(
    mut stream: UnixStream,
    own_uid: u32,
    handler: Arc<H>,
) -> io::Result<()> {
    let peer = stream.peer_cred()?.uid();
    let reply = if peer != own_uid {
        tracing::warn!(peer, "refused a control connection from another user");
        Reply::error(
            Code::Unauthorized,
            "the control socket serves its owner only",
        )
    } else {
        let mut line = Vec::new();
        let mut reader = BufReader::new(&mut stream);
        let read = tokio::time::timeout(
            REQUEST_TIMEOUT,
            read_line_bounded(&mut reader, &mut line, MAX_REQUEST + 1),
        )
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no request line"))??;
        match read.map(|()| serde_json::from_slice::<Request>(&line)) {
            None => return Ok(()),
            Some(_) if line.len() > MAX_REQUEST => {
                Reply::error(Code::BadRequest, "request line too long")
            }
            Some(Ok(req)) => handler.handle(req).await,
            Some(Err(e)) => Reply::error(Code::BadRequest, format!("not a request: {e}")),
        }
    };
    let mut text = serde_json::to_string(&reply)?;
    text.push('\n');
    stream.write_all(text.as_bytes()).await?;
    stream.shutdown().await
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    /// Nothing listens on the socket.
    #[error("nothing is listening")]
    NotRunning,
    #[error("control socket: {0}")]
    Io(#[from] io::Error),
    #[error("no reply within {} s", .0.as_secs())]
    Timeout(Duration),
    #[error("unreadable reply: {0}")]
    BadReply(#[from] serde_json::Error),
}

/// Sends one request and reads the reply, bounded by `timeout`.
pub(crate) async fn request(
    path: &Path,
    req: &Request,
    timeout: Duration,
) -> Result<Reply, ClientError> {
    let mut stream = match UnixStream::connect(path).await {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Err(ClientError::NotRunning);
        }
        Err(e) => return Err(e.into()),
    };
    let exchange = async {
        let mut text = serde_json::to_string(req)?;
        text.push('\n');
        stream.write_all(text.as_bytes()).await?;
        let mut line = Vec::new();
        let mut reader = BufReader::new(&mut stream);
        // Replies are small; a bound keeps a confused peer from growing this.
        read_line_bounded(&mut reader, &mut line, 1024 * 1024).await?;
        Ok::<_, ClientError>(serde_json::from_slice(&line)?)
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| ClientError::Timeout(timeout))?
}

/// One request to the home's running supervisor, as the CLI asks it: an error reply, no
/// supervisor and a failed exchange each become the [`Error`] the CLI reports.
pub(crate) async fn ask(home: &Home, req: &Request) -> Result<Reply, Error> {
    match request(&home.supervisor_socket(), req, ASK_TIMEOUT).await {
        Ok(Reply::Error(body)) => Err(Error::Remote(body)),
        Ok(reply) => Ok(reply),
        Err(ClientError::NotRunning) => Err(Error::NotRunning(home.root().to_path_buf())),
        Err(e) => Err(Error::Failed(format!("supervisor: {e}"))),
    }
}

/// A reply of the wrong kind for the request.
pub(crate) fn unexpected(reply: &Reply) -> Error {
    Error::Failed(format!("unexpected reply from the supervisor: {reply:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    #[test]
    fn request_wire_forms() {
        let cases = [
            (Request::Status, r#"{"op":"status"}"#),
            (
                Request::Restart {
                    child: ChildName::App,
                },
                r#"{"op":"restart","child":"app"}"#,
            ),
            (
                Request::Restart {
                    child: ChildName::Daemon,
                },
                r#"{"op":"restart","child":"daemon"}"#,
            ),
            (Request::Stop, r#"{"op":"stop"}"#),
            (Request::Pair { role: None }, r#"{"op":"pair"}"#),
            (
                Request::Pair {
                    role: Some(Role::Viewer),
                },
                r#"{"op":"pair","role":"viewer"}"#,
            ),
        ];
        for (req, text) in cases {
            assert_eq!(serde_json::to_string(&req).expect("ser"), text);
            assert_eq!(serde_json::from_str::<Request>(text).expect("de"), req);
        }
        assert!(serde_json::from_str::<Request>(r#"{"op":"restart","child":"db"}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"op":"explode"}"#).is_err());
    }

    #[test]
    fn reply_wire_forms() {
        assert_eq!(
            serde_json::to_string(&Reply::Ok(true)).expect("ser"),
            r#"{"ok":true}"#
        );
        assert_eq!(
            serde_json::to_string(&Reply::Pair(PairLink {
                url: "http://127.0.0.1:8765/#pair=c".into(),
                expires_at_ms: 5
            }))
            .expect("ser"),
            r#"{"pair":{"url":"http://127.0.0.1:8765/#pair=c","expires_at_ms":5}}"#
        );
        assert_eq!(
            serde_json::to_string(&Reply::error(Code::NotRunning, "m")).expect("ser"),
            r#"{"error":{"code":"not_running","message":"m"}}"#
        );
        let status = Reply::Status(Box::new(Status {
            supervisor: SupervisorInfo {
                pid: 1,
                home: "/h".into(),
                started_at: "t".into(),
            },
            app_url: "http://127.0.0.1:8765".into(),
            app_origin: "http://127.0.0.1:8765".into(),
            children: Children {
                daemon: ChildStatus {
                    pid: Some(2),
                    state: State::Running,
                    restarts: 1,
                    started_at: Some("t".into()),
                    epoch: Some("e".into()),
                    addr: Some("127.0.0.1:8766".into()),
                    last_exit: None,
                },
                app: ChildStatus::stopped(),
            },
        }));
        let value = serde_json::to_value(&status).expect("ser");
        assert_eq!(value["status"]["supervisor"]["pid"], 1);
        assert_eq!(value["status"]["children"]["daemon"]["state"], "running");
        assert_eq!(value["status"]["children"]["daemon"]["epoch"], "e");
        assert_eq!(value["status"]["children"]["app"]["state"], "stopped");
        assert!(value["status"]["children"]["app"]["pid"].is_null());
        assert_eq!(serde_json::from_value::<Reply>(value).expect("de"), status);
    }

    struct Fake;
    impl Handler for Fake {
        async fn handle(&self, req: Request) -> Reply {
            match req {
                Request::Stop => Reply::Ok(true),
                other => Reply::error(Code::BadRequest, format!("{other:?}")),
            }
        }
    }

    #[tokio::test]
    async fn server_and_client_talk_over_a_0600_socket() {
        let dir = TestDir::new("ctl");
        let path = dir.path().join("s.sock");
        let (listener, _) = bind(&path).expect("bind");
        let mode = fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let server = tokio::spawn(serve(listener, Arc::new(Fake)));
        let t = Duration::from_secs(5);
        assert_eq!(
            request(&path, &Request::Stop, t).await.expect("reply"),
            Reply::Ok(true)
        );
        // A garbage line gets an error reply, not a hang.
        let mut raw = UnixStream::connect(&path).await.expect("connect");
        raw.write_all(b"{\"op\":\"nope\"}\n").await.expect("write");
        let mut line = Vec::new();
        read_line_bounded(&mut BufReader::new(&mut raw), &mut line, 4096)
            .await
            .expect("read");
        let reply: Reply = serde_json::from_slice(&line).expect("json");
        assert!(matches!(reply, Reply::Error(e) if e.code == Code::BadRequest));
        server.abort();
        let _ = server.await;
        drop(dir);
        assert!(matches!(
            request(&path, &Request::Status, t).await,
            Err(ClientError::NotRunning)
        ));
    }

    #[tokio::test]
    async fn the_stop_removes_only_its_own_socket() {
        let dir = TestDir::new("ctl-own");
        let path = dir.path().join("s.sock");
        let (old, old_file) = bind(&path).expect("bind");
        drop(old);
        // Past one tick of the coarse clock that stamps files (see `contract::socket`).
        std::thread::sleep(Duration::from_millis(30));
        let (_new, new_file) = bind(&path).expect("a successor binds the path");
        unbind(&old_file);
        assert!(path.exists(), "the successor's socket stays");
        std::os::unix::net::UnixStream::connect(&path).expect("and still answers");
        unbind(&new_file);
        assert!(!path.exists());
    }
}
