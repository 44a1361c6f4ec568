//! Test helpers: unique temporary directories removed on drop.

use std::{
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(label: &str) -> Self {
        // Short names: Unix socket paths are limited to about 100 bytes.
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("sd-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The app origin every test authority allows.
pub(crate) const APP: &str = "http://127.0.0.1:8765";
/// The daemon token of every test authority.
pub(crate) const DAEMON_TOKEN: &str = "daemon-token";

/// A store in `dir` with `epoch` started, and an authority over it.
pub(crate) async fn authority(
    dir: &TempDir,
    epoch: &str,
) -> (crate::store::Store, crate::admission::Authority) {
    let store = open_store(dir).await;
    store.begin_epoch(epoch, 1, 0).await.expect("epoch");
    let past = store.past_epochs(epoch).await.expect("past");
    let allowed = studio_contract::origin::AllowedOrigins::new([APP.to_owned()]);
    let a = crate::admission::Authority::new(
        store.clone(),
        epoch,
        &past,
        DAEMON_TOKEN,
        allowed,
        120_000,
    );
    (store, a)
}

/// Another store on the database of `store` (opened from `dir` on SQLite): what a
/// second studiod sharing it would hold.
pub(crate) async fn same_database(
    store: &crate::store::Store,
    dir: &TempDir,
) -> crate::store::Store {
    match store.url() {
        Some(url) => crate::store::Store::open_at(studio_store::Location::Postgres(url))
            .await
            .expect("a second store on the test's database"),
        None => crate::store::Store::open(&dir.path().join("state.db"))
            .await
            .expect("a second store on the test's file"),
    }
}

/// Whether unit tests' stores are PostgreSQL databases (`STUDIO_TEST_DATABASE_URL`).
pub(crate) fn on_postgres() -> bool {
    std::env::var("STUDIO_TEST_DATABASE_URL").is_ok_and(|u| !u.trim().is_empty())
}

/// The store of a unit test: a SQLite file in `dir`, or, when `STUDIO_TEST_DATABASE_URL`
/// names a PostgreSQL server (a throwaway one: `scripts/test` starts it), a new database
/// of the test's own on that server.
pub(crate) async fn open_store(dir: &TempDir) -> crate::store::Store {
    match std::env::var("STUDIO_TEST_DATABASE_URL") {
        Ok(url) if on_postgres() => {
            let url = fresh_database(url.trim()).await;
            crate::store::Store::open_at(studio_store::Location::Postgres(&url))
                .await
                .expect("open the test's PostgreSQL database")
        }
        _ => crate::store::Store::open(&dir.path().join("state.db"))
            .await
            .expect("open"),
    }
}

/// Makes a new, empty database on the server of `server` (a `postgres://` URL) and
/// returns its URL.
async fn fresh_database(server: &str) -> studio_store::DatabaseUrl {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let server = studio_store::DatabaseUrl::parse(server).expect("STUDIO_TEST_DATABASE_URL");
    let name = format!("studio_t_{}_{n}_{nanos}", std::process::id());
    studio_store::create_database(&server, &name)
        .await
        .expect("create the test's database")
}
