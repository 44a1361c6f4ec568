//! studio-failover-bench: the hot-standby scheduler's failover figures for
//! `docs/PERFORMANCE.md` (docs/FLEETS.md, "Leadership and terms").
//!
//! `STUDIO_TEST_DATABASE_URL=postgres://… cargo run --release -p studio-tests --bin
//! studio-failover-bench [-- KILLS FREEZES]` (default 20 and 5)
//!
//! Three studiod on a new database of that server, each with a home of its own, at the
//! default failover budget (5 s), and one schedule firing every second
//! (`missed_fire: run_once`). Each kill trial `kill -9`s the leader and reads, from a
//! survivor, when the next term was taken (`leader_since`: the takeover) and when the
//! first run after the kill was made (the new leader's first fire), both on this
//! machine's clock; then the killed member starts again. Each freeze trial stops the
//! leader (SIGSTOP) instead, so only the lock's timeout ends its lead, then lets it go on
//! (SIGCONT) and waits until it follows. Trials are 2 to 3 s apart (a random part, so
//! each strikes at a random point of the followers' tries and of the schedule's second).

use std::time::{Duration, Instant};

use rustix::process::Signal;
use studio_api::{ClusterState, RunPage, Schedule, schedule::MissedFire};
use studio_tests::{
    api::{command_spec, every},
    cluster::{Member, TOKEN, index_of},
    http, signal,
};

fn ms(text: &str) -> i64 {
    text.parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .unwrap_or_else(|_| panic!("not an instant: {text}"))
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// A wait of 0 to 999 ms, so that each trial strikes at a random point of the
/// followers' one-second tries and of the schedule's second.
fn jitter() -> Duration {
    let mut byte = [0u8; 2];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut byte))
        .expect("random bytes");
    Duration::from_millis(u64::from(u16::from_le_bytes(byte)) % 1_000)
}

fn pct(sorted: &[i64], p: f64) -> i64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

async fn get<T: serde::de::DeserializeOwned>(member: &Member, path: &str) -> Option<T> {
    let resp = http()
        .get(format!("{}{path}", member.base()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    resp.json().await.ok()
}

/// Waits until `asked` reports a term above `after`; that term, its leader and when it
/// was taken (ms).
async fn next_term(asked: &Member, after: i64) -> (i64, String, i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(c) = get::<ClusterState>(asked, "/api/admin/cluster").await
            && c.term > after
            && let (Some(leader), Some(since)) = (c.leader, c.leader_since)
        {
            return (c.term, leader, ms(&since));
        }
        assert!(Instant::now() < deadline, "no new leader:\n{}", asked.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// When the first run of `schedule` made at or after `since` (ms) was made.
async fn first_fire_after(asked: &Member, schedule: &str, since: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let path = format!("/api/schedules/{schedule}/runs?limit=20");
        if let Some(page) = get::<RunPage>(asked, &path).await
            && let Some(first) = page
                .runs
                .iter()
                .map(|r| ms(&r.core.created_at))
                .filter(|at| *at >= since)
                .min()
        {
            return first;
        }
        assert!(Instant::now() < deadline, "no fire after the failover");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `member` reports itself following.
async fn following(member: &Member) {
    let id = member.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(c) = get::<ClusterState>(member, "/api/admin/cluster").await
            && c.members
                .iter()
                .any(|m| m.id == id && m.state == "following")
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the woken member does not follow"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn summary(label: &str, mut values: Vec<i64>) {
    values.sort_unstable();
    println!(
        "{label}: p50 {} ms, p90 {} ms, max {} ms, min {} ms ({} trials)",
        pct(&values, 0.5),
        pct(&values, 0.9),
        values[values.len() - 1],
        values[0],
        values.len()
    );
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let kills: usize = args.next().map_or(20, |a| a.parse().expect("KILLS"));
    let freezes: usize = args.next().map_or(5, |a| a.parse().expect("FREEZES"));
    assert!(
        studio_tests::postgres::enabled(),
        "set STUDIO_TEST_DATABASE_URL to a PostgreSQL server (scripts/postgres start DIR prints one)"
    );
    println!("# studio-failover-bench\n");
    let keeper = studio_tests::TempDir::new("failover-db");
    let url = studio_tests::postgres::database_for(keeper.path()).expect("a database");
    let env = [("STUDIO_COMMAND_ALLOWLIST", "true")];
    let first = Member::first(&url, &env);
    let mut members = vec![Member::joining(&first, &env), Member::joining(&first, &env)];
    members.insert(0, first);
    let (mut term, mut leader, _) = next_term(&members[0], 0).await;
    let mut spec = command_spec("tick", every("1s"), "true", &[]);
    spec.policies.missed_fire = MissedFire::RunOnce;
    let created: Schedule = http()
        .post(format!("{}/api/schedules", members[0].base()))
        .bearer_auth(TOKEN)
        .json(&spec)
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("a schedule");
    tokio::time::sleep(Duration::from_secs(3)).await;

    println!("kill -9 of the leader (failover budget 5 s):");
    let (mut takeovers, mut fires) = (Vec::new(), Vec::new());
    for trial in 1..=kills {
        let l = index_of(&members, &leader);
        let survivor = (l + 1) % 3;
        let killed_at = now_ms();
        members[l].kill();
        let (t, new, since) = next_term(&members[survivor], term).await;
        let fired = first_fire_after(&members[survivor], &created.id, killed_at).await;
        println!(
            "  trial {trial:2}: term {t}, takeover {} ms, first fire {} ms",
            since - killed_at,
            fired - killed_at
        );
        takeovers.push(since - killed_at);
        fires.push(fired - killed_at);
        (term, leader) = (t, new);
        members[l].restart();
        tokio::time::sleep(Duration::from_secs(2) + jitter()).await;
    }
    summary("kill → takeover", takeovers);
    summary("kill → first fire by the new leader", fires);

    println!("\nSIGSTOP of the leader (its session ended by idle_session_timeout = 3 s):");
    let (mut takeovers, mut fires) = (Vec::new(), Vec::new());
    for trial in 1..=freezes {
        let l = index_of(&members, &leader);
        let survivor = (l + 1) % 3;
        let frozen_at = now_ms();
        signal(members[l].pid(), Signal::STOP);
        let (t, new, since) = next_term(&members[survivor], term).await;
        let fired = first_fire_after(&members[survivor], &created.id, frozen_at).await;
        println!(
            "  trial {trial:2}: term {t}, takeover {} ms, first fire {} ms",
            since - frozen_at,
            fired - frozen_at
        );
        takeovers.push(since - frozen_at);
        fires.push(fired - frozen_at);
        (term, leader) = (t, new);
        signal(members[l].pid(), Signal::CONT);
        following(&members[l]).await;
        tokio::time::sleep(Duration::from_secs(2) + jitter()).await;
    }
    summary("freeze → takeover", takeovers);
    summary("freeze → first fire by the new leader", fires);
    for m in &mut members {
        m.stop();
    }
}
