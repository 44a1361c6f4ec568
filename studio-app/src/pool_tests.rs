//! The pool against small HTTP/1.1 upstreams on 127.0.0.1:0 that count the connections
//! they accept and misbehave on cue.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::body::Body;
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use super::{Dial, Pool};

/// How the upstream treats the `n`th request (from 0) on a connection.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers every request and keeps the connection.
    KeepAlive,
    /// Answers every request with `Connection: close`, then closes.
    CloseAfterEach,
    /// Answers the first request; reads the second one and closes without answering.
    DropSecond,
    /// Answers with a body of 1 MiB (more than a socket buffer holds).
    Large,
    /// Answers `204 No Content`, keeping the connection.
    NoContent,
    /// Declares a body of 10 bytes, sends 2 and closes.
    CutShort,
}

const LARGE: usize = 1 << 20;

/// An upstream of `behaviour`; the count of connections it accepted.
async fn upstream(behaviour: Behaviour) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            stream.set_nodelay(true).expect("nodelay");
            tokio::spawn(serve(stream, behaviour));
        }
    });
    (addr, accepted)
}

/// Serves one connection: reads each request's head and its `Content-Length` body.
async fn serve(mut stream: TcpStream, behaviour: Behaviour) {
    let mut buf = Vec::new();
    for n in 0.. {
        let Some(end) = read_head(&mut stream, &mut buf).await else {
            return;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().expect("a length"));
        while buf.len() < end + length {
            let mut more = [0u8; 4096];
            match stream.read(&mut more).await {
                Ok(0) | Err(_) => return,
                Ok(k) => buf.extend_from_slice(&more[..k]),
            }
        }
        buf.drain(..end + length);
        if let Behaviour::CutShort = behaviour {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}")
                .await;
            return;
        }
        if let Behaviour::NoContent = behaviour {
            if stream
                .write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
            continue;
        }
        let (body, close) = match behaviour {
            Behaviour::DropSecond if n == 1 => return,
            Behaviour::Large => (vec![b'x'; LARGE], false),
            Behaviour::CloseAfterEach => (b"{}".to_vec(), true),
            _ => (b"{}".to_vec(), false),
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}\r\n",
            body.len(),
            if close { "connection: close\r\n" } else { "" }
        );
        if stream.write_all(head.as_bytes()).await.is_err()
            || stream.write_all(&body).await.is_err()
            || close
        {
            return;
        }
    }
}

/// The length of the next request head in `buf` (reading more as needed); `None` once
/// the client closed.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(i + 4);
        }
        let mut more = [0u8; 4096];
        match stream.read(&mut more).await {
            Ok(0) | Err(_) => return None,
            Ok(k) => buf.extend_from_slice(&more[..k]),
        }
    }
}

fn pool(addr: SocketAddr) -> Pool {
    Pool::new(
        Dial::Tcp(addr, Duration::from_secs(5)),
        Duration::from_secs(4),
    )
}

fn request(method: Method, body: &'static str, addr: SocketAddr) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri("/api/x")
        .header(header::HOST, addr.to_string())
        .header(header::CONTENT_TYPE, "application/json")
        .body(if body.is_empty() {
            Body::empty()
        } else {
            Body::from(body)
        })
        .expect("a request")
}

/// Sends `req` and reads the whole answer; its status and body length.
async fn exchange(pool: &Pool, req: Request<Body>) -> (StatusCode, usize) {
    let answer = pool.send(req).await.expect("answered");
    let status = answer.status();
    let body = answer.into_body().collect().await.expect("a body");
    (status, body.to_bytes().len())
}

#[tokio::test]
async fn one_connection_serves_request_after_request() {
    let (addr, accepted) = upstream(Behaviour::KeepAlive).await;
    let pool = pool(addr);
    for i in 0..20 {
        let (method, body) = if i % 2 == 0 {
            (Method::GET, "")
        } else {
            (Method::POST, "{\"a\":1}")
        };
        assert_eq!(
            exchange(&pool, request(method, body, addr)).await,
            (StatusCode::OK, 2)
        );
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// An answer without a body has ended with its head: the connection goes back at once.
#[tokio::test]
async fn an_answer_without_a_body_gives_its_connection_back() {
    let (addr, accepted) = upstream(Behaviour::NoContent).await;
    let pool = pool(addr);
    for _ in 0..5 {
        assert_eq!(
            exchange(&pool, request(Method::DELETE, "", addr)).await,
            (StatusCode::NO_CONTENT, 0)
        );
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn concurrent_exchanges_each_have_a_connection_and_leave_them_for_later_ones() {
    let (addr, accepted) = upstream(Behaviour::KeepAlive).await;
    let pool = pool(addr);
    // Four answers held open at once need four connections.
    let mut open = Vec::new();
    for _ in 0..4 {
        open.push(
            pool.send(request(Method::GET, "", addr))
                .await
                .expect("answered"),
        );
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 4);
    for answer in open {
        answer.into_body().collect().await.expect("a body");
    }
    for _ in 0..10 {
        exchange(&pool, request(Method::GET, "", addr)).await;
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        4,
        "all four were used again"
    );
}

#[tokio::test]
async fn an_answer_abandoned_part_way_takes_its_connection_with_it() {
    let (addr, accepted) = upstream(Behaviour::Large).await;
    let pool = pool(addr);
    let mut answer = pool
        .send(request(Method::GET, "", addr))
        .await
        .expect("answered");
    let first = answer.body_mut().frame().await.expect("a frame");
    assert!(first.is_ok());
    drop(answer);
    // The rest of that answer is still on its connection: the next exchange has a new one
    // and reads its own answer whole.
    assert_eq!(
        exchange(&pool, request(Method::GET, "", addr)).await,
        (StatusCode::OK, LARGE)
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    exchange(&pool, request(Method::GET, "", addr)).await;
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "a whole answer gives it back"
    );
}

/// An answer whose body fails part-way is an error to its reader, and its connection is
/// not lent again.
#[tokio::test]
async fn an_answer_cut_short_is_an_error_and_its_connection_is_not_lent_again() {
    let (addr, accepted) = upstream(Behaviour::CutShort).await;
    let pool = pool(addr);
    for _ in 0..2 {
        let answer = pool
            .send(request(Method::GET, "", addr))
            .await
            .expect("a head");
        assert!(answer.into_body().collect().await.is_err(), "cut short");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_connection_idle_too_long_is_not_lent_again() {
    let (addr, accepted) = upstream(Behaviour::KeepAlive).await;
    let pool = Pool::new(
        Dial::Tcp(addr, Duration::from_secs(5)),
        Duration::from_millis(50),
    );
    exchange(&pool, request(Method::GET, "", addr)).await;
    exchange(&pool, request(Method::GET, "", addr)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(120)).await;
    exchange(&pool, request(Method::GET, "", addr)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// A connection the upstream closed after its answer is never written to: every
/// request, a POST with a body among them, goes out once on a new one.
#[tokio::test]
async fn a_connection_closed_after_its_answer_is_not_used_again() {
    let (addr, accepted) = upstream(Behaviour::CloseAfterEach).await;
    let pool = pool(addr);
    for _ in 0..5 {
        assert_eq!(
            exchange(&pool, request(Method::POST, "{\"a\":1}", addr)).await,
            (StatusCode::OK, 2)
        );
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 5);
}

/// A connection that has served a request and then fails under the next one is not
/// studiod refusing a new connection: not even a repeatable request goes out again.
#[tokio::test]
async fn a_failure_under_a_request_on_a_used_connection_is_not_repeated() {
    let (addr, accepted) = upstream(Behaviour::DropSecond).await;
    let pool = pool(addr);
    exchange(&pool, request(Method::GET, "", addr)).await;
    let failed = pool.send(request(Method::GET, "", addr)).await;
    assert!(failed.is_err(), "the failure is the caller's to see");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    // The next request has a new connection.
    exchange(&pool, request(Method::GET, "", addr)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// studiod may answer before it has read a streamed request body (a refusal): the
/// connection is still busy sending that body, and the next request does not wait for it.
#[tokio::test]
async fn a_connection_still_sending_a_request_body_is_not_waited_for() {
    use futures_util::StreamExt;
    let (addr, accepted) = upstream(Behaviour::KeepAlive).await;
    let pool = pool(addr);
    let endless = futures_util::stream::once(async { Ok::<_, std::io::Error>("[") })
        .chain(futures_util::stream::pending());
    let streaming = Request::builder()
        .method(Method::POST)
        .uri("/api/x")
        .header(header::HOST, addr.to_string())
        .body(Body::from_stream(endless))
        .expect("a request");
    // The upstream answers at once (it sees no length), while the body never ends.
    assert_eq!(exchange(&pool, streaming).await, (StatusCode::OK, 2));
    let next = tokio::time::timeout(
        Duration::from_secs(5),
        exchange(&pool, request(Method::GET, "", addr)),
    )
    .await
    .expect("the next request is not held up by the busy connection");
    assert_eq!(next, (StatusCode::OK, 2));
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn nothing_listening_is_an_error_not_a_hang() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let pool = pool(addr);
    assert!(pool.send(request(Method::GET, "", addr)).await.is_err());
}

/// A connection is lent only on the lane that dialled it (the runtime whose task drives
/// it): requests alternating between two lanes keep one connection each.
#[tokio::test]
async fn each_lane_lends_only_its_own_connections() {
    let (addr, accepted) = upstream(Behaviour::KeepAlive).await;
    let pool = pool(addr);
    let lanes = studio_frontdoor::LaneThreads::start(2, "pool-test").expect("lanes");
    let other = lanes.lanes().of(1).expect("a second lane").clone();
    for _ in 0..5 {
        assert_eq!(
            exchange(&pool, request(Method::GET, "", addr)).await,
            (StatusCode::OK, 2)
        );
        let there = pool.clone();
        let answer = other
            .spawn(async move { exchange(&there, request(Method::GET, "", addr)).await })
            .await
            .expect("served on the other lane");
        assert_eq!(answer, (StatusCode::OK, 2));
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}
