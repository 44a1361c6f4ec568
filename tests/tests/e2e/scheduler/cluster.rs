//! A hot-standby scheduler (docs/FLEETS.md, "Leadership and terms"): three studiod on one
//! PostgreSQL database, each with a home of its own, schedules firing every second. The
//! leader is killed (`kill -9`), frozen past its lock's timeout (SIGSTOP, then SIGCONT)
//! and every member is restarted in turn; afterwards every occurrence has exactly one
//! run, each outage was bridged by one late fire (`recovery`), and after a clean stop no
//! run is left unfinished. A run started by hand through a follower holds the leader's
//! fires of its schedule back (`overlap: skip`). A run is cancelled through any member (refused, saying why,
//! while the member that runs it is frozen), and a studiod whose keys are not the
//! cluster's is refused. Runs in the PostgreSQL pass of `scripts/test`.

use std::collections::BTreeMap;

use studio_api::{ClusterState, Code, RunListItem, schedule::MissedFire};
use studio_tests::cluster::{Member, TOKEN, index_of};

use super::*;

/// The members' failover budget: short, so the test is.
const FAILOVER_SECS: u64 = 4;

fn api_of(member: &Member) -> Api {
    Api::at(member.base(), TOKEN.to_owned())
}

/// The cluster as `member` reports it, if it answers.
async fn cluster_of(member: &Member) -> Option<ClusterState> {
    let reply = api_of(member)
        .try_send(Method::GET, "/api/admin/cluster", None)
        .await?;
    (reply.status == 200).then(|| reply.json())
}

/// Waits until a member other than the ones in `not` leads in a term above `after`, as
/// `asked` reports it; that term and its leader's member id.
async fn new_leader(asked: &Member, after: i64, not: &[&str]) -> (i64, String) {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(c) = cluster_of(asked).await
            && c.term > after
            && let Some(leader) = c.leader.filter(|l| !not.contains(&l.as_str()))
        {
            return (c.term, leader);
        }
        assert!(Instant::now() < deadline, "no new leader:\n{}", asked.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_studiods_schedule_once_through_kills_freezes_and_restarts() {
    if !studio_tests::postgres::enabled() {
        eprintln!("skipped: runs in the PostgreSQL pass of scripts/test");
        return;
    }
    let keeper = TempDir::new("cluster-db");
    let url = studio_tests::postgres::database_for(keeper.path()).expect("a database");
    let failover = FAILOVER_SECS.to_string();
    let env = [
        ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
        ("STUDIO_FAILOVER_SECS", failover.as_str()),
    ];
    let first = Member::first(&url, &env);
    let mut members = vec![Member::joining(&first, &env), Member::joining(&first, &env)];
    members.insert(0, first);
    // A studiod with keys of its own would seal evidence and secrets the others cannot
    // read: refused before it writes anything.
    let (code, said) = members[0].stranger(&env);
    assert_eq!(code, 64, "{said}");
    assert!(
        said.contains(
            "run/evidence.key is not the one the other studiod sharing this database use"
        ),
        "{said}"
    );

    // Made through a member that may or may not lead: the leader arms them either way.
    let (term, leader) = new_leader(&members[0], 0, &[]).await;
    let follower = (index_of(&members, &leader) + 1) % 3;
    let api = api_of(&members[follower]);
    // An occurrence due while nobody leads fires late, once (`run_once`: as a
    // `recovery` run), when the next leader takes over.
    let mut ids = Vec::new();
    for name in ["tick-a", "tick-b"] {
        let mut spec = command(name, every("1s"), "true", &[]);
        spec.policies.missed_fire = MissedFire::RunOnce;
        ids.push(api.create(&spec).await.id);
    }
    // A long job, started by hand where it runs (on the member asked).
    let sleeper = api
        .create(&command("sleeper", every("1h"), "sleep", &["60"]))
        .await
        .id;
    overlap_across_members(&api, &api_of(&members[index_of(&members, &leader)])).await;
    let started = Instant::now();
    wait_for_runs(&api, &ids, 3).await;

    // kill -9 the leader: another leads within the budget, in the next term.
    let l = index_of(&members, &leader);
    let killed_at = Instant::now();
    members[l].kill();
    let survivor = (l + 1) % 3;
    let (term2, leader2) = new_leader(&members[survivor], term, &[&leader]).await;
    let failover = killed_at.elapsed();
    assert!(
        failover < Duration::from_secs(FAILOVER_SECS + 2),
        "failover took {failover:?}"
    );
    members[l].restart();
    wait_for_runs(&api_of(&members[survivor]), &ids, 2).await;

    // Freeze the leader past its lock's timeout: another leads; woken, the frozen one
    // finds it leads no more (and stays up, following).
    let l2 = index_of(&members, &leader2);
    let sleeping = api_of(&members[l2]).trigger(&sleeper).await.core.id;
    api_of(&members[l2])
        .wait_run(&sleeping, "the sleeper to run", |r| {
            r.run.core.status == RunStatus::Running && r.run.core.pid.is_some()
        })
        .await;
    let frozen_pid = members[l2].pid();
    signal(frozen_pid, Signal::STOP);
    let asked = &members[(l2 + 1) % 3];
    let (term3, leader3) = new_leader(asked, term2, &[&leader2]).await;
    // Its heartbeat stops too: the others show it silent.
    let deadline = Instant::now() + WAIT;
    loop {
        let c = cluster_of(asked).await.expect("cluster");
        let frozen = c.members.iter().find(|m| m.id == leader2).expect("row");
        if frozen.state == "silent" {
            break;
        }
        assert!(Instant::now() < deadline, "never shown silent: {c:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Its runs are its own: a cancel asked elsewhere cannot reach it now, and says so.
    let refused = api_of(asked)
        .act(&format!("/api/runs/{sleeping}/cancel"))
        .await;
    assert_eq!(refused.code(), (409, Code::Conflict), "{refused}");
    assert!(refused.error().message.contains(&leader2), "{refused}");
    signal(frozen_pid, Signal::CONT);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(alive(frozen_pid), "the woken member keeps running");
    let after = cluster_of(&members[l2])
        .await
        .expect("the woken member answers");
    assert_eq!(
        (after.term, after.leader.as_deref()),
        (term3, Some(leader3.as_str())),
        "the lead moved again: {after:?}\n{}",
        members
            .iter()
            .map(Member::log)
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
    let woken = after.members.iter().find(|m| m.id == leader2).expect("row");
    assert_eq!(woken.state, "following", "{after:?}");
    // Awake, it ends its run when another member is asked to.
    let asked_api = api_of(&members[(l2 + 2) % 3]);
    let reply = asked_api.act(&format!("/api/runs/{sleeping}/cancel")).await;
    assert_eq!(reply.status, 200, "{reply}");
    let cancelled = asked_api.finished(&sleeping).await;
    assert_eq!(
        cancelled.run.core.status,
        RunStatus::Cancelled,
        "{cancelled:?}"
    );

    // Every member restarted in turn, cleanly.
    for i in 0..3 {
        members[i].stop();
        members[i].restart();
        wait_for_runs(&api_of(&members[(i + 1) % 3]), &ids, 1).await;
    }
    let c = cluster_of(&members[0]).await.expect("cluster");
    let leading: Vec<&str> = c
        .members
        .iter()
        .filter(|m| m.state == "leading")
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(leading.len(), 1, "one leader: {c:?}");
    assert_eq!(c.members.len(), 3, "{c:?}");

    // A clean stop of all; then, read from a member started again, every run is
    // finished and every occurrence has exactly one.
    for m in &mut members {
        m.stop();
    }
    let window = started.elapsed();
    members[0].restart();
    let api = api_of(&members[0]);
    for id in &ids {
        let runs = api.runs(id).await;
        check_occurrences(id, &runs, window);
    }
}

/// A run started by hand through a follower (`follower`) holds back the leader's fires
/// of its schedule (`overlap: skip`), and is cancelled through the leader.
async fn overlap_across_members(follower: &Api, leader: &Api) {
    let mut spec = command("guarded", every("1s"), "sleep", &["60"]);
    spec.enabled = false;
    let id = follower.create(&spec).await.id;
    let by_hand = follower.trigger(&id).await.core.id;
    follower
        .wait_run(&by_hand, "the run by hand to start", |r| {
            r.run.core.status == RunStatus::Running
        })
        .await;
    let enabled = follower.act(&format!("/api/schedules/{id}/enable")).await;
    assert_eq!(enabled.status, 200, "{enabled}");
    let held = until("two fires held back", WAIT, async || {
        let runs = follower.try_runs(&id).await?;
        let skipped = runs
            .iter()
            .filter(|r| r.core.reason.as_deref() == Some("overlap"))
            .count();
        (skipped >= 2).then_some(runs)
    })
    .await;
    let running: Vec<_> = held
        .iter()
        .filter(|r| r.core.status == RunStatus::Running)
        .map(|r| r.core.id.clone())
        .collect();
    assert_eq!(running, vec![by_hand.clone()], "{held:?}");
    let disabled = follower.act(&format!("/api/schedules/{id}/disable")).await;
    assert_eq!(disabled.status, 200, "{disabled}");
    let reply = leader.act(&format!("/api/runs/{by_hand}/cancel")).await;
    assert_eq!(reply.status, 200, "{reply}");
    let ended = leader.finished(&by_hand).await;
    assert_eq!(ended.run.core.status, RunStatus::Cancelled, "{ended:?}");
}

/// Waits until each schedule has `more` runs beyond those it has now.
async fn wait_for_runs(api: &Api, ids: &[String], more: usize) {
    for id in ids {
        let before = api.try_runs(id).await.map_or(0, |r| r.len());
        let deadline = Instant::now() + WAIT;
        while api.try_runs(id).await.map_or(0, |r| r.len()) < before + more {
            assert!(Instant::now() < deadline, "{id} did not fire");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Each occurrence once; every run finished; one second between occurrences except after
/// a late fire (`recovery`: it ran the first occurrence an outage missed, standing for
/// the rest, and the next is the first due after it).
fn check_occurrences(id: &str, runs: &[RunListItem], window: Duration) {
    let mut per_instant: BTreeMap<i64, usize> = BTreeMap::new();
    for r in runs {
        let at = ms_opt(r.core.scheduled_at.as_deref()).expect("a scheduled run");
        *per_instant.entry(at).or_default() += 1;
        assert!(
            r.core.status.is_terminal(),
            "{id}: run {} left {:?} after a clean stop",
            r.core.id,
            r.core.status
        );
    }
    let late = runs
        .iter()
        .filter(|r| r.core.kind == RunKind::Recovery)
        .count();
    eprintln!("{id}: {} runs over {window:?}, {late} late", runs.len());
    let twice: Vec<_> = per_instant.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "{id}: occurrences with more than one run: {twice:?}"
    );
    // The gaps below make the runs contiguous from the first to the last: they must
    // span the window (less the first fire's wait and the last stop).
    let span = per_instant
        .keys()
        .next_back()
        .zip(per_instant.keys().next());
    let span_ms = span.map_or(0, |(last, first)| last - first);
    let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    assert!(
        span_ms >= window_ms - 6_000,
        "{id}: runs span {span_ms} ms of a {window_ms} ms window"
    );
    for pair in runs.windows(2) {
        let (a, b) = (&pair[0].core, &pair[1].core);
        let gap = ms_opt(b.scheduled_at.as_deref()).unwrap_or(0)
            - ms_opt(a.scheduled_at.as_deref()).unwrap_or(0);
        assert!(
            gap <= 1_000 || a.kind == RunKind::Recovery,
            "{id}: {gap} ms between {} and {} without a late fire ({:?})",
            a.id,
            b.id,
            a.kind
        );
    }
}

/// Each member keeps the command allow-list in memory for its checks: a change made
/// through one reaches the others at once (PostgreSQL's notification at commit), both
/// ways; a removal is never honoured by a member that has not heard of it. A run's
/// output is kept by the member that ran it: the other says which member that is
/// (`409 output_elsewhere`) rather than answer an empty log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowlist_change_holds_at_every_member_and_output_says_where_it_is() {
    if !studio_tests::postgres::enabled() {
        eprintln!("skipped: runs in the PostgreSQL pass of scripts/test");
        return;
    }
    let keeper = TempDir::new("cluster-allow-db");
    let url = studio_tests::postgres::database_for(keeper.path()).expect("a database");
    let env = [("STUDIO_COMMAND_ALLOWLIST", "true")];
    let first = Member::first(&url, &env);
    let second = Member::joining(&first, &env);
    let (one, two) = (api_of(&first), api_of(&second));
    let made = std::sync::atomic::AtomicUsize::new(0);
    // A schedule running `sleep`, created through the second member: its status.
    let create = async || {
        let n = made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let spec = studio_tests::api::command_spec(
            &format!("nap-{n}"),
            studio_tests::api::every("1h"),
            "sleep",
            &["1"],
        );
        two.post("/api/schedules", &spec).await.status
    };
    assert_eq!(create().await, 400, "allowed before anyone allowed it");

    let change = |add: &[&str], remove: &[&str]| studio_api::AllowChange {
        add: add.iter().map(|s| (*s).to_owned()).collect(),
        remove: remove.iter().map(|s| (*s).to_owned()).collect(),
    };
    let reply = one
        .post("/api/admin/allowlist", &change(&["sleep"], &[]))
        .await;
    assert_eq!(reply.status, 200, "{reply}");
    let started = Instant::now();
    until("the second member never allowed sleep", WAIT, async || {
        (create().await == 201).then_some(())
    })
    .await;
    let allowed_in = started.elapsed();

    let reply = one
        .post("/api/admin/allowlist", &change(&[], &["sleep"]))
        .await;
    assert_eq!(reply.status, 200, "{reply}");
    let started = Instant::now();
    until("the second member still allows sleep", WAIT, async || {
        (create().await == 400).then_some(())
    })
    .await;
    let removed_in = started.elapsed();
    eprintln!("the second member allowed after {allowed_in:?}, refused again after {removed_in:?}");

    // A run by hand through the first member, run by whichever member claims it.
    let spec = studio_tests::api::command_spec("say", studio_tests::api::every("1h"), "true", &[]);
    let (_, run) = one.create_and_trigger(&spec).await;
    one.finished(&run).await;
    let answers = [one.log(&run, "").await, two.log(&run, "").await];
    let (held, elsewhere): (Vec<_>, Vec<_>) = answers.iter().partition(|(s, ..)| *s == 200);
    assert_eq!((held.len(), elsewhere.len()), (1, 1), "{answers:?}");
    let (status, _, body) = elsewhere[0];
    assert_eq!(*status, 409);
    let error: studio_api::ErrorBody = serde_json::from_slice(body).expect("an error body");
    assert_eq!(error.code, Code::OutputElsewhere, "{error:?}");
    let holder = if answers[0].0 == 200 { &first } else { &second };
    assert!(error.message.contains(&holder.id()), "{error:?}");
    assert!(
        error.message.contains("read it through that member's API"),
        "{error:?}"
    );
}
