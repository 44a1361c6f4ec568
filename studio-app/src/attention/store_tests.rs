//! The store against a real SQLite file in a temporary directory.

use std::{
    path::PathBuf,
    sync::atomic::{AtomicUsize, Ordering},
};

use super::*;

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "studio-app-attention-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn put<'a>(item: &'a str, state: State, revision: Option<i64>, now_ms: i64) -> Put<'a> {
    Put {
        item_id: item,
        state,
        reason: "looked at it",
        until_ms: (state == State::Snoozed).then_some(now_ms + 60_000),
        covers_ms: now_ms - 1,
        revision,
        principal_id: "p1",
        now_ms,
    }
}

async fn open(dir: &TempDir) -> Store {
    // A directory that does not exist yet: open creates it, as at a first start.
    Store::open(&dir.0.join("nested").join("app.db"))
        .await
        .expect("open app.db")
}

#[tokio::test]
async fn active_rows_are_last_writer_wins_whatever_revision_is_sent() {
    let dir = TempDir::new();
    let store = open(&dir).await;
    let first = store
        .put(&put("run:r1", State::Acknowledged, None, 100))
        .await
        .expect("first");
    assert_eq!(
        (first.revision, first.state),
        (1, Some(State::Acknowledged))
    );
    // A stale revision against a still-active row applies: it may be the caller's retry.
    let second = store
        .put(&put("run:r1", State::Resolved, Some(0), 200))
        .await
        .expect("stale revision, active row");
    assert_eq!(second.revision, 2);
    let third = store
        .put(&put("run:r1", State::Snoozed, Some(2), 300))
        .await
        .expect("current revision");
    assert_eq!(third.revision, 3);
    assert_eq!(third.until_ms, Some(60_300));
    let row = store.row("run:r1").await.expect("row").expect("present");
    assert_eq!(row, third);
    assert_eq!(row.active().map(|d| d.state), Some(State::Snoozed));
    store.close().await;
}

#[tokio::test]
async fn a_tombstone_refuses_older_or_missing_revisions() {
    let dir = TempDir::new();
    let store = open(&dir).await;
    store
        .put(&put("sched:s1", State::Acknowledged, None, 100))
        .await
        .expect("create");
    let tomb = store
        .delete("sched:s1", "undo", "p2", 200)
        .await
        .expect("delete")
        .expect("had one");
    assert_eq!((tomb.revision, tomb.state), (2, None));
    assert!(tomb.active().is_none());

    // A delayed retry of the pre-delete PUT must not resurrect it.
    for stale in [None, Some(0), Some(1)] {
        let refused = store
            .put(&put("sched:s1", State::Acknowledged, stale, 300))
            .await;
        assert!(
            matches!(refused, Err(PutError::Stale { tombstone: 2 })),
            "{stale:?}: {refused:?}"
        );
    }
    // A retried DELETE changes nothing and records nothing.
    let again = store
        .delete("sched:s1", "undo again", "p2", 250)
        .await
        .expect("delete again")
        .expect("tombstone");
    assert_eq!(again.revision, 2);

    // A caller who has seen the delete may set it again.
    let back = store
        .put(&put("sched:s1", State::Expected, Some(2), 400))
        .await
        .expect("revision at the tombstone");
    assert_eq!((back.revision, back.state), (3, Some(State::Expected)));
    store.delete("sched:s1", "", "p1", 500).await.expect("del");
    let later = store
        .put(&put("sched:s1", State::Resolved, Some(40), 600))
        .await
        .expect("a later revision passes too");
    assert_eq!(
        later.revision, 5,
        "the store numbers revisions, not the caller"
    );

    assert!(
        store
            .delete("run:never", "", "p1", 700)
            .await
            .expect("q")
            .is_none()
    );
    store.close().await;
}

#[tokio::test]
async fn the_ledger_records_every_change_and_refuses_edits() {
    let dir = TempDir::new();
    let store = open(&dir).await;
    store
        .put(&put("run:r1", State::Snoozed, None, 100))
        .await
        .expect("put");
    store
        .delete("run:r1", "woke it", "p2", 200)
        .await
        .expect("del");
    let _ = store
        .put(&put("run:r1", State::Acknowledged, Some(1), 300))
        .await
        .expect_err("stale");
    store
        .put(&put("run:r1", State::Acknowledged, Some(2), 400))
        .await
        .expect("put again");
    store
        .put(&put("run:other", State::Resolved, None, 500))
        .await
        .expect("other item");

    let history = store.history("run:r1").await.expect("history");
    let summary: Vec<(&str, Option<&str>, i64, &str, i64)> = history
        .iter()
        .map(|e| {
            (
                e.op.as_str(),
                e.state.as_deref(),
                e.revision,
                e.principal_id.as_str(),
                e.at_ms,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("put", Some("snoozed"), 1, "p1", 100),
            ("delete", None, 2, "p2", 200),
            ("put", Some("acknowledged"), 3, "p1", 400),
        ],
        "a refused PUT is not a change"
    );
    assert_eq!(history[0].until_ms, Some(60_100));
    assert_eq!(history[1].reason, "woke it");
    assert!(store.ledger_refuses_changes().await);
    assert_eq!(store.history("run:r1").await.expect("again").len(), 3);
    store.close().await;

    // Reopening applies nothing new and keeps everything.
    let again = open(&dir).await;
    assert_eq!(again.rows().await.expect("rows").len(), 2);
    assert_eq!(again.history("run:r1").await.expect("h").len(), 3);
    again.close().await;
}
