//! The front door beyond the shared table (`front_table`): what each listener adds (the
//! app's cookie rule, studiod's signed origin), oversize bodies, and idle connections.

use studio_tests::{Studio, http, raw_http, raw_request};

use studio_api::{Code, Health, Identity, PairRequest, Paired, app::AppHealth};
use studio_tests::Reply;

use crate::paired_cookie;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_needs_a_bearer_but_health_does_not() {
    let studio = Studio::start();
    for base in [studio.app_url(""), studio.daemon_url("")] {
        let reply = Reply::of(
            http()
                .get(format!("{base}/api/identity"))
                .send()
                .await
                .expect("send"),
        )
        .await;
        assert_eq!(reply.code(), (401, Code::Unauthorized), "{base}");
        let reply = Reply::of(
            http()
                .get(format!("{base}/api/identity"))
                .bearer_auth("stk_wrong")
                .send()
                .await
                .expect("send"),
        )
        .await;
        assert_eq!(reply.code(), (401, Code::Unauthorized), "{base}");
        let reply = Reply::of(
            http()
                .get(format!("{base}/api/identity"))
                .bearer_auth(studio.token())
                .send()
                .await
                .expect("send"),
        )
        .await;
        let body: Identity = reply.expect(200);
        assert_eq!(body.identity, "studio");
        let reply = Reply::of(
            http()
                .get(format!("{base}/health"))
                .send()
                .await
                .expect("send"),
        )
        .await;
        assert_eq!(reply.expect::<Health>(200).status, "ok");
    }
    let reply = Reply::of(
        http()
            .get(studio.app_url("/health"))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(reply.json::<AppHealth>().daemon, "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_authenticated_unsafe_requests_need_an_allowed_origin() {
    let studio = Studio::start();
    let cookie = paired_cookie(&studio).await;
    let resp = http()
        .post(studio.app_url("/api/studio/disconnect"))
        .header("cookie", &cookie)
        .header("content-type", "application/json")
        .send()
        .await
        .expect("send");
    let reply = Reply::of(resp).await;
    assert_eq!(reply.code(), (403, Code::OriginNotAllowed));
    let resp = crate::get_with_cookie(&studio, "/api/identity", &cookie).await;
    assert_eq!(resp.status(), 200, "the refused request changed nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_refuses_a_forged_forwarded_origin() {
    let studio = Studio::start();
    let resp = http()
        .post(studio.daemon_url("/api/studio/pair"))
        .header("x-studio-forwarded-origin", studio.app_origin())
        .header("x-studio-forwarded-sig", "1.deadbeef")
        .json(&PairRequest {
            code: studio.first_code(),
        })
        .send()
        .await
        .expect("send");
    let reply = Reply::of(resp).await;
    assert_eq!(reply.code(), (401, Code::Unauthorized));
    // Unsigned, the forwarded header is ignored: no Origin means no pairing.
    let resp = http()
        .post(studio.daemon_url("/api/studio/pair"))
        .header("x-studio-forwarded-origin", studio.app_origin())
        .json(&PairRequest {
            code: studio.first_code(),
        })
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 403);
    // Directly, from an allowed origin, the daemon pairs and hands back the token.
    let resp = http()
        .post(studio.daemon_url("/api/studio/pair"))
        .header("origin", studio.app_origin())
        .json(&PairRequest {
            code: studio.first_code(),
        })
        .send()
        .await
        .expect("send");
    let reply = Reply::of(resp).await;
    let token = reply.expect::<Paired>(200).token;
    assert_ne!(token, studio.token());
    let resp = http()
        .get(studio.app_url("/api/identity"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("send");
    assert_eq!(
        resp.status(),
        200,
        "a paired bearer works through the app too"
    );
}

/// A body over studiod's limit is `413 payload_too_large` in the JSON contract on both
/// listeners, whether it declares its length or streams in chunks: studio-app refuses it
/// itself instead of reporting the daemon unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_body_is_413_on_both_listeners() {
    let studio = Studio::start();
    let token = studio.token();
    let body = "a".repeat(studio_contract::API_BODY_LIMIT + 1);
    for addr in [studio.app_addr, studio.daemon_addr] {
        let head = format!(
            "POST /api/schedules HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json"
        );
        // Raw, to declare a length a client would not: the answer is read as text.
        let (status, answer) = raw_http(addr, &head, &body);
        assert_eq!(status, 413, "declared length on {addr}: {answer}");
        assert!(answer.contains("payload_too_large"), "{addr}: {answer}");

        let chunked = format!(
            "{head}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        );
        let (status, answer) = raw_request(addr, &chunked);
        assert_eq!(status, 413, "chunked on {addr}: {answer}");
        assert!(
            answer.contains("payload_too_large"),
            "chunked on {addr}: {answer}"
        );
    }
}

/// Another local process holds 2,000 idle connections to each listener while both run
/// under the usual desktop limit of 1,024 open files: a real request still gets through on
/// each, at once (the oldest connections that never sent a request make room), and the
/// idle ones are closed for not sending a request head in time.
#[test]
fn idle_connections_do_not_lock_a_real_request_out() {
    use std::{
        io::{ErrorKind, Read},
        net::TcpStream,
        time::{Duration, Instant},
    };
    // This test's own end needs 4,000 descriptors and more.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    )
    .expect("raise this test's open-file limit");
    let studio = Studio::start_with_open_files(1024);
    let mut idle = Vec::new();
    for addr in [studio.daemon_addr, studio.app_addr] {
        for _ in 0..2000 {
            idle.push(TcpStream::connect(addr).expect("the kernel takes the connection"));
        }
    }
    for addr in [studio.daemon_addr, studio.app_addr] {
        let started = Instant::now();
        let (status, body) = raw_request(
            addr,
            &format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(status, 200, "{addr} answered {status}: {body}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{addr} took {:?}",
            started.elapsed()
        );
    }
    // Every idle connection is let go: evicted, or closed for sending no request head.
    let deadline = Instant::now() + Duration::from_secs(20);
    for mut conn in idle {
        conn.set_read_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        ))
        .expect("timeout");
        let mut byte = [0u8; 1];
        match conn.read(&mut byte) {
            Ok(0) => {}
            Ok(_) => panic!("an idle connection got an answer"),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("an idle connection was held past the header timeout")
            }
            Err(_) => {} // reset: closed while unread bytes were pending
        }
    }
}

/// Reads one HTTP/1.1 answer (head and a `Content-Length` body) from `conn`: its status,
/// or `None` when the connection closed first.
fn answer(conn: &mut std::io::BufReader<std::net::TcpStream>) -> Option<u16> {
    use std::io::{BufRead, Read};
    let mut status = String::new();
    if conn.read_line(&mut status).ok()? == 0 {
        return None;
    }
    let mut length = 0;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).ok()?;
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    conn.read_exact(&mut body).ok()?;
    status.split_whitespace().nth(1)?.parse().ok()
}

/// A refusal answered before its small body arrived leaves the connection usable: a
/// client that pools it (studio-app's proxy does) sends its next request on it. Were
/// the body left unread, the listener would close the connection after its answer, and
/// that next request would fail as unsendable.
#[test]
fn a_refusal_before_its_body_arrived_keeps_the_connection() {
    use std::io::Write;
    let studio = Studio::start();
    let token = studio.token();
    let mut conn = std::net::TcpStream::connect(studio.daemon_addr).expect("connect");
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let head = |path: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\n\r\n",
            studio.daemon_addr
        )
    };
    // The head first; the body only once the answer (a 404) could have been sent.
    conn.write_all(head("/api/tasks/no-such-task/retry").as_bytes())
        .expect("head");
    std::thread::sleep(std::time::Duration::from_millis(300));
    conn.write_all(b"{}").expect("body");
    let mut reader = std::io::BufReader::new(conn.try_clone().expect("clone"));
    assert_eq!(answer(&mut reader), Some(404));
    // The same connection again.
    conn.write_all(format!("{}{{}}", head("/api/tasks/another/retry")).as_bytes())
        .expect("second request");
    assert_eq!(answer(&mut reader), Some(404), "the connection was closed");
}
