//! `GET /api/events`: the event log as server-sent events. A client that reconnects with
//! `Last-Event-ID` gets exactly what it missed (from the log), then live events.

use std::{convert::Infallible, time::Duration};

use axum::{
    extract::State,
    http::HeaderMap,
    response::sse::{Event, KeepAlive, Sse},
};
use futures_util::Stream;
use tokio::sync::{broadcast::error::RecvError, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use super::ApiState;
use crate::scheduling::model::EventRow;

const PAGE: i64 = 500;

fn to_sse(e: &EventRow) -> Event {
    Event::default()
        .id(e.seq.to_string())
        .event(&e.kind)
        .data(&e.data)
}

pub(crate) async fn stream(
    State(state): State<ApiState>,
    headers: HeaderMap,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut last: i64 = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(-1);
    let scheduler = state.scheduler.clone();
    let stop = scheduler.stopping();
    // Subscribed before the backlog is read, so nothing falls between the two.
    let mut live = scheduler.subscribe();
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(64);
    tokio::spawn(async move {
        if last < 0 {
            // A new client starts from now: the newest seq seen so far is its floor.
            last = latest_seq(&scheduler).await;
        }
        loop {
            // Catch up from the log (at start, and whenever the live channel lagged).
            loop {
                let Ok(page) = scheduler.reads().events_after(last, PAGE).await else {
                    return;
                };
                for e in &page {
                    if tx.send(Ok(to_sse(e))).await.is_err() {
                        return;
                    }
                    last = e.seq;
                }
                if page.len() < usize::try_from(PAGE).unwrap_or(usize::MAX) {
                    break;
                }
            }
            loop {
                // A stream ends when its client goes away or the daemon stops, not only at
                // the next event: an idle open stream must not hold up a graceful stop.
                let next = tokio::select! {
                    next = live.recv() => next,
                    () = tx.closed() => return,
                    () = stop.triggered() => return,
                };
                match next {
                    Ok(e) if e.seq <= last => {}
                    Ok(e) => {
                        if tx.send(Ok(to_sse(&e))).await.is_err() {
                            return;
                        }
                        last = e.seq;
                    }
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return,
                }
            }
        }
    });
    Sse::new(ReceiverStream::new(rx)).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

async fn latest_seq(scheduler: &crate::scheduling::Scheduler) -> i64 {
    scheduler.reads().latest_event_seq().await.unwrap_or(0)
}
