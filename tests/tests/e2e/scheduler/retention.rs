//! Retention in real processes (docs/OPERATIONS.md, "Retention and archives"): a home
//! holding 100,000 old runs is pruned by `studio retention run --archive-dir` into one
//! verified ZIP64 archive per chunk of 100; every archive verifies offline, `studio
//! archive restore` puts a chunk back once and refuses it a second time, and the pruned
//! schedule's health still says what its runs said.

use super::*;

const OLD_RUNS: i64 = 100_000;
/// Old runs that get a log folder (enough to see them archived and removed).
const WITH_LOGS: i64 = 1_000;

fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_runs_are_archived_pruned_verified_and_restored() {
    if studio_tests::postgres::enabled() {
        // The 100,000 runs are written straight into state.db; on PostgreSQL, studiod's
        // retention unit suite runs the same passes and restores.
        eprintln!("skipped: the runs are filled into state.db directly");
        return;
    }
    let studio = start(&[]);
    let api = Api::new(&studio);
    let quiet = api
        .create(&command("quiet", every("1h"), "true", &[]))
        .await;
    let (recent_schedule, recent) = api
        .create_and_trigger(&sh("recent", every("1h"), "echo kept"))
        .await;
    api.finished(&recent).await;
    let home = studio.stop_keep_home(Duration::from_secs(20));
    studio_tests::fill::old_runs(home.path(), &quiet.id, OLD_RUNS, WITH_LOGS, 60).await;
    let studio = Studio::start_in(home, &[("STUDIO_COMMAND_ALLOWLIST", ALLOW)]);
    let api = Api::new(&studio);
    let before = api.schedule(&quiet.id).await;
    // Its latest run ended 60 days ago: overdue for an hourly schedule.
    assert_eq!(before.health, "overdue");

    let set = api
        .send(
            Method::PUT,
            "/api/admin/retention",
            Some(r#"{"runs": {"max_age": "30d"}}"#.into()),
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.text);
    let archives = TempDir::new("archives");
    let dir = archives.path().join("a");
    let dir_arg = dir.display().to_string();
    let began = Instant::now();
    let pass = json_of(&studio.cli(&["retention", "run", "--archive-dir", &dir_arg, "--json"]));
    println!(
        "pruned {OLD_RUNS} runs with archives in {:.1} s: {pass}",
        began.elapsed().as_secs_f64()
    );
    assert_eq!(pass["outcome"], "completed", "{pass}");
    assert_eq!(pass["pruned"]["runs"], OLD_RUNS);
    assert_eq!(pass["pruned"]["run_transitions"], 2 * OLD_RUNS);
    assert_eq!(pass["pruned"]["log_dirs"], WITH_LOGS);
    assert_eq!(pass["archives"], OLD_RUNS / 100);
    assert!(
        pass["checkpoint"]["wal_bytes_before"].as_u64() > Some(0),
        "{pass}"
    );

    // What is left: the recent run and its folder; none of the old folders.
    let left = api.runs(&quiet.id).await;
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(api.runs(&recent_schedule).await.len(), 1);
    assert!(!studio.home_path().join("runs/old-000000").exists());
    assert!(studio.home_path().join("runs").join(&recent).exists());
    // The schedule's health still says what its runs said, not `never-fired`.
    assert_eq!(api.schedule(&quiet.id).await.health, before.health);

    // Every archive verifies offline; the CLI lists them and checks one.
    let files: Vec<PathBuf> = {
        let mut f: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("archives")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        f.sort();
        f
    };
    assert_eq!(files.len() as i64, OLD_RUNS / 100);
    let mut archived = 0;
    for file in &files {
        let manifest = studio_archive::verify(file, None).expect("an archive verifies");
        archived += manifest.tables.get("runs").copied().unwrap_or(0);
    }
    assert_eq!(archived as i64, OLD_RUNS);
    let listed = json_of(&studio.cli(&["archive", "list", &dir_arg, "--json"]));
    assert_eq!(listed.as_array().map(Vec::len), Some(files.len()));
    let first = files[0].display().to_string();
    let checked = studio.cli(&["archive", "verify", &first]);
    assert!(checked.status.success(), "{}", text(&checked));

    // The first chunk back (runs, transitions, log folders), once.
    let restored = json_of(&studio.cli(&["archive", "restore", &first, "--json"]));
    assert_eq!(restored["rows"]["runs"], 100, "{restored}");
    assert_eq!(restored["rows"]["run_transitions"], 200, "{restored}");
    assert_eq!(restored["log_files"], 100, "{restored}");
    assert_eq!(api.runs(&quiet.id).await.len(), 100);
    assert_eq!(
        std::fs::read_to_string(studio.home_path().join("runs/old-000007/stdout.log"))
            .expect("the log is back"),
        "line of run 7\n"
    );
    let again = studio.cli(&["archive", "restore", &first]);
    assert!(!again.status.success(), "{}", text(&again));
    assert!(
        text(&again).contains("nothing was restored"),
        "{}",
        text(&again)
    );
    assert_eq!(api.runs(&quiet.id).await.len(), 100);

    // A tampered archive is refused before anything is sent.
    let tampered = archives.path().join("tampered.zip");
    let mut bytes = std::fs::read(&files[1]).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&tampered, bytes).expect("write");
    let refused = studio.cli(&["archive", "restore", &tampered.display().to_string()]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));

    // Readiness and the audit trail record the pass and its checkpoint.
    let ready: serde_json::Value =
        serde_json::from_str(&api.get("/api/admin/readiness").await.text).expect("json");
    assert!(ready["last_retention_pass_at"].is_string(), "{ready}");
    let audit = api.get("/api/audit?kind=wal_checkpoint").await;
    assert!(audit.text.contains("wal_bytes_before"), "{}", audit.text);
}
