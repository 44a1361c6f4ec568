//! studio-bench: the figures `docs/PERFORMANCE.md` reports, measured on real binaries.
//!
//! `cargo run --release -p studio-tests --bin studio-bench` (builds the release binaries
//! itself). Prints Markdown tables. Sections: the raw Unix-socket floor against the
//! verifier's `Admit`; `GET /api/identity` direct, through studio-app, and through the
//! floor proxy (below); start-up, idle memory and app restart of a real `studio up`.
//!
//! The floor proxy is the least any reverse proxy in this stack does for the app hop:
//! accept a request, point it at studiod, send it on a pooled connection over
//! `run/api.sock` and stream the answer back, with no front door, no admission and no
//! signature. The bench runs it as a child process of its own binary
//! (`studio-bench --floor-proxy <listen> <socket> <daemon-addr>`), as studio-app is one;
//! `-` for the socket sends over TCP to the daemon's address instead, and
//! `paired:<socket>` gives each browser connection an upstream connection of its own in
//! place of `hyper-util`'s pooled client (what studio-app's own pool comes close to).

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use rustix::process::Signal;
use studio_contract::{ready::Ready, secret::AppKey};
use studio_proto::v1::{AdmitRequest, verifier_client::VerifierClient};
use studio_tests::{Studio, TempDir, WORKER_ADDR, bins, free_port, http, signal};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{UnixListener, UnixStream},
};
use tonic::{Request, transport::Channel};

const CLIENTS: usize = 16;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, listen, socket, daemon] = args.as_slice()
        && flag == "--floor-proxy"
    {
        // One thread, like studio-app.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        return runtime.block_on(floor::serve(listen, socket.into(), daemon));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(bench());
}

async fn bench() {
    println!(
        "# studio-bench ({} cores)\n",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let pair = Pair::start();
    verifier_section(&pair).await;
    http_section(&pair).await;
    drop(pair);
    lifecycle_section().await;
}

/// A studiod and a studio-app started by the bench itself with a key it knows, so it can
/// speak to the verifier as the app does.
struct Pair {
    home: TempDir,
    key: AppKey,
    token: String,
    daemon_addr: String,
    app_addr: String,
    /// The floor proxy in front of studiod's API socket.
    floor_addr: String,
    children: Vec<Child>,
}

impl Pair {
    fn start() -> Self {
        let home = TempDir::new("bench");
        let key = AppKey::generate();
        let daemon_addr = format!("127.0.0.1:{}", free_port());
        let app_addr = format!("127.0.0.1:{}", free_port());
        let daemon = spawn_child(
            &bins().studiod,
            home.path(),
            &[
                "--addr",
                &daemon_addr,
                "--app-origin",
                &format!("http://{app_addr}"),
            ],
            &key,
        );
        // Upstream over studiod's API socket, as `studio up` starts it.
        let socket = home.path().join("run/api.sock");
        let app = spawn_child(
            &bins().app,
            home.path(),
            &[
                "--addr",
                &app_addr,
                "--daemon-addr",
                &daemon_addr,
                "--daemon-socket",
                &socket.to_string_lossy(),
            ],
            &key,
        );
        let floor_addr = format!("127.0.0.1:{}", free_port());
        let floor = floor::spawn(&floor_addr, &socket, &daemon_addr);
        let token = std::fs::read_to_string(home.path().join("run/token"))
            .expect("studiod minted run/token")
            .trim()
            .to_owned();
        Self {
            home,
            key,
            token,
            daemon_addr,
            app_addr,
            floor_addr,
            children: vec![daemon, app, floor],
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn_child(bin: &Path, home: &Path, args: &[&str], key: &AppKey) -> Child {
    let mut child = Command::new(bin)
        .arg("--home")
        .arg(home)
        .args(args)
        .arg("--app-key-stdin")
        .env_remove("STUDIO_TOKEN")
        .env(WORKER_ADDR.0, WORKER_ADDR.1)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{}", key.to_hex()).expect("hand over the key");
    drop(stdin);
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("readiness");
    Ready::parse(&line)
        .unwrap_or_else(|| panic!("{} did not announce readiness: {line:?}", bin.display()));
    child
}

struct Stats {
    count: usize,
    elapsed: Duration,
    samples: Vec<Duration>,
}

impl Stats {
    fn new(mut samples: Vec<Duration>, elapsed: Duration) -> Self {
        samples.sort_unstable();
        Self {
            count: samples.len(),
            elapsed,
            samples,
        }
    }
    fn pct(&self, p: f64) -> Duration {
        let idx = ((self.samples.len() as f64 - 1.0) * p).round() as usize;
        self.samples[idx.min(self.samples.len() - 1)]
    }
    fn row(&self, name: &str, clients: usize) -> String {
        format!(
            "| {name} | {clients} | {:.0} | {:.1} | {:.1} |",
            self.count as f64 / self.elapsed.as_secs_f64(),
            self.pct(0.50).as_secs_f64() * 1e6,
            self.pct(0.99).as_secs_f64() * 1e6,
        )
    }
}

/// Runs `clients` loops of `per_client` calls of `op` and collects every latency.
async fn load<F, Fut>(clients: usize, per_client: usize, op: F) -> Stats
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per_client);
                for _ in 0..per_client {
                    let t = Instant::now();
                    op(c).await;
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("load task"));
    }
    Stats::new(all, started.elapsed())
}

async fn verifier_channel(socket: PathBuf) -> Channel {
    tonic::transport::Endpoint::try_from("http://verifier")
        .expect("endpoint")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await
        .expect("verifier channel")
}

async fn verifier_section(pair: &Pair) {
    println!("## Unix socket floor and the verifier's Admit\n");
    println!("| call | clients | calls/s | p50 µs | p99 µs |");
    println!("|---|---|---|---|---|");

    // The floor: a 64-byte echo over a Unix socket in this process.
    let echo_dir = TempDir::new("echo");
    let echo_path = echo_dir.path().join("echo.sock");
    let listener = UnixListener::bind(&echo_path).expect("bind echo");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while s.read_exact(&mut buf).await.is_ok() {
                    if s.write_all(&buf).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    for clients in [1, CLIENTS] {
        let mut conns = Vec::new();
        for _ in 0..clients {
            conns.push(Arc::new(tokio::sync::Mutex::new(
                UnixStream::connect(&echo_path).await.expect("echo"),
            )));
        }
        let conns = Arc::new(conns);
        let stats = load(clients, 20_000 / clients.min(4), move |c| {
            let conns = conns.clone();
            async move {
                let mut s = conns[c].lock().await;
                let mut buf = [7u8; 64];
                s.write_all(&buf).await.expect("write");
                s.read_exact(&mut buf).await.expect("read");
            }
        })
        .await;
        println!("{}", stats.row("raw UDS echo (64 B)", clients));
    }

    let socket = pair.home.path().join("run/verifier.sock");
    let key = pair.key.to_hex();
    for (label, bearer) in [("Admit (daemon token)", pair.token.clone())] {
        for clients in [1, CLIENTS] {
            // One HTTP/2 channel per client, as independent apps would have.
            let mut chans = Vec::new();
            for _ in 0..clients {
                chans.push(VerifierClient::new(verifier_channel(socket.clone()).await));
            }
            let chans = Arc::new(chans);
            let (key, bearer) = (key.clone(), bearer.clone());
            let stats = load(clients, 10_000 / clients.min(4), move |c| {
                let mut client = chans[c].clone();
                let (key, bearer) = (key.clone(), bearer.clone());
                async move {
                    let mut req = Request::new(AdmitRequest {
                        bearer,
                        origin: String::new(),
                        method: "GET".into(),
                        path: "/api/identity".into(),
                    });
                    req.metadata_mut()
                        .insert(studio_proto::APP_KEY_METADATA, key.parse().expect("ascii"));
                    let reply = client.admit(req).await.expect("admit");
                    assert!(matches!(
                        reply.into_inner().verdict,
                        Some(studio_proto::v1::admit_reply::Verdict::Principal(_))
                    ));
                }
            })
            .await;
            println!("{}", stats.row(label, clients));
        }
    }
    println!();
}

async fn http_section(pair: &Pair) {
    println!("## GET /api/identity, direct to studiod, through studio-app and the floor\n");
    println!("| path | connections | req/s | p50 µs | p99 µs |");
    println!("|---|---|---|---|---|");
    for (label, addr) in [
        ("direct to studiod", &pair.daemon_addr),
        ("through studio-app", &pair.app_addr),
        ("through the floor proxy", &pair.floor_addr),
    ] {
        for clients in [1, CLIENTS] {
            // One client (one keep-alive connection) per simulated user.
            let clients_vec: Arc<Vec<reqwest::Client>> =
                Arc::new((0..clients).map(|_| http()).collect());
            let url = format!("http://{addr}/api/identity");
            let token = pair.token.clone();
            let stats = load(clients, 4_000 / clients.min(4), move |c| {
                let client = clients_vec[c].clone();
                let (url, token) = (url.clone(), token.clone());
                async move {
                    let resp = client
                        .get(url)
                        .bearer_auth(token)
                        .send()
                        .await
                        .expect("request");
                    assert_eq!(resp.status(), 200);
                    let _ = resp.bytes().await;
                }
            })
            .await;
            println!("{}", stats.row(label, clients));
        }
    }
    println!();
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

async fn lifecycle_section() {
    println!("## studio up: start-up, idle memory, app restart\n");
    let runs = 5;
    let mut startups = Vec::new();
    let mut restarts = Vec::new();
    let mut rss = (0, 0, 0);
    for i in 0..runs {
        let t = Instant::now();
        let studio = Studio::start();
        startups.push(t.elapsed());
        let token = studio.token();
        if i == 0 {
            tokio::time::sleep(Duration::from_secs(3)).await;
            rss = (
                rss_kib(studio.supervisor_pid()),
                rss_kib(studio.child_pid("daemon")),
                rss_kib(studio.child_pid("app")),
            );
        }
        let app = studio.child_pid("app");
        let url = studio.app_url("/api/identity");
        signal(app, Signal::KILL);
        let killed = Instant::now();
        let client = http();
        loop {
            let ok = client
                .get(&url)
                .bearer_auth(&token)
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            if ok {
                break;
            }
            assert!(
                killed.elapsed() < Duration::from_secs(30),
                "the app did not come back"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        restarts.push(killed.elapsed());
    }
    startups.sort_unstable();
    restarts.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("| measure | median | min | max |");
    println!("|---|---|---|---|");
    println!(
        "| `studio up` → ready line (ms, {runs} runs) | {:.0} | {:.0} | {:.0} |",
        ms(startups[runs / 2]),
        ms(startups[0]),
        ms(startups[runs - 1])
    );
    println!(
        "| app kill -9 → `/api/identity` 200 again (ms, {runs} runs) | {:.0} | {:.0} | {:.0} |",
        ms(restarts[runs / 2]),
        ms(restarts[0]),
        ms(restarts[runs - 1])
    );
    println!();
    println!("| process | idle RSS (MiB) |");
    println!("|---|---|");
    println!("| studio (supervisor) | {:.1} |", rss.0 as f64 / 1024.0);
    println!("| studiod | {:.1} |", rss.1 as f64 / 1024.0);
    println!("| studio-app | {:.1} |", rss.2 as f64 / 1024.0);
}

mod floor {
    //! The floor proxy (see the binary's comment): hyper's server and pooled client, one
    //! thread, nothing else.

    use std::{
        future::Future,
        io,
        path::{Path, PathBuf},
        pin::Pin,
        process::{Child, Command, Stdio},
        sync::Arc,
        task::{Context, Poll},
        time::{Duration, Instant},
    };

    use hyper::{Request, Uri, body::Incoming, header, service::service_fn};
    use hyper_util::{
        client::legacy::{
            Client,
            connect::{Connect, HttpConnector},
        },
        rt::{TokioExecutor, TokioIo},
    };
    use tokio::net::{TcpListener, UnixStream};

    /// Connects to studiod's API socket whatever the URI.
    #[derive(Clone)]
    struct Socket(Arc<PathBuf>);

    impl tower::Service<Uri> for Socket {
        type Response = TokioIo<UnixStream>;
        type Error = io::Error;
        type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Uri) -> Self::Future {
            let path = self.0.clone();
            Box::pin(async move { UnixStream::connect(&*path).await.map(TokioIo::new) })
        }
    }

    /// Starts the floor proxy on `listen` and waits until it accepts.
    pub(super) fn spawn(listen: &str, socket: &Path, daemon: &str) -> Child {
        let child = Command::new(std::env::current_exe().expect("this bench's path"))
            .arg("--floor-proxy")
            .args([listen, &socket.to_string_lossy(), daemon])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn the floor proxy");
        let started = Instant::now();
        while std::net::TcpStream::connect(listen).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the floor proxy did not listen"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        child
    }

    /// Serves until killed: every request goes to studiod as it came, `Host` and target
    /// naming studiod.
    ///
    /// `socket` `-` sends over TCP to `daemon` instead of the Unix socket; `paired:<path>`
    /// pairs each connection with one of its own to the Unix socket at `path`.
    pub(super) async fn serve(listen: &str, socket: PathBuf, daemon: &str) {
        if let Some(path) = socket.to_str().and_then(|s| s.strip_prefix("paired:")) {
            return paired(listen, PathBuf::from(path), daemon).await;
        }
        if socket.as_os_str() == "-" {
            let mut tcp = HttpConnector::new();
            tcp.set_nodelay(true);
            let client: Client<HttpConnector, Incoming> =
                Client::builder(TokioExecutor::new()).build(tcp);
            return proxy(listen, client, daemon).await;
        }
        let client: Client<Socket, Incoming> =
            Client::builder(TokioExecutor::new()).build(Socket(Arc::new(socket)));
        proxy(listen, client, daemon).await
    }

    /// Each downstream connection gets its own upstream connection, opened on its first
    /// request and kept for the next ones (no pool).
    async fn paired(listen: &str, socket: PathBuf, daemon: &str) {
        let host = header::HeaderValue::try_from(daemon).expect("an address is a header");
        let socket = Arc::new(socket);
        let listener = bind(listen).await;
        loop {
            let stream = next_connection(&listener).await;
            let (host, socket) = (host.clone(), socket.clone());
            let slot: Arc<
                std::sync::Mutex<Option<hyper::client::conn::http1::SendRequest<Incoming>>>,
            > = Arc::default();
            tokio::spawn(async move {
                let service = service_fn(move |mut req: Request<Incoming>| {
                    let (host, socket, slot) = (host.clone(), socket.clone(), slot.clone());
                    async move {
                        req.headers_mut().insert(header::HOST, host);
                        let held = slot.lock().expect("slot").take();
                        let mut sender = match held {
                            Some(s) if !s.is_closed() => s,
                            _ => {
                                let io = UnixStream::connect(&*socket).await?;
                                let (s, conn) =
                                    hyper::client::conn::http1::handshake(TokioIo::new(io))
                                        .await
                                        .map_err(io::Error::other)?;
                                tokio::spawn(conn);
                                s
                            }
                        };
                        sender.ready().await.map_err(io::Error::other)?;
                        let answer = sender.send_request(req);
                        *slot.lock().expect("slot") = Some(sender);
                        answer.await.map_err(io::Error::other)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    async fn bind(listen: &str) -> TcpListener {
        TcpListener::bind(listen)
            .await
            .expect("bind the floor proxy")
    }

    /// The next accepted connection, set to send at once.
    async fn next_connection(listener: &TcpListener) -> tokio::net::TcpStream {
        loop {
            if let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                return stream;
            }
        }
    }

    async fn proxy<C>(listen: &str, client: Client<C, Incoming>, daemon: &str)
    where
        C: Connect + Clone + Send + Sync + 'static,
    {
        let host = header::HeaderValue::try_from(daemon).expect("an address is a header");
        let authority = format!("http://{daemon}");
        let listener = bind(listen).await;
        loop {
            let stream = next_connection(&listener).await;
            let (client, host, authority) = (client.clone(), host.clone(), authority.clone());
            tokio::spawn(async move {
                let service = service_fn(move |mut req: Request<Incoming>| {
                    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
                    *req.uri_mut() = format!("{authority}{target}")
                        .parse()
                        .expect("a request target under an authority is a URI");
                    req.headers_mut().insert(header::HOST, host.clone());
                    client.request(req)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }
}
