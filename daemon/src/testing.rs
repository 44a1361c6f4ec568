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
    let store = crate::store::Store::open(&dir.path().join("state.db"))
        .await
        .expect("open");
    store.start_epoch(epoch, 1, 0).await.expect("epoch");
    let past = store.past_epochs(epoch).await.expect("past");
    let allowed = studio_contract::origin::AllowedOrigins::new([APP.to_owned()]);
    let a = crate::admission::Authority::new(
        store.clone(),
        epoch.into(),
        &past,
        DAEMON_TOKEN,
        allowed,
        120_000,
    );
    (store, a)
}
