//! Lanes: single-thread runtimes, one per core, that [`serve`](crate::serve)
//! spreads accepted connections over. A connection lives on one lane for its whole life,
//! and so does everything its requests start (studio-app's upstream connections to
//! studiod are dialled and lent per lane), so no request wakes a task on another thread;
//! yet a process whose one thread is busy no longer leaves the other cores idle while
//! requests queue behind it (docs/PERFORMANCE.md, "Lanes").
//!
//! The runtime that accepts is lane 0; [`LaneThreads::start`] adds the others, each on
//! a thread of its own, and stops them when dropped.

use std::{cell::Cell, io, sync::Arc, thread::JoinHandle};

use tokio::{runtime::Handle, sync::oneshot};

/// The most lanes a process runs; [`current`] is always below it.
pub const MAX_LANES: usize = 16;

thread_local! {
    static LANE: Cell<usize> = const { Cell::new(0) };
}

/// The lane of the calling thread: 0 on any thread that is not a lane's own.
pub fn current() -> usize {
    LANE.with(Cell::get)
}

/// Where connections are served: the accepting runtime, and any other lanes.
#[derive(Clone, Default)]
pub struct Lanes {
    /// Lanes 1 and up (lane 0 is the runtime that accepts).
    others: Arc<[Handle]>,
}

impl Lanes {
    /// Only the accepting runtime: every connection is served where it was accepted.
    pub fn here() -> Self {
        Self::default()
    }

    /// How many lanes connections are spread over.
    pub fn count(&self) -> usize {
        self.others.len() + 1
    }

    /// The lane of a listener's `nth` connection, every lane in turn: `None` for the
    /// accepting runtime.
    pub fn of(&self, nth: usize) -> Option<&Handle> {
        (nth % self.count()).checked_sub(1).map(|i| &self.others[i])
    }
}

/// The threads of lanes 1 and up. Dropping this stops them: their runtimes end, and
/// every connection still on them is closed.
pub struct LaneThreads {
    lanes: Lanes,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl LaneThreads {
    /// Lanes for `cores` cores (at most [`MAX_LANES`]): the calling runtime's own and one
    /// new thread for each of the rest. `name` prefixes the threads' names.
    pub fn start(cores: usize, name: &str) -> io::Result<Self> {
        let mut lanes = LaneThreads {
            lanes: Lanes::here(),
            stops: Vec::new(),
            threads: Vec::new(),
        };
        let mut handles = Vec::new();
        for lane in 1..cores.clamp(1, MAX_LANES) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(runtime.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("{name}-lane-{lane}"))
                .spawn(move || {
                    LANE.with(|l| l.set(lane));
                    // Either a stop or its sender dropped: both end the lane.
                    let _ = runtime.block_on(stopped);
                    runtime.shutdown_background();
                })?;
            lanes.stops.push(stop);
            lanes.threads.push(thread);
        }
        lanes.lanes.others = handles.into();
        Ok(lanes)
    }

    /// The lanes to serve on.
    pub fn lanes(&self) -> Lanes {
        self.lanes.clone()
    }
}

impl Drop for LaneThreads {
    fn drop(&mut self) {
        self.stops.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_go_to_every_lane_in_turn() {
        let threads = LaneThreads::start(3, "test").expect("lanes");
        let lanes = threads.lanes();
        assert_eq!(lanes.count(), 3);
        let picked: Vec<Option<usize>> = (0..6)
            .map(|nth| {
                lanes
                    .of(nth)
                    .map(|h| h.block_on(async { tokio::spawn(async { current() }).await }))
                    .map(|lane| lane.expect("ran"))
            })
            .collect();
        assert_eq!(
            picked,
            [None, Some(1), Some(2), None, Some(1), Some(2)],
            "lane 0 is the accepting runtime; each other lane's tasks run on its own thread"
        );
    }

    #[test]
    fn one_core_is_the_accepting_runtime_alone() {
        let threads = LaneThreads::start(1, "test").expect("lanes");
        assert_eq!(threads.lanes().count(), 1);
        assert!(threads.lanes().of(0).is_none() && threads.lanes().of(1).is_none());
        assert_eq!(
            LaneThreads::start(0, "test")
                .expect("lanes")
                .lanes()
                .count(),
            1
        );
        assert_eq!(current(), 0, "a thread that is no lane's is lane 0");
    }

    #[test]
    fn dropping_the_threads_ends_their_runtimes() {
        let threads = LaneThreads::start(2, "test").expect("lanes");
        let lanes = threads.lanes();
        let handle = lanes.of(1).expect("a second lane").clone();
        drop(threads);
        let spawned = handle.spawn(async {});
        let ended = wait_for(spawned);
        assert!(ended.is_err_and(|e| e.is_cancelled()));
    }

    /// Each connection's requests are served on the lane it was handed to, over TCP and
    /// over a Unix socket, and the server still drains and stops.
    #[tokio::test]
    async fn a_server_answers_on_every_lane() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        async fn ask(mut io: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin) -> String {
            io.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .await
                .expect("sent");
            let mut answer = String::new();
            io.read_to_string(&mut answer).await.expect("answered");
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            answer.rsplit("\r\n").next().expect("a body").to_owned()
        }

        let threads = LaneThreads::start(2, "test").expect("lanes");
        let router =
            axum::Router::new().route("/", axum::routing::get(|| async { current().to_string() }));
        let limits = crate::Limits::for_open_files(1024);
        let stop = Arc::new(tokio::sync::Notify::new());
        let stopped = |stop: &Arc<tokio::sync::Notify>| {
            let stop = stop.clone();
            async move { stop.notified().await }
        };

        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = tcp.local_addr().expect("addr");
        let dir = std::env::temp_dir().join(format!("lanes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a directory");
        let path = dir.join("s.sock");
        let unix = tokio::net::UnixListener::bind(&path).expect("bind");
        let on_tcp = tokio::spawn(crate::serve(
            threads.lanes(),
            tcp,
            None,
            router.clone(),
            limits,
            stopped(&stop),
        ));
        let on_unix = tokio::spawn(crate::serve(
            threads.lanes(),
            unix,
            None,
            router,
            limits,
            stopped(&stop),
        ));

        let mut tcp_lanes = Vec::new();
        let mut unix_lanes = Vec::new();
        for _ in 0..4 {
            tcp_lanes.push(ask(tokio::net::TcpStream::connect(addr).await.expect("connect")).await);
            unix_lanes.push(
                ask(tokio::net::UnixStream::connect(&path)
                    .await
                    .expect("connect"))
                .await,
            );
        }
        assert_eq!(tcp_lanes, ["0", "1", "0", "1"]);
        assert_eq!(unix_lanes, ["0", "1", "0", "1"]);

        stop.notify_waiters();
        on_tcp.await.expect("joined").expect("served");
        on_unix.await.expect("joined").expect("served");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Waits for `f` on a runtime of its own.
    fn wait_for<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(f)
    }
}
