//! A full disk in real processes (docs/OPERATIONS.md, "Health and metrics"): Studio's
//! home on a small filesystem (a 32 MiB tmpfs, mounted by the test: it needs root, as CI
//! runs), filled to the last byte. Writes are refused `507 insufficient_storage` while
//! reads go on and nothing stored is lost; readiness says why; when space returns the
//! same request succeeds, without a restart.

use std::io::Write;

use studio_api::{Readiness, RunDetail};

use super::*;

/// Unmounts the small filesystem (after the Studio on it has stopped) and removes its
/// mount point.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fills the filesystem of `dir` with one file until it refuses another byte.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).expect("filler");
    let chunk = vec![0u8; 64 * 1024];
    loop {
        if file.write_all(&chunk).is_err() {
            break;
        }
    }
    // Small writes too, to the very last block.
    while file.write_all(&[0u8; 512]).is_ok() {}
    let _ = file.sync_all();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_keeps_reads_and_recovers_by_itself() {
    if studio_tests::postgres::enabled() {
        eprintln!("skipped: the state is in PostgreSQL, not on the home's disk");
        return;
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: mounting a small filesystem needs root (CI runs as root)");
        return;
    }
    let home = TempDir::new("diskfull");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs"])
        .arg(home.path())
        .status();
    if !mounted.is_ok_and(|s| s.success()) {
        // A container without CAP_SYS_ADMIN: root, and still no mount.
        eprintln!("skipped: this machine lets no test mount a small filesystem");
        return;
    }
    let _mount = Mounted(home.path().to_path_buf());
    let studio = Studio::start_in(
        home,
        &[
            ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
            ("STUDIO_SCHEDULER_TZ", "UTC"),
        ],
    );
    let api = Api::new(&studio);
    let schedule = api
        .create(&command("kept", every("1h"), "true", &[]))
        .await
        .id;
    let first = api.trigger(&schedule).await.core.id;
    let ended = until("the first run to end", WAIT, async || {
        let d = api.try_run(&first).await?;
        d.run.core.status.is_terminal().then_some(d)
    });
    let ended = tokio::time::timeout(WAIT, ended).await;
    assert!(
        ended.is_ok(),
        "{}\n{:?}",
        studio.log("daemon"),
        api.try_run(&first).await
    );

    let filler = fill(studio.home_path());
    // SQLite reuses its write-ahead log's space after a checkpoint: the first writes may
    // still fit. Within a few hundred, one needs a new page and is refused.
    let mut refused = None;
    for _ in 0..400 {
        let reply = api.act(&format!("/api/schedules/{schedule}/trigger")).await;
        if reply.status == 507 {
            refused = Some(reply);
            break;
        }
        assert!(reply.status == 202, "a write answers 202 or 507: {reply}");
    }
    let refused = refused.expect("no write was refused on a full disk");
    assert_eq!(
        refused.code().1,
        studio_api::Code::InsufficientStorage,
        "{refused}"
    );
    assert!(refused.text.contains("disk"), "{refused}");

    // Reads go on, and what was stored is there.
    let detail: RunDetail = api.get(&format!("/api/runs/{first}")).await.expect(200);
    assert_eq!(detail.run.core.status, RunStatus::Completed);
    assert_eq!(api.schedule(&schedule).await.name, "kept");
    let ready = api.get("/api/admin/readiness").await;
    assert_eq!(ready.status, 503, "{ready}");
    let ready: Readiness = serde_json::from_str(&ready.text).expect("readiness");
    assert!(
        ready.problems.iter().any(|p| p.contains("free")),
        "{ready:?}"
    );

    // Space returns: the same request succeeds, no restart.
    std::fs::remove_file(&filler).expect("free the disk");
    let again = until("a write to succeed again", WAIT, async || {
        let reply = api.act(&format!("/api/schedules/{schedule}/trigger")).await;
        (reply.status == 202).then_some(reply)
    })
    .await;
    let run: Run = again.expect(202);
    let done = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(d) = api.try_run(&run.core.id).await
                && d.run.core.status.is_terminal()
            {
                return d;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let log = studio.log("daemon");
    let tail: String = log.lines().rev().take(40).collect::<Vec<_>>().join("\n");
    let done = done.unwrap_or_else(|_| panic!("{tail}\n{:?}", run));
    assert_eq!(done.run.core.status, RunStatus::Completed, "{done:?}");
}
