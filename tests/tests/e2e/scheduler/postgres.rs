//! studiod's state in PostgreSQL, in the suites' second run (`scripts/test`): none of it
//! is in the home, the database URL (which may hold a password) reaches studiod and never
//! the app, and a restarted Studio finds its schedules and runs where it left them.

use super::*;

fn environ_has(pid: u32, name: &str) -> bool {
    let prefix = format!("{name}=");
    std::fs::read(format!("/proc/{pid}/environ"))
        .expect("environ")
        .split(|b| *b == 0)
        .any(|kv| kv.starts_with(prefix.as_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_state_is_studiods_alone_and_outlives_a_restart() {
    if !studio_tests::postgres::enabled() {
        eprintln!("skipped: runs in the PostgreSQL pass of scripts/test");
        return;
    }
    let studio = start(&[]);
    let api = Api::new(&studio);
    let (id, run_id) = api
        .create_and_trigger(&command("kept", every("1h"), "true", &[]))
        .await;
    api.finished(&run_id).await;
    assert!(
        !studio.home_path().join("state.db").exists(),
        "the state is in PostgreSQL, not the home"
    );
    assert!(environ_has(
        studio.child_pid("daemon"),
        "STUDIO_DATABASE_URL"
    ));
    assert!(
        !environ_has(studio.child_pid("app"), "STUDIO_DATABASE_URL"),
        "the app holds no secret"
    );
    drop(api);

    let home = studio.stop_keep_home(Duration::from_secs(20));
    let studio = Studio::start_in(home, &[("STUDIO_COMMAND_ALLOWLIST", ALLOW)]);
    let api = Api::new(&studio);
    assert_eq!(api.schedule(&id).await.name, "kept");
    let runs = api.runs(&id).await;
    assert!(runs.iter().any(|r| r.core().id == run_id), "{runs:?}");
}
