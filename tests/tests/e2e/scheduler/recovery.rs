//! Restarts, missed fires, a revoked allow-list, an app crash, and daemon crashes at
//! each point of the delivery contract.

use studio_api::schedule::MissedFire;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_missed_fires_fold_into_one_decision_after_downtime() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let once = with_policies(
        command("missed/run-once", every("2s"), "true", &[]),
        Policies {
            missed_fire: MissedFire::RunOnce,
            ..Policies::default()
        },
    );
    let skip = with_policies(
        command("missed/skip", every("2s"), "true", &[]),
        Policies {
            missed_fire: MissedFire::Skip,
            ..Policies::default()
        },
    );
    let once_id = api.create(&once).await.id;
    let skip_id = api.create(&skip).await.id;
    for id in [&once_id, &skip_id] {
        api.wait_runs(id, "a first completed run", |runs| {
            runs.iter().any(|r| r.core().status == RunStatus::Completed)
        })
        .await;
    }
    drop(api);
    let home = studio.stop_keep_home(Duration::from_secs(20));
    let stopped = now_ms();
    // Down across several instants: the first due one has a successor that passed too,
    // so it is late and the policy decides once for all of them.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let restarted = now_ms();
    let studio = Studio::start_in(
        home,
        &[
            ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
            ("STUDIO_SCHEDULER_TZ", "UTC"),
        ],
    );
    let api = Api::new(&studio);
    let mut after = Vec::new();
    for id in [&once_id, &skip_id] {
        let runs = api
            .wait_runs(id, "two on-time fires after the restart", |runs| {
                runs.iter()
                    .filter(|r| {
                        r.core().kind == RunKind::Scheduled
                            && ms_of(&r.core().scheduled_at) > restarted
                    })
                    .count()
                    >= 2
            })
            .await;
        after.push(runs);
    }
    api.disable(&once_id).await;
    api.disable(&skip_id).await;

    let made_after = |runs: &[RunListItem]| -> Vec<RunListItem> {
        runs.iter()
            .filter(|r| ms(&r.core().created_at) >= restarted)
            .cloned()
            .collect()
    };
    let replayed = |runs: &[RunListItem]| -> Vec<RunListItem> {
        runs.iter()
            .filter(|r| {
                r.core().kind == RunKind::Scheduled
                    && !is(r, RunStatus::Skipped, "missed")
                    && r.core.scheduled_at.is_some()
                    && (stopped..restarted).contains(&ms_of(&r.core().scheduled_at))
            })
            .cloned()
            .collect()
    };

    let once_new = made_after(&after[0]);
    let recovery: Vec<&RunListItem> = once_new
        .iter()
        .filter(|r| r.core().kind == RunKind::Recovery)
        .collect();
    assert_eq!(
        recovery.len(),
        1,
        "run_once fires exactly one recovery run: {once_new:?}"
    );
    assert!(
        !once_new
            .iter()
            .any(|r| r.core().status == RunStatus::Skipped),
        "run_once skips nothing: {once_new:?}"
    );
    assert_eq!(
        replayed(&after[0]),
        Vec::<RunListItem>::new(),
        "no missed instant replayed"
    );
    let recovery = api.finished(&recovery[0].core.id).await;
    assert_eq!(recovery.core().status, RunStatus::Completed, "{recovery:?}");

    let skip_new = made_after(&after[1]);
    let skipped: Vec<&RunListItem> = skip_new
        .iter()
        .filter(|r| is(r, RunStatus::Skipped, "missed"))
        .collect();
    assert_eq!(
        skipped.len(),
        1,
        "skip records exactly one skipped run: {skip_new:?}"
    );
    assert!(
        !skip_new.iter().any(|r| r.core().kind == RunKind::Recovery),
        "skip fires no recovery run: {skip_new:?}"
    );
    assert_eq!(
        replayed(&after[1]),
        Vec::<RunListItem>::new(),
        "no missed instant replayed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_allowlist_revoked_before_the_fire_spawns_nothing() {
    let studio = Studio::start_with(&[
        ("STUDIO_COMMAND_ALLOWLIST", "sh"),
        ("STUDIO_SCHEDULER_TZ", "UTC"),
    ]);
    let api = Api::new(&studio);
    let touched = marker(&studio, "spawned");
    let spec = sh(
        "revoked",
        at(&in_secs(4)),
        &format!("touch '{}'", touched.display()),
    );
    let id = api.create(&spec).await.id;
    // The owner takes it back while the daemon runs: no restart.
    let out = studio.cli(&["allow", "remove", "sh"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "removed sh: no run starts it from now on\n"
    );
    let runs = api
        .wait_runs(&id, "the fire to end", |runs| runs.iter().any(terminal))
        .await;
    // A list leaves the log tails out; the run itself carries them.
    let run = &api.run(&runs[0].core.id).await;
    assert_eq!(run.core().status, RunStatus::Failed, "{run:?}");
    let reason = format!(
        "{} {}",
        run.run.core.reason.as_deref().unwrap_or_default(),
        run.run.stderr_tail.as_deref().unwrap_or_default()
    )
    .to_lowercase();
    assert!(
        reason.contains("allow"),
        "the failure names the allow-list: {run:?}"
    );
    assert!(
        run.core().exit_code.is_none(),
        "nothing exited, nothing ran: {run:?}"
    );
    assert!(
        run.core().dispatched_at.is_none(),
        "nothing was launched: {run:?}"
    );
    assert!(!touched.exists(), "the revoked command was spawned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_app_crash_does_not_disturb_firing() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let daemon = studio.child_pid("daemon");
    let id = api
        .create(&command("steady", every("1s"), "true", &[]))
        .await
        .id;
    api.wait_runs(&id, "three runs", |runs| runs.len() >= 3)
        .await;
    let app = studio.child_pid("app");
    signal(app, Signal::KILL);
    let killed = now_ms();
    let new_app = studio.wait_running("app", Some(app), Duration::from_secs(20));
    assert_ne!(new_app, app);
    api.wait_runs(&id, "four more seconds of fires", |runs| {
        runs.iter()
            .filter(|r| ms_of(&r.core().scheduled_at) > killed + 4_000)
            .count()
            >= 1
    })
    .await;
    api.disable(&id).await;
    assert_eq!(
        studio.child_pid("daemon"),
        daemon,
        "the daemon was untouched"
    );
    let runs = api.runs(&id).await;
    let instants: Vec<i64> = runs
        .iter()
        .filter(|r| r.core().kind == RunKind::Scheduled)
        .map(|r| ms_of(&r.core().scheduled_at))
        .collect();
    for pair in instants.windows(2) {
        assert!(
            pair[1] - pair[0] <= 2_000,
            "a gap of {} ms between fires around the app crash",
            pair[1] - pair[0]
        );
    }
    for r in &runs {
        let lag = ms(&r.core().created_at) - ms_of(&r.core().scheduled_at);
        assert!(lag < 2_000, "fired {lag} ms late: {r:?}");
    }
}

/// One crash point: a one-shot schedule appends its run id to a marker; the daemon
/// aborts at `point` of that fire, the supervisor restarts it; returns the runs of the
/// occurrence, settled, and the marker's lines.
async fn crash_at(point: &str) -> (Vec<RunListItem>, Vec<String>) {
    let studio = start(&[("STUDIO_TEST_CRASH_AT", point)]);
    let api = Api::new(&studio);
    let daemon = studio.child_pid("daemon");
    let marker = marker(&studio, "ran");
    let spec = sh(
        &format!("crash/{point}"),
        at(&in_secs(3)),
        &format!("echo \"$STUDIO_RUN_ID\" >> '{}'", marker.display()),
    );
    let id = api.create(&spec).await.id;
    let restarted = studio.wait_running("daemon", Some(daemon), Duration::from_secs(30));
    assert_ne!(restarted, daemon, "the daemon crashed at {point}");
    // Settled: every run of the occurrence ended, and a few quiet seconds changed nothing.
    let runs = api
        .wait_runs(&id, "every run to end after the crash", |runs| {
            !runs.is_empty() && runs.iter().all(terminal)
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let settled = api.runs(&id).await;
    assert_eq!(
        settled.iter().map(|r| &r.core.id).collect::<Vec<_>>(),
        runs.iter().map(|r| &r.core.id).collect::<Vec<_>>(),
        "no run appeared after the occurrence settled"
    );
    assert!(settled.iter().all(terminal), "{settled:?}");
    assert_eq!(
        studio.child_pid("daemon"),
        restarted,
        "the restarted daemon did not crash again"
    );
    // No occurrence twice among the runs that were not tombstoned.
    let mut keys = HashSet::new();
    for r in settled
        .iter()
        .filter(|r| matches!(r.core.kind, RunKind::Scheduled | RunKind::Recovery))
        .filter(|r| !is(r, RunStatus::Failed, "never_dispatched"))
    {
        assert!(
            keys.insert(r.core.scheduled_at.clone()),
            "occurrence {:?} appears twice: {settled:?}",
            r.core.scheduled_at
        );
    }
    let lines = lines_of(&marker);
    (settled, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_crash_after_claim_tombstones_and_replaces_once() {
    let (runs, lines) = crash_at("after_claim").await;
    let tomb: Vec<&RunListItem> = runs
        .iter()
        .filter(|r| is(r, RunStatus::Failed, "never_dispatched"))
        .collect();
    assert_eq!(tomb.len(), 1, "{runs:?}");
    assert!(tomb[0].core().dispatched_at.is_none(), "{:?}", tomb[0]);
    let replacement: Vec<&RunListItem> = runs
        .iter()
        .filter(|r| r.core.replaces_run_id.as_ref() == Some(&tomb[0].core.id))
        .collect();
    assert_eq!(replacement.len(), 1, "one replacement: {runs:?}");
    let replacement = replacement[0];
    assert_eq!(
        replacement.core().status,
        RunStatus::Completed,
        "{replacement:?}"
    );
    assert_eq!(
        replacement.core.scheduled_at, tomb[0].core.scheduled_at,
        "same occurrence"
    );
    assert_eq!(tomb[0].core.attempt, 1, "{:?}", tomb[0]);
    assert_eq!(
        replacement.core.attempt, 2,
        "the second attempt: {replacement:?}"
    );
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(
        lines,
        [replacement.core.id.as_str()],
        "the occurrence ran exactly once, as the replacement"
    );
}

/// A crash once the job's shim exists: the shim runs the job once, the next daemon adopts
/// it or reads its recorded end, and the run ends with its true outcome, never twice.
async fn crash_after_launch(point: &str) {
    let (runs, lines) = crash_at(point).await;
    assert_eq!(runs.len(), 1, "never launched again: {runs:?}");
    let run = &runs[0];
    assert!(
        is(run, RunStatus::Completed, "exit_0"),
        "the true outcome: {run:?}"
    );
    assert_eq!(run.core().exit_code, Some(0), "{run:?}");
    assert!(
        run.core().dispatched_at.is_some(),
        "its launch is stamped: {run:?}"
    );
    assert_eq!(
        lines,
        [run.core.id.as_str()],
        "the occurrence ran exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_crash_after_spawn_runs_once_and_records_the_true_end() {
    crash_after_launch("after_spawn").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_crash_after_dispatch_runs_once_and_records_the_true_end() {
    crash_after_launch("after_dispatch").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_crash_before_finish_records_the_outcome_the_shim_kept() {
    crash_after_launch("before_finish").await;
}

/// A short downtime across one instant: that fire is a little late, its successor is still
/// ahead, so it runs as scheduled — once, on the timeline, with no burst and no skip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_short_downtime_keeps_the_every_timeline() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let id = api
        .create(&command("timeline", every("4s"), "true", &[]))
        .await
        .id;
    api.wait_runs(&id, "a completed run", |runs| {
        runs.iter().any(|r| r.core().status == RunStatus::Completed)
    })
    .await;
    drop(api);
    let home = studio.stop_keep_home(Duration::from_secs(20));
    let stopped = now_ms();
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let restarted = now_ms();
    let studio = Studio::start_in(
        home,
        &[
            ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
            ("STUDIO_SCHEDULER_TZ", "UTC"),
        ],
    );
    let api = Api::new(&studio);
    let runs = api
        .wait_runs(&id, "a fire after the restart", |runs| {
            runs.iter()
                .filter(|r| ms_of(&r.core().scheduled_at) > restarted)
                .count()
                >= 1
        })
        .await;
    api.disable(&id).await;
    let instants: Vec<i64> = runs.iter().map(|r| ms_of(&r.core().scheduled_at)).collect();
    let unique: HashSet<i64> = instants.iter().copied().collect();
    assert_eq!(
        unique.len(),
        instants.len(),
        "an occurrence twice: {runs:?}"
    );
    for t in &instants {
        assert_eq!(
            (t - instants[0]).rem_euclid(4_000),
            0,
            "{t} is off the 4 s timeline of {}: {runs:?}",
            instants[0]
        );
    }
    let during: Vec<&RunListItem> = runs
        .iter()
        .filter(|r| (stopped..restarted).contains(&ms_of(&r.core().scheduled_at)))
        .collect();
    assert_eq!(
        during.len(),
        1,
        "one instant fell in the downtime: {runs:?}"
    );
    assert_eq!(
        during[0].core().kind,
        RunKind::Scheduled,
        "it ran as scheduled: {runs:?}"
    );
    assert_ne!(during[0].core.status, RunStatus::Skipped, "{runs:?}");
}
