//! The CLI's HTTP client for studiod (docs/DECLARATIONS.md, "CLI"): which daemon
//! (`--daemon` / `STUDIO_DAEMON_URL`, else the home's running instance, else
//! `127.0.0.1:8766`), which token (`STUDIO_TOKEN`, else `<home>/run/token`), bounded
//! timeouts (only connecting, for a stream or a request that may take minutes), and
//! every failure turned into one line that says how to fix it.
//!
//! Invariant: the token is sent only to the resolved origin: redirects are never
//! followed and no proxy is used.

use std::{io, time::Duration};

use reqwest::{Method, StatusCode, redirect::Policy};
use serde::{Serialize, de::DeserializeOwned};
use studio_api::{ErrorBody, Health};
use studio_contract::home::Home;

use crate::{
    ApiFailure, Error,
    cli::Remote,
    control::{self, Reply, Request},
};

/// Where studiod listens when nothing says otherwise (its own default `--addr`).
pub(crate) const DEFAULT_DAEMON: &str = "http://127.0.0.1:8766";
/// Bound on connecting, and on a whole request that is not a stream.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on asking the home's supervisor where its daemon listens.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(2);
/// How often `--wait-for-studiod` tries studiod again.
const WAIT_STEP: Duration = Duration::from_millis(250);

/// Where the token came from, so a refusal can say which one to fix.
#[derive(Debug, Clone)]
enum TokenSource {
    Env,
    File(String),
}

/// The client for a command's `--daemon` (see [`Client::connect`]).
pub(crate) async fn connect(home: &Home, remote: &Remote) -> Result<Client, Error> {
    let Some(secs) = remote.wait_for_studiod else {
        return Client::connect(home, remote.daemon.as_deref()).await;
    };
    // `--wait-for-studiod`: a studiod starting beside this command has no token in its
    // home yet, or does not accept connections yet; both are failures worth another try
    // until the deadline. Anything else (a bad URL, an API's refusal) is final at once.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let attempt = match Client::connect(home, remote.daemon.as_deref()).await {
            Ok(client) => client.get::<Health>("/health").await.map(|_| client),
            Err(e) => Err(e),
        };
        match attempt {
            Err(Error::Failed(_)) if tokio::time::Instant::now() + WAIT_STEP < deadline => {
                tokio::time::sleep(WAIT_STEP).await;
            }
            Err(Error::Failed(why)) => {
                return Err(Error::Failed(format!("after waiting {secs} s: {why}")));
            }
            other => return other,
        }
    }
}

/// studiod's API at one origin, with one token.
pub(crate) struct Client {
    origin: String,
    token: String,
    source: TokenSource,
    /// Every ordinary request: 10 s connect and 10 s overall.
    http: reqwest::Client,
    /// Follow modes and long requests: 10 s to connect, no overall bound (a body may
    /// never end, an answer may take minutes).
    unbounded: reqwest::Client,
}

impl Client {
    /// Resolves the daemon and the token. `daemon` is `--daemon` / `STUDIO_DAEMON_URL`.
    pub(crate) async fn connect(home: &Home, daemon: Option<&str>) -> Result<Self, Error> {
        let (token, source) = token(home)?;
        let origin = match daemon.map(str::trim).filter(|d| !d.is_empty()) {
            Some(url) => origin_of(url)?,
            None => discover(home)
                .await
                .unwrap_or_else(|| DEFAULT_DAEMON.to_owned()),
        };
        Self::new(origin, token, source)
    }

    /// The same token for another of this machine's Studio processes at `url` (the app's,
    /// as its supervisor reports it).
    pub(crate) fn at(&self, url: &str) -> Result<Self, Error> {
        Self::new(origin_of(url)?, self.token.clone(), self.source.clone())
    }

    fn new(origin: String, token: String, source: TokenSource) -> Result<Self, Error> {
        // reqwest's TLS (built into this executable for studiod's notifications) needs a
        // provider before any client is built; the first install wins, later ones are
        // no-ops.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let build = |total: Option<Duration>| {
            let mut b = reqwest::Client::builder()
                .redirect(Policy::none())
                .no_proxy()
                .pool_idle_timeout(studio_contract::POOL_IDLE)
                .connect_timeout(TIMEOUT);
            if let Some(t) = total {
                b = b.timeout(t);
            }
            b.build()
                .map_err(|e| Error::Failed(format!("cannot build the HTTP client: {e}")))
        };
        Ok(Self {
            http: build(Some(TIMEOUT))?,
            unbounded: build(None)?,
            origin,
            token,
            source,
        })
    }

    /// A GET whose answer is `T`.
    pub(crate) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        self.send(Method::GET, path, None).await
    }

    /// A POST of `body` whose answer is `T`.
    pub(crate) async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, Error> {
        self.with_body(Method::POST, path, body).await
    }

    /// A POST of `body` whose answer may take minutes (a retention pass): only
    /// connecting is bounded.
    pub(crate) async fn post_unbounded<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, Error> {
        let body = encoded(path, body)?;
        let answer = self
            .exchange_on(&self.unbounded, Method::POST, path, Some(body))
            .await?;
        Ok(answer.1)
    }

    /// A PATCH of `body` whose answer is `T`.
    pub(crate) async fn patch<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, Error> {
        self.with_body(Method::PATCH, path, body).await
    }

    /// A PUT of `body`, with the answer's status (`201` made the resource, `200`
    /// replaced it).
    pub(crate) async fn put<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<(StatusCode, T), Error> {
        let body = encoded(path, body)?;
        self.exchange(Method::PUT, path, Some(body)).await
    }

    async fn with_body<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &B,
    ) -> Result<T, Error> {
        let body = encoded(path, body)?;
        self.send(method, path, Some(body)).await
    }

    /// A request that carries nothing but its path (`POST …/enable`, `DELETE`), whose
    /// answer is `T`.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
    ) -> Result<T, Error> {
        self.send(method, path, None).await
    }

    /// One JSON request; a non-2xx answer is an error (`Error::Api` when it is the
    /// API's [`ErrorBody`]), and so is a 2xx answer that is not a `T`.
    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<T, Error> {
        Ok(self.exchange(method, path, body).await?.1)
    }

    /// [`Self::send`], keeping the answer's status.
    async fn exchange<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<(StatusCode, T), Error> {
        self.exchange_on(&self.http, method, path, body).await
    }

    /// [`Self::exchange`] through `client` (bounded or not).
    async fn exchange_on<T: DeserializeOwned>(
        &self,
        client: &reqwest::Client,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<(StatusCode, T), Error> {
        let mut req = self.request(client, method.clone(), path);
        if method != Method::GET {
            // studiod wants a JSON media type on every unsafe request, bodyless or not.
            req = req
                .header("content-type", "application/json")
                .body(body.unwrap_or_else(|| "{}".to_owned()));
        }
        let resp = self.checked(req.send().await, TIMEOUT).await?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| self.transport(e, Some(TIMEOUT)))?;
        serde_json::from_str(&text)
            .map(|answer| (status, answer))
            .map_err(|e| Error::Failed(format!("{path}: studiod answered with bad JSON: {e}")))
    }

    /// A plain GET whose body is not JSON (logs); bounded like any request.
    pub(crate) async fn get_raw(&self, path: &str) -> Result<reqwest::Response, Error> {
        let req = self.request(&self.http, Method::GET, path);
        self.checked(req.send().await, TIMEOUT).await
    }

    /// A GET whose body may never end (`/api/events`): only connecting is bounded.
    pub(crate) async fn stream(
        &self,
        path: &str,
        headers: &[(&str, String)],
    ) -> Result<reqwest::Response, Error> {
        let mut req = self.request(&self.unbounded, Method::GET, path);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        self.checked(req.send().await, TIMEOUT).await
    }

    fn request(
        &self,
        client: &reqwest::Client,
        method: Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        client
            .request(method, format!("{}{path}", self.origin))
            .bearer_auth(&self.token)
    }

    /// Turns a response into `Ok` only when it is 2xx.
    async fn checked(
        &self,
        sent: reqwest::Result<reqwest::Response>,
        bound: Duration,
    ) -> Result<reqwest::Response, Error> {
        let resp = sent.map_err(|e| self.transport(e, Some(bound)))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        if status.is_redirection() {
            let to = resp
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("?")
                .to_owned();
            return Err(Error::Failed(format!(
                "{} answered {status} to {to}; redirects are not followed (point --daemon at studiod itself)",
                self.origin
            )));
        }
        let text = resp.text().await.unwrap_or_default();
        let body = serde_json::from_str::<ErrorBody>(&text).ok();
        if status == StatusCode::UNAUTHORIZED {
            let code = body.as_ref().map_or("unauthorized", |b| b.code.as_str());
            return Err(Error::Failed(format!(
                "the daemon refused the token (401 {code}): {}",
                self.token_fix()
            )));
        }
        let Some(body) = body else {
            let snippet: String = text.chars().take(200).collect();
            return Err(Error::Failed(format!(
                "studiod at {} answered {status}: {snippet}",
                self.origin
            )));
        };
        Err(Error::Api(Box::new(ApiFailure {
            status: status.as_u16(),
            body,
        })))
    }

    /// What to fix when the daemon refuses the token, by where the token came from.
    fn token_fix(&self) -> String {
        match &self.source {
            TokenSource::Env => {
                "check STUDIO_TOKEN, or unset it to use the home's run/token".to_owned()
            }
            TokenSource::File(path) => format!(
                "{path} is not the token of the daemon at {} (is it another home's daemon? set STUDIO_TOKEN or --home)",
                self.origin
            ),
        }
    }

    /// One line for a request that got no answer.
    fn transport(&self, e: reqwest::Error, bound: Option<Duration>) -> Error {
        let secs = bound.unwrap_or(TIMEOUT).as_secs();
        let origin = &self.origin;
        if e.is_connect() {
            if e.is_timeout() || root_cause(&e).contains("timed out") {
                return Error::Failed(format!(
                    "studiod at {origin} did not accept a connection within {secs} s (connect timeout): is it running? start it with `studio up`"
                ));
            }
            return Error::Failed(format!(
                "studiod is not reachable at {origin} ({}): start it with `studio up`, or point --daemon / STUDIO_DAEMON_URL at it",
                root_cause(&e)
            ));
        }
        if e.is_timeout() {
            return Error::Failed(format!(
                "studiod at {origin} did not answer within {secs} s (request timeout)"
            ));
        }
        Error::Failed(format!("request to {origin} failed: {}", root_cause(&e)))
    }
}

/// `body` as the JSON a request carries. The error names the path only: a body may hold
/// a secret's value.
fn encoded<B: Serialize>(path: &str, body: &B) -> Result<String, Error> {
    serde_json::to_string(body)
        .map_err(|e| Error::Failed(format!("{path}: cannot encode the request: {e}")))
}

/// The innermost cause: reqwest's outer layers only say "error sending request".
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// `STUDIO_TOKEN`, else `<home>/run/token`.
fn token(home: &Home) -> Result<(String, TokenSource), Error> {
    if let Some(t) = crate::config::token() {
        return Ok((t, TokenSource::Env));
    }
    let path = home.token_file();
    let shown = path.display().to_string();
    match Home::read_secret(&path) {
        Ok(t) if !t.is_empty() => Ok((t, TokenSource::File(shown))),
        Ok(_) => Err(Error::Failed(format!(
            "no token: {shown} is empty; set STUDIO_TOKEN or run on the machine where `studio up` runs"
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Error::Failed(format!(
            "no token: set STUDIO_TOKEN or run on the machine where `studio up` runs (no {shown})"
        ))),
        Err(e) => Err(Error::Failed(format!("no token: cannot read {shown}: {e}"))),
    }
}

/// The daemon address a running supervisor of this home reports, if one runs.
async fn discover(home: &Home) -> Option<String> {
    let reply = control::request(
        &home.supervisor_socket(),
        &Request::Status,
        DISCOVER_TIMEOUT,
    )
    .await
    .ok()?;
    match reply {
        Reply::Status(status) => status.children.daemon.addr.map(|a| format!("http://{a}")),
        _ => None,
    }
}

/// `--daemon URL` reduced to its origin; only plain http (studiod serves loopback HTTP).
fn origin_of(url: &str) -> Result<String, Error> {
    let bad = |why: &str| {
        Error::Usage(format!(
            "--daemon / STUDIO_DAEMON_URL: {why} (like http://127.0.0.1:8766), not {url:?}"
        ))
    };
    let parsed = reqwest::Url::parse(url).map_err(|_| bad("must be an http URL"))?;
    if parsed.scheme() != "http" {
        return Err(bad("must be an http:// origin"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad("must not carry credentials"));
    }
    if !matches!(parsed.path(), "" | "/") || parsed.query().is_some() {
        return Err(bad("must be an origin without a path"));
    }
    let host = parsed.host_str().ok_or_else(|| bad("needs a host"))?;
    Ok(match parsed.port() {
        Some(p) => format!("http://{host}:{p}"),
        None => format!("http://{host}"),
    })
}

/// Percent-encodes one path segment or query value.
pub(crate) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use studio_api::SchedulePage;

    use super::*;

    #[test]
    fn a_daemon_url_is_reduced_to_an_http_origin() {
        assert_eq!(
            origin_of("http://127.0.0.1:9000/").expect("ok"),
            "http://127.0.0.1:9000"
        );
        assert_eq!(
            origin_of("http://localhost").expect("ok"),
            "http://localhost"
        );
        for bad in [
            "https://x:1",
            "ftp://x",
            "http://u:p@x:1",
            "http://x:1/api",
            "nope",
        ] {
            let err = origin_of(bad).expect_err(bad);
            assert_eq!(err.exit_code(), 2, "{bad}");
        }
    }

    #[test]
    fn encoding_keeps_unreserved_bytes_only() {
        assert_eq!(encode("demo/re index"), "demo%2Fre%20index");
        assert_eq!(encode("a-b_c.d~"), "a-b_c.d~");
    }

    #[tokio::test]
    async fn a_closed_port_says_how_to_start_studiod() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind")
            .port();
        let client = Client::new(
            format!("http://127.0.0.1:{port}"),
            "t".into(),
            TokenSource::Env,
        )
        .expect("client");
        let err = client
            .get::<SchedulePage>("/api/schedules")
            .await
            .expect_err("closed");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "studiod is not reachable at http://127.0.0.1:{port}"
            )) && text.contains("start it with `studio up`"),
            "{text}"
        );
    }

    /// A daemon address that redirects elsewhere never gets the token sent on: the
    /// redirect is an error, and the other address sees no request at all.
    #[tokio::test]
    async fn a_redirect_is_never_followed_with_the_token() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let target = elsewhere.local_addr().expect("addr");
        let redirector = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let origin = format!("http://{}", redirector.local_addr().expect("addr"));
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = redirector.accept().await {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://{target}/api/schedules\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            }
        });
        let client = Client::new(origin, "stk_secret".into(), TokenSource::Env).expect("client");
        let err = client
            .get::<SchedulePage>("/api/schedules")
            .await
            .expect_err("a redirect is no answer");
        assert!(!err.to_string().contains("stk_secret"), "{err}");
        let reached = tokio::time::timeout(Duration::from_millis(300), elsewhere.accept()).await;
        assert!(reached.is_err(), "the redirect was followed");
    }

    /// `--wait-for-studiod`: no token yet and nobody listening are tried again until studiod
    /// answers; past the deadline the error says it waited.
    #[tokio::test]
    async fn wait_tries_again_until_studiod_answers() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = crate::testdir::TestDir::new("cli-wait");
        let home = Home::new(dir.path().join("home"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind")
            .port();
        let remote = move |secs| Remote {
            daemon: Some(format!("http://127.0.0.1:{port}")),
            wait_for_studiod: Some(secs),
            ..Remote::default()
        };
        let started = tokio::time::Instant::now();
        let Err(err) = connect(&home, &remote(1)).await else {
            panic!("connected to nothing");
        };
        assert!(
            err.to_string().starts_with("after waiting 1 s: no token"),
            "{err}"
        );
        assert!(started.elapsed() >= Duration::from_millis(750));

        // The token, then studiod, arrive while it waits.
        let waiting = {
            let home = home.clone();
            tokio::spawn(async move { connect(&home, &remote(30)).await.map(|c| c.origin) })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        home.prepare().expect("home");
        Home::write_secret(&home.token_file(), "stk_waited").expect("token");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "connected before studiod listened");
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("the port again");
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let body = r#"{"status":"ok"}"#;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            }
        });
        let origin = waiting.await.expect("joined").expect("connected");
        assert_eq!(origin, format!("http://127.0.0.1:{port}"));
    }

    /// An origin that answers every request with `status` and the JSON `body`.
    async fn answering(status: &'static str, body: &'static str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let origin = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            }
        });
        origin
    }

    #[tokio::test]
    async fn answers_are_decoded_as_their_types() {
        let origin = answering("200 OK", r#"{"deleted":true,"id":"sch_1"}"#).await;
        let client = Client::new(origin, "t".into(), TokenSource::Env).expect("client");
        let answer: studio_api::Deleted = client
            .call(Method::DELETE, "/api/schedules/sch_1")
            .await
            .expect("an answer");
        assert_eq!((answer.deleted, answer.id.as_str()), (true, "sch_1"));
        let err = client
            .get::<SchedulePage>("/api/schedules")
            .await
            .expect_err("not a page");
        assert!(
            err.to_string()
                .starts_with("/api/schedules: studiod answered with bad JSON: "),
            "{err}"
        );
    }

    /// A request that may take minutes decodes its answer as any other does.
    #[tokio::test]
    async fn an_unbounded_post_is_decoded_as_its_type() {
        let origin = answering("200 OK", r#"{"deleted":true,"id":"sch_1"}"#).await;
        let client = Client::new(origin, "t".into(), TokenSource::Env).expect("client");
        let answer: studio_api::Deleted = client
            .post_unbounded("/api/x", &serde_json::json!({}))
            .await
            .expect("an answer");
        assert!(answer.deleted);
    }

    #[tokio::test]
    async fn an_error_answer_keeps_its_body() {
        let body = r#"{"code":"conflict","message":"demo/a changed meanwhile","name":"demo/a"}"#;
        let origin = answering("409 Conflict", body).await;
        let client = Client::new(origin, "t".into(), TokenSource::Env).expect("client");
        let err = client
            .get::<SchedulePage>("/api/schedules")
            .await
            .expect_err("an error");
        assert_eq!(err.to_string(), "conflict: demo/a changed meanwhile");
        let Error::Api(failure) = err else {
            panic!("not an API error: {err}")
        };
        assert_eq!(failure.status, 409);
        assert_eq!(failure.body.code, studio_api::Code::Conflict);
        assert_eq!(failure.body.name.as_deref(), Some("demo/a"));
    }

    #[tokio::test]
    async fn a_refused_token_says_which_to_fix() {
        let origin = answering("401 Unauthorized", r#"{"code":"expired","message":"m"}"#).await;
        let client = Client::new(origin, "t".into(), TokenSource::Env).expect("client");
        let err = client
            .get::<SchedulePage>("/api/schedules")
            .await
            .expect_err("refused");
        assert_eq!(
            err.to_string(),
            "the daemon refused the token (401 expired): check STUDIO_TOKEN, or unset it to use the home's run/token"
        );
    }

    #[test]
    fn a_missing_token_file_says_what_to_do() {
        let dir = crate::testdir::TestDir::new("tok");
        let home = Home::new(dir.path());
        // A token in the test runner's environment would win over the file.
        if crate::config::token_is_set() {
            return;
        }
        let err = token(&home).expect_err("no file");
        assert!(
            err.to_string().starts_with(
                "no token: set STUDIO_TOKEN or run on the machine where `studio up` runs"
            ),
            "{err}"
        );
    }
}
