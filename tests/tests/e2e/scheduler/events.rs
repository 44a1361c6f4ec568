//! `GET /api/events`: live run events and resumption after `Last-Event-ID`.

use tokio::{sync::mpsc, task::JoinHandle};
use tokio_stream::StreamExt;

use studio_api::{RunEvent, schedule::Overlap};

use super::*;

#[derive(Debug, Clone)]
struct Event {
    id: u64,
    kind: String,
    data: String,
}

impl Event {
    /// The payload of an `event: run`.
    fn run(&self) -> Option<RunEvent> {
        (self.kind == "run").then(|| {
            serde_json::from_str(&self.data)
                .unwrap_or_else(|e| panic!("not a RunEvent: {e}: {}", self.data))
        })
    }

    fn mentions(&self, run_id: &str) -> bool {
        self.run().is_some_and(|r| r.id == run_id)
    }
}

/// Opens `GET /api/events` (resuming after `last` when given) and, once the headers are
/// in, reads it in a task that sends each event on the returned channel.
async fn events(
    studio: &Studio,
    last: Option<u64>,
) -> (JoinHandle<()>, mpsc::UnboundedReceiver<Event>) {
    // No overall timeout: the body never ends.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let mut req = client
        .get(studio.daemon_url("/api/events"))
        .bearer_auth(studio.token());
    if let Some(last) = last {
        req = req.header("last-event-id", last.to_string());
    }
    let resp = req.send().await.expect("events request");
    assert_eq!(resp.status(), 200);
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut body = resp.bytes_stream();
        let mut buf = Vec::new();
        let (mut id, mut kind, mut data) = (None, String::new(), Vec::<String>::new());
        while let Some(Ok(chunk)) = body.next().await {
            buf.extend_from_slice(&chunk);
            while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let line = String::from_utf8_lossy(&line);
                let line = line.trim_end_matches(['\n', '\r']);
                if line.is_empty() {
                    if !data.is_empty() {
                        let event = Event {
                            id: id.unwrap_or(0),
                            kind: std::mem::take(&mut kind),
                            data: data.join("\n"),
                        };
                        if tx.send(event).is_err() {
                            return;
                        }
                    }
                    data.clear();
                    kind.clear();
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "id" => id = value.parse().ok(),
                    "event" => kind = value.to_owned(),
                    "data" => data.push(value.to_owned()),
                    _ => {}
                }
            }
        }
    });
    (task, rx)
}

/// Receives into `seen` until `done(seen)`.
async fn receive(
    rx: &mut mpsc::UnboundedReceiver<Event>,
    seen: &mut Vec<Event>,
    what: &str,
    done: impl Fn(&[Event]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done(seen) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(e)) => seen.push(e),
            Ok(None) => panic!("the event stream ended while waiting for {what}"),
            Err(_) => panic!("no {what} within {WAIT:?}; got {seen:?}"),
        }
    }
}

fn saw_end(events: &[Event], run_id: &str) -> bool {
    events
        .iter()
        .filter_map(Event::run)
        .any(|r| r.id == run_id && r.status == RunStatus::Completed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_events_stream_runs_and_resumes_after_last_event_id() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let id = api
        .create(&with_policies(
            command("events", every("1d"), "true", &[]),
            Policies {
                overlap: Overlap::Allow,
                ..Policies::default()
            },
        ))
        .await
        .id;
    let (witness_task, mut witness_rx) = events(&studio, None).await;
    let mut witness = Vec::new();

    let (first_task, mut first_rx) = events(&studio, None).await;
    let mut first = Vec::new();
    let run1 = api.trigger(&id).await.core.id;
    receive(&mut first_rx, &mut first, "run 1's completion", |e| {
        saw_end(e, &run1)
    })
    .await;
    let last = first.last().expect("an event").id;
    assert!(last > 0, "events carry ids: {first:?}");
    first_task.abort();
    drop(first_rx);

    let run2 = api.trigger(&id).await.core.id;
    let run3 = api.trigger(&id).await.core.id;
    receive(&mut witness_rx, &mut witness, "runs 2 and 3 ending", |e| {
        saw_end(e, &run2) && saw_end(e, &run3)
    })
    .await;
    let upto = witness.last().expect("an event").id;

    let (resumed_task, mut resumed_rx) = events(&studio, Some(last)).await;
    let mut resumed = Vec::new();
    receive(
        &mut resumed_rx,
        &mut resumed,
        "the resumed stream to catch up",
        |e| e.last().is_some_and(|e| e.id >= upto),
    )
    .await;
    resumed_task.abort();
    witness_task.abort();

    let ids: Vec<u64> = resumed.iter().map(|e| e.id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids strictly increase, no duplicates: {ids:?}"
    );
    assert!(
        ids.iter().all(|i| *i > last),
        "nothing at or before {last}: {ids:?}"
    );
    let want: Vec<u64> = witness
        .iter()
        .map(|e| e.id)
        .filter(|i| *i > last && *i <= upto)
        .collect();
    let got: Vec<u64> = ids.iter().copied().filter(|i| *i <= upto).collect();
    assert_eq!(got, want, "exactly the events after {last}");
    assert!(saw_end(&resumed, &run2) && saw_end(&resumed, &run3));
    assert!(
        !resumed.iter().any(|e| e.mentions(&run1)),
        "nothing about run 1 again: {resumed:?}"
    );
    let first_ids: Vec<u64> = first.iter().map(|e| e.id).collect();
    assert!(first_ids.windows(2).all(|w| w[0] < w[1]), "{first_ids:?}");
}

/// An open event stream must not hold up a graceful stop: the daemon ends it and exits
/// well inside its own 5 s grace (and the supervisor's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_an_open_event_stream_does_not_delay_a_stop() {
    let studio = start(&[]);
    let (reader, _events) = events(&studio, None).await;
    let daemon = studio.child_pid("daemon");
    let stopping = std::time::Instant::now();
    studio_tests::signal(daemon, rustix::process::Signal::TERM);
    let gone = studio_tests::wait_for(Duration::from_secs(10), || {
        (!studio_tests::alive(daemon)).then_some(())
    });
    let took = stopping.elapsed();
    reader.abort();
    assert!(gone.is_some(), "the daemon did not exit");
    assert!(
        took < Duration::from_secs(2),
        "stopping took {took:?} with a stream open"
    );
}
