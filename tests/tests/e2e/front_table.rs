//! One table of front-door cases (the Host grammar, origins, media types, methods and
//! the bearer) sent byte for byte to both listeners: studiod and studio-app share one
//! front door (`studio_frontdoor::door`), so each case must be answered alike by both,
//! and by studiod's `run/api.sock` (the app's way in), where Host must still name
//! studiod's TCP address.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    os::unix::net::UnixStream,
    path::PathBuf,
    time::Duration,
};

use studio_contract::error::ErrorBody;
use studio_tests::Studio;

/// Whether the answer must name the origin in `Access-Control-Allow-Origin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cors {
    /// Not checked (the request carried no Origin, or it does not matter).
    Any,
    /// The allowed origin is echoed, with credentials.
    Echoed,
    /// No CORS header at all.
    Absent,
}

struct Case {
    what: &'static str,
    method: &'static str,
    /// The request target; `{me}` is the listener's own authority.
    target: &'static str,
    /// Header lines; `{me}` as above, `{port}` its port, `{other}` the other listener's
    /// port, `{origin}` an origin both listeners allow, `{token}` the daemon token.
    headers: &'static [&'static str],
    body: &'static str,
    status: u16,
    /// The error code of the JSON body, when the answer is a refusal.
    code: Option<&'static str>,
    cors: Cors,
}

const fn case(
    what: &'static str,
    method: &'static str,
    target: &'static str,
    headers: &'static [&'static str],
    status: u16,
    code: Option<&'static str>,
) -> Case {
    Case {
        what,
        method,
        target,
        headers,
        body: "",
        status,
        code,
        cors: Cors::Any,
    }
}

const fn with_cors(mut c: Case, cors: Cors) -> Case {
    c.cors = cors;
    c
}

const fn with_body(mut c: Case, body: &'static str) -> Case {
    c.body = body;
    c
}

const HOST: Option<&str> = Some("invalid_host");
const ORIGIN: Option<&str> = Some("origin_not_allowed");
const MEDIA: Option<&str> = Some("unsupported_media_type");
const UNAUTHORIZED: Option<&str> = Some("unauthorized");

/// Host forms that name this listener.
const ACCEPTED_HOSTS: &[&str] = &[
    "127.0.0.1:{port}",
    "localhost:{port}",
    "LOCALHOST:{port}",
    "[::1]:{port}",
    "[0:0:0:0:0:0:0:1]:{port}",
];

/// Host forms a rebinding attacker (or a confused client) might send.
const REFUSED_HOSTS: &[&str] = &[
    "127.0.0.1:{port}.evil.com",
    "[::1]evil.com",
    "localhost.:{port}",
    "localhost.",
    "sub.localhost:{port}",
    "[::ffff:127.0.0.1]:{port}",
    "127.0.0.2:{port}",
    "127.1:{port}",
    "2130706433:{port}",
    "0x7f.0.0.1:{port}",
    "127.0.0.1:{port}:evil",
    "localhost:badport",
    "localhost:123456",
    "evil.example.com",
    "0.0.0.0:{port}",
    "[::]:{port}",
    "user@localhost:{port}",
    "[fe80::1%eth0]:{port}",
    "127.0.0.1:+{port}",
    "127.0.0.1:99999",
    "127.0.0.1:{other}",
    "",
];

const AUTH: &str = "Authorization: Bearer {token}";

/// Everything but the plain Host forms, which are generated from the lists above.
const CASES: &[Case] = &[
    // Host: one header naming this listener, and an absolute-form target naming it too.
    case(
        "two Host headers, the first ours",
        "GET",
        "/health",
        &["Host: {me}", "Host: evil.example"],
        400,
        HOST,
    ),
    case(
        "two identical Host headers",
        "GET",
        "/health",
        &["Host: {me}", "Host: {me}"],
        400,
        HOST,
    ),
    case("no Host header", "GET", "/health", &[], 400, HOST),
    case(
        "absolute form naming another host",
        "GET",
        "http://evil.example/health",
        &["Host: {me}"],
        400,
        HOST,
    ),
    case(
        "absolute form naming this listener",
        "GET",
        "http://{me}/health",
        &["Host: {me}"],
        200,
        None,
    ),
    case(
        "a preflight is checked for Host before CORS answers it",
        "OPTIONS",
        "/api/identity",
        &[
            "Host: 127.0.0.1:1.evil.com",
            "Origin: http://evil.com",
            "Access-Control-Request-Method: GET",
        ],
        400,
        HOST,
    ),
    // Origins: judged on /api; an allowed one is echoed, any other refused, token or not.
    with_cors(
        case(
            "a foreign origin with a token",
            "GET",
            "/api/identity",
            &["Host: {me}", "Origin: http://evil.example", AUTH],
            403,
            ORIGIN,
        ),
        Cors::Absent,
    ),
    with_cors(
        case(
            "an allowed origin with a token",
            "GET",
            "/api/identity",
            &["Host: {me}", "Origin: {origin}", AUTH],
            200,
            None,
        ),
        Cors::Echoed,
    ),
    with_cors(
        case(
            "the opaque origin",
            "GET",
            "/api/identity",
            &["Host: {me}", "Origin: null", AUTH],
            403,
            ORIGIN,
        ),
        Cors::Absent,
    ),
    with_cors(
        case(
            "two Origin headers",
            "GET",
            "/api/identity",
            &[
                "Host: {me}",
                "Origin: {origin}",
                "Origin: http://evil.example",
                AUTH,
            ],
            403,
            ORIGIN,
        ),
        Cors::Absent,
    ),
    with_cors(
        case(
            "a preflight from an allowed origin",
            "OPTIONS",
            "/api/identity",
            &[
                "Host: {me}",
                "Origin: {origin}",
                "Access-Control-Request-Method: POST",
                "Access-Control-Request-Headers: content-type, x-studio-decision-token",
            ],
            204,
            None,
        ),
        Cors::Echoed,
    ),
    with_cors(
        case(
            "a preflight from a foreign origin",
            "OPTIONS",
            "/api/identity",
            &[
                "Host: {me}",
                "Origin: http://evil.example",
                "Access-Control-Request-Method: GET",
            ],
            403,
            ORIGIN,
        ),
        Cors::Absent,
    ),
    with_cors(
        case(
            "a foreign origin outside /api is not judged",
            "GET",
            "/health",
            &["Host: {me}", "Origin: http://evil.example"],
            200,
            None,
        ),
        Cors::Absent,
    ),
    // Media types: every unsafe /api method carries JSON, with or without a body.
    case(
        "POST without a Content-Type",
        "POST",
        "/api/studio/disconnect",
        &["Host: {me}", AUTH],
        415,
        MEDIA,
    ),
    with_body(
        case(
            "POST as text/plain",
            "POST",
            "/api/studio/disconnect",
            &["Host: {me}", AUTH, "Content-Type: text/plain"],
            415,
            MEDIA,
        ),
        "{}",
    ),
    with_body(
        case(
            "POST as a form",
            "POST",
            "/api/studio/disconnect",
            &[
                "Host: {me}",
                AUTH,
                "Content-Type: application/x-www-form-urlencoded",
            ],
            415,
            MEDIA,
        ),
        "{}",
    ),
    with_body(
        case(
            "a JSON look-alike",
            "POST",
            "/api/studio/disconnect",
            &["Host: {me}", AUTH, "Content-Type: application/jsonx"],
            415,
            MEDIA,
        ),
        "{}",
    ),
    case(
        "DELETE without a Content-Type",
        "DELETE",
        "/api/studio/sessions/x",
        &["Host: {me}", AUTH],
        415,
        MEDIA,
    ),
    with_body(
        case(
            "pairing as text/plain",
            "POST",
            "/api/studio/pair",
            &["Host: {me}", "Content-Type: text/plain;charset=utf-8"],
            415,
            MEDIA,
        ),
        "{}",
    ),
    with_cors(
        with_body(
            case(
                "a media-type refusal to an allowed origin still carries CORS",
                "POST",
                "/api/studio/disconnect",
                &[
                    "Host: {me}",
                    "Origin: {origin}",
                    AUTH,
                    "Content-Type: text/plain",
                ],
                415,
                MEDIA,
            ),
            "{}",
        ),
        Cors::Echoed,
    ),
    case(
        "JSON in any case, with parameters",
        "GET",
        "/api/identity",
        &[
            "Host: {me}",
            AUTH,
            "Content-Type: Application/JSON; charset=utf-8",
        ],
        200,
        None,
    ),
    // Methods and paths.
    case(
        "HEAD of a GET route",
        "HEAD",
        "/health",
        &["Host: {me}"],
        200,
        None,
    ),
    case(
        "a method the path does not take",
        "PUT",
        "/api/identity",
        &["Host: {me}", AUTH, "Content-Type: application/json"],
        405,
        Some("method_not_allowed"),
    ),
    case(
        "POST to a GET-only path",
        "POST",
        "/health",
        &["Host: {me}", AUTH],
        405,
        Some("method_not_allowed"),
    ),
    case(
        "an unknown /api path",
        "GET",
        "/api/nope",
        &["Host: {me}", AUTH],
        404,
        Some("not_found"),
    ),
    case(
        "/api/ itself",
        "GET",
        "/api/",
        &["Host: {me}", AUTH],
        404,
        Some("not_found"),
    ),
    case(
        "a trailing slash",
        "GET",
        "/api/identity/",
        &["Host: {me}", AUTH],
        404,
        Some("not_found"),
    ),
    case(
        "below a served path",
        "GET",
        "/api/identity/extra",
        &["Host: {me}", AUTH],
        404,
        Some("not_found"),
    ),
    // The bearer.
    case(
        "no bearer",
        "GET",
        "/api/identity",
        &["Host: {me}"],
        401,
        UNAUTHORIZED,
    ),
    case(
        "another scheme",
        "GET",
        "/api/identity",
        &["Host: {me}", "Authorization: Basic eDp5"],
        401,
        UNAUTHORIZED,
    ),
    case(
        "an empty bearer",
        "GET",
        "/api/identity",
        &["Host: {me}", "Authorization: Bearer "],
        401,
        UNAUTHORIZED,
    ),
    case(
        "a wrong bearer",
        "GET",
        "/api/identity",
        &["Host: {me}", "Authorization: Bearer stk_wrong"],
        401,
        UNAUTHORIZED,
    ),
    case(
        "the bearer",
        "GET",
        "/api/identity",
        &["Host: {me}", AUTH],
        200,
        None,
    ),
];

struct Answer {
    status: u16,
    /// Header lines, names lower-cased.
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Where a request is sent: a TCP listener, or studiod's API socket.
#[derive(Clone)]
enum Dial {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Dial {
    fn send(&self, request: &[u8]) -> Vec<u8> {
        let timeout = Some(Duration::from_secs(10));
        let mut raw = Vec::new();
        match self {
            Self::Tcp(addr) => {
                let mut stream = TcpStream::connect(addr).expect("connect");
                stream.set_read_timeout(timeout).expect("timeout");
                stream.write_all(request).expect("write");
                let _ = stream.read_to_end(&mut raw);
            }
            Self::Unix(path) => {
                let mut stream = UnixStream::connect(path).expect("connect");
                stream.set_read_timeout(timeout).expect("timeout");
                stream.write_all(request).expect("write");
                let _ = stream.read_to_end(&mut raw);
            }
        }
        raw
    }
}

/// Sends one request byte for byte and reads the whole answer (the connection closes).
fn exchange(dial: &Dial, method: &str, target: &str, headers: &[String], body: &str) -> Answer {
    let mut request = format!("{method} {target} HTTP/1.1\r\n");
    for line in headers {
        request.push_str(line);
        request.push_str("\r\n");
    }
    request.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    let raw = dial.send(request.as_bytes());
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

struct Listener {
    name: &'static str,
    dial: Dial,
    /// The authority Host must name.
    addr: SocketAddr,
    other: u16,
}

fn check(listener: &Listener, fill: &dyn Fn(&str) -> String, c: &Case) {
    let headers: Vec<String> = c.headers.iter().map(|h| fill(h)).collect();
    let answer = exchange(&listener.dial, c.method, &fill(c.target), &headers, c.body);
    let at = format!(
        "{} on {} ({} {})",
        c.what, listener.name, c.method, c.target
    );
    assert_eq!(answer.status, c.status, "{at}: {}", answer.body);
    if let Some(code) = c.code {
        let body: ErrorBody = serde_json::from_str(&answer.body)
            .unwrap_or_else(|e| panic!("{at}: not the error contract ({e}): {:?}", answer.body));
        assert_eq!(body.code.to_string(), code, "{at}");
        assert!(!body.message.is_empty(), "{at}: a refusal says why");
        assert_eq!(
            answer.header("content-type"),
            Some("application/json"),
            "{at}"
        );
    }
    let allow = answer.header("access-control-allow-origin");
    match c.cors {
        Cors::Any => {}
        Cors::Absent => assert_eq!(allow, None, "{at}"),
        Cors::Echoed => {
            assert_eq!(allow, Some(fill("{origin}").as_str()), "{at}");
            assert_eq!(
                answer.header("access-control-allow-credentials"),
                Some("true"),
                "{at}"
            );
            if c.method == "OPTIONS" {
                let allowed = answer
                    .header("access-control-allow-headers")
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                assert!(allowed.contains("x-studio-decision-token"), "{at}");
            }
        }
    }
}

#[test]
fn both_listeners_answer_the_front_door_table_alike() {
    let studio = Studio::start();
    let token = studio.token();
    let origin = studio.app_origin();
    let listeners = [
        Listener {
            name: "studio-app",
            dial: Dial::Tcp(studio.app_addr),
            addr: studio.app_addr,
            other: studio.daemon_addr.port(),
        },
        Listener {
            name: "studiod",
            dial: Dial::Tcp(studio.daemon_addr),
            addr: studio.daemon_addr,
            other: studio.app_addr.port(),
        },
        Listener {
            name: "studiod's run/api.sock",
            dial: Dial::Unix(studio.home.path().join("run/api.sock")),
            addr: studio.daemon_addr,
            other: studio.app_addr.port(),
        },
    ];
    for listener in &listeners {
        let me = format!("127.0.0.1:{}", listener.addr.port());
        let fill = |s: &str| {
            s.replace("{me}", &me)
                .replace("{port}", &listener.addr.port().to_string())
                .replace("{other}", &listener.other.to_string())
                .replace("{origin}", &origin)
                .replace("{token}", &token)
        };
        for host in ACCEPTED_HOSTS {
            let head = [format!("Host: {}", fill(host))];
            let answer = exchange(&listener.dial, "GET", "/health", &head, "");
            assert_eq!(answer.status, 200, "Host {host:?} on {}", listener.name);
        }
        for host in REFUSED_HOSTS {
            let head = [format!("Host: {}", fill(host))];
            let answer = exchange(&listener.dial, "GET", "/health", &head, "");
            assert_eq!(answer.status, 400, "Host {host:?} on {}", listener.name);
            let body: ErrorBody = serde_json::from_str(&answer.body).expect("error body");
            assert_eq!(body.code.to_string(), "invalid_host");
        }
        for c in CASES {
            check(listener, &fill, c);
        }
    }
}
