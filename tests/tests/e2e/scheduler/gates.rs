//! The gates, in order: overlap, budget, rate limit, `max_runs`, the global cap; and
//! what a manual trigger may bypass.

use studio_api::{
    Code,
    schedule::{Overlap, RateLimit},
};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_max_runs_holds_under_50_concurrent_triggers() {
    let studio = start(&[]);
    let api = std::sync::Arc::new(Api::new(&studio));
    let spec = with_policies(
        command("capped", every("1d"), "true", &[]),
        Policies {
            max_runs: Some(3),
            overlap: Overlap::Allow,
            ..Policies::default()
        },
    );
    let id = api.create(&spec).await.id;

    let mut set = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let api = api.clone();
        let id = id.clone();
        set.spawn(async move { api.act(&format!("/api/schedules/{id}/trigger")).await });
    }
    let answers = set.join_all().await;
    let accepted = answers.iter().filter(|r| r.status == 202).count();
    let refused = answers
        .iter()
        .filter(|r| r.status == 409 && r.error().code == Code::MaxRunsReached)
        .count();
    assert_eq!(
        (accepted, refused),
        (3, 47),
        "every answer: {:?}",
        answers
            .iter()
            .map(|r| (r.status, (r.status != 202).then(|| r.error().code)))
            .collect::<Vec<_>>()
    );

    let runs = api
        .wait_runs(&id, "three finished runs", |runs| {
            runs.len() >= 3 && runs.iter().all(terminal)
        })
        .await;
    assert_eq!(runs.len(), 3, "{runs:?}");
    let schedule = api.schedule(&id).await;
    assert_eq!(schedule.runs_counted, 3, "{schedule:?}");
    let reply = api.act(&format!("/api/schedules/{id}/trigger")).await;
    assert_eq!(reply.code(), (409, Code::MaxRunsReached));
    // "once reached, the schedule is disarmed": no next fire is announced.
    assert!(
        schedule.next_fire_at.is_none(),
        "a schedule at max_runs is disarmed: {schedule:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_overlap_skip_records_skipped_runs_while_one_runs() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let spec = with_policies(
        command("overlap/skip", every("1s"), "sleep", &["3"]),
        Policies {
            overlap: Overlap::Skip,
            ..Policies::default()
        },
    );
    let id = api.create(&spec).await.id;
    api.wait_runs(&id, "a finished run and overlap skips", |runs| {
        runs.iter().any(|r| r.core().status == RunStatus::Completed)
            && runs.iter().any(|r| is(r, RunStatus::Skipped, "overlap"))
    })
    .await;
    api.disable(&id).await;
    let runs = api
        .wait_runs(&id, "every run to end", |runs| runs.iter().all(terminal))
        .await;
    let ran: Vec<&RunListItem> = runs
        .iter()
        .filter(|r| r.core().status != RunStatus::Skipped)
        .collect();
    for (i, a) in ran.iter().enumerate() {
        for b in &ran[i + 1..] {
            assert!(
                !overlapping(a, b),
                "two runs overlapped under skip: {a:?} {b:?}"
            );
        }
    }
    for skipped in runs
        .iter()
        .filter(|r| r.core().status == RunStatus::Skipped)
    {
        assert_eq!(
            skipped.core.reason.as_deref(),
            Some("overlap"),
            "{skipped:?}"
        );
        assert!(
            skipped.core().dispatched_at.is_none(),
            "a skipped run never ran: {skipped:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_overlap_allow_runs_concurrently() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let spec = with_policies(
        command("overlap/allow", every("1s"), "sleep", &["3"]),
        Policies {
            overlap: Overlap::Allow,
            ..Policies::default()
        },
    );
    let id = api.create(&spec).await.id;
    let runs = api
        .wait_runs(&id, "two completed runs", |runs| {
            runs.iter()
                .filter(|r| r.core().status == RunStatus::Completed)
                .count()
                >= 2
        })
        .await;
    api.disable(&id).await;
    let done: Vec<&RunListItem> = runs
        .iter()
        .filter(|r| r.core().status == RunStatus::Completed)
        .collect();
    assert!(
        overlapping(done[0], done[1]),
        "allow lets the next fire run beside the first: {:?} {:?}",
        done[0],
        done[1]
    );
    assert!(
        !runs.iter().any(|r| r.core().status == RunStatus::Skipped),
        "nothing skipped under allow: {runs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_overlap_replace_cancels_the_running_one() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let spec = with_policies(
        command("overlap/replace", every("2s"), "sleep", &["300"]),
        Policies {
            overlap: Overlap::Replace,
            ..Policies::default()
        },
    );
    let id = api.create(&spec).await.id;
    let runs = api
        .wait_runs(&id, "a replaced run and its successor running", |runs| {
            runs.iter().any(|r| is(r, RunStatus::Cancelled, "replaced"))
                && runs.last().is_some_and(running)
        })
        .await;
    api.disable(&id).await;
    let replaced = runs
        .iter()
        .find(|r| is(r, RunStatus::Cancelled, "replaced"))
        .expect("a replaced run");
    let successor = runs.last().expect("a successor");
    assert!(
        ms_of(&successor.core().dispatched_at) >= ms_of(&replaced.core().finished_at),
        "replace cancels first, then fires: {replaced:?} {successor:?}"
    );
    let reply = api
        .act(&format!("/api/runs/{}/cancel", successor.core.id))
        .await;
    assert_eq!(reply.status, 200, "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_global_cap_queues_and_loses_nothing() {
    let studio = start(&[("STUDIO_MAX_CONCURRENT_RUNS", "1")]);
    let api = Api::new(&studio);
    let a = api
        .create(&command("cap/a", every("1d"), "sleep", &["2"]))
        .await
        .id;
    let b = api
        .create(&command("cap/b", every("1d"), "sleep", &["2"]))
        .await
        .id;
    let (ra, rb) = tokio::join!(api.trigger(&a), api.trigger(&b));
    let ids = [ra.core.id, rb.core.id];
    let mut saw_queued = false;
    let mut max_active = 0;
    until("both runs to end", WAIT, async || {
        // One list request is one read of the table: both statuses at the same instant
        // (two requests could see the first run still running and the second started).
        let listed: Vec<RunListItem> = api
            .try_list("/api/runs")
            .await?
            .into_iter()
            .filter(|r| ids.contains(&r.core.id))
            .collect();
        saw_queued |= listed.iter().any(|r| r.core().status == RunStatus::Queued);
        max_active = max_active.max(
            listed
                .iter()
                .filter(|r| r.core().status == RunStatus::Running)
                .count(),
        );
        (listed.len() == 2 && listed.iter().all(terminal)).then_some(())
    })
    .await;
    let mut runs = Vec::new();
    for id in &ids {
        runs.push(api.run(id).await);
    }
    assert!(saw_queued, "one of the two waited as queued");
    assert_eq!(max_active, 1, "never two running with a cap of 1");
    for r in &runs {
        assert_eq!(r.core().status, RunStatus::Completed, "{r:?}");
    }
    assert!(
        runs.iter().any(|r| r
            .transitions
            .iter()
            .any(|t| t.from == Some(RunStatus::Queued) || t.to == RunStatus::Queued)),
        "the queued run's transitions show it: {runs:?}"
    );
    assert!(
        !overlapping(&runs[0], &runs[1]),
        "the cap kept them apart: {runs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_rate_limit_skips_fires_beyond_the_window() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let spec = with_policies(
        command("limited", every("1s"), "true", &[]),
        Policies {
            rate_limit: Some(RateLimit {
                max_fires: 2,
                window_seconds: 60,
            }),
            ..Policies::default()
        },
    );
    let id = api.create(&spec).await.id;
    let runs = api
        .wait_runs(&id, "two rate-limited fires", |runs| {
            runs.iter()
                .filter(|r| is(r, RunStatus::Skipped, "rate_limited"))
                .count()
                >= 2
        })
        .await;
    api.disable(&id).await;
    let ran: Vec<&RunListItem> = runs
        .iter()
        .filter(|r| r.core().status != RunStatus::Skipped)
        .collect();
    assert_eq!(
        ran.len(),
        2,
        "two fires in the window, then skips: {runs:?}"
    );
    let first_skip = runs
        .iter()
        .find(|r| r.core().status == RunStatus::Skipped)
        .expect("a skip");
    assert!(
        ran.iter()
            .all(|r| ms_of(&r.core().scheduled_at) < ms_of(&first_skip.core().scheduled_at)),
        "the skips come after the allowed fires: {runs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_manual_trigger_bypasses_overlap_and_never_consumes_an_at() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let at = in_secs(4);
    let spec = with_policies(
        command("at/once", super::at(&at), "sleep", &["1"]),
        Policies {
            overlap: Overlap::Skip,
            ..Policies::default()
        },
    );
    let schedule = api.create(&spec).await;
    let id = schedule.id.clone();
    assert_eq!(ms_of(&schedule.next_fire_at), ms(&at), "{schedule:?}");
    assert_eq!(schedule.health, "never-fired", "{schedule:?}");
    // Two manual runs at once: overlap guards the clock, not a person asking.
    let (a, b) = tokio::join!(api.trigger(&id), api.trigger(&id));
    for run in [&a, &b] {
        let run = api.finished(&run.core.id).await;
        assert_eq!(run.core().status, RunStatus::Completed, "{run:?}");
    }
    let after = api.schedule(&id).await;
    assert_eq!(
        ms_of(&after.next_fire_at),
        ms(&at),
        "the at is still armed after manual runs: {after:?}"
    );
    let runs = api
        .wait_runs(&id, "the at to fire", |runs| {
            runs.iter()
                .any(|r| r.core().kind == RunKind::Scheduled && terminal(r))
        })
        .await;
    let fired: Vec<&RunListItem> = runs
        .iter()
        .filter(|r| r.core().kind == RunKind::Scheduled)
        .collect();
    assert_eq!(fired.len(), 1, "{runs:?}");
    assert_eq!(ms_of(&fired[0].core().scheduled_at), ms(&at));
    assert_eq!(
        fired[0].core().status,
        RunStatus::Completed,
        "{:?}",
        fired[0]
    );
    let done = api.schedule(&id).await;
    assert!(done.next_fire_at.is_none(), "an at fires once: {done:?}");
    assert_eq!(done.health, "healthy", "{done:?}");
}
