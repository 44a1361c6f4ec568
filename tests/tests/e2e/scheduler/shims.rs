//! Jobs that outlive their daemon (docs/SHIMS.md): a long job through `studio restart
//! daemon` and a `kill -9` of studiod, a job that must not run unattended, a cancel of an
//! adopted job, and the crash loop: studiod SIGKILLed at random moments hundreds of times
//! while fifty schedules fire every second, and no occurrence ever starts twice.

use std::{
    collections::{BTreeMap, HashMap},
    fs::File,
    process::{Child, Command, Stdio},
};

use studio_tests::{WORKER_ADDR, bins, wait_for};

use studio_api::schedule::{OnDaemonLoss, Overlap};

use super::*;

/// Waits until the run's job leader is recorded; returns the run and the leader's pid.
async fn dispatched(api: &Api, run_id: &str) -> (RunDetail, u32) {
    let run = api
        .wait_run(run_id, "the job to start", |r| r.core().pid.is_some())
        .await;
    let pid = run.core().pid.expect("pid") as u32;
    assert!(alive(pid), "the job runs: {run:?}");
    (run, pid)
}

/// SIGKILLs studiod and waits for the supervisor to start another.
fn kill_daemon(studio: &Studio) -> u32 {
    let daemon = studio.child_pid("daemon");
    signal(daemon, Signal::KILL);
    studio.wait_running("daemon", Some(daemon), WAIT)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shims_a_long_job_survives_a_daemon_restart_and_a_kill() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let go = marker(&studio, "go");
    // Half its output before the restarts, half after; it ends when the test says so.
    let script = format!(
        "seq 1 500; while [ ! -e '{}' ]; do sleep 0.05; done; seq 501 1000",
        go.display()
    );
    let (id, run_id) = api
        .create_and_trigger(&sh("long", every("1h"), &script))
        .await;
    let (_, leader) = dispatched(&api, &run_id).await;

    let daemon = studio.child_pid("daemon");
    let out = studio.cli(&["restart", "daemon"]);
    assert!(out.status.success(), "{out:?}");
    let restarted = studio.wait_running("daemon", Some(daemon), WAIT);
    assert_ne!(restarted, daemon);
    assert!(alive(leader), "the job outlived `studio restart daemon`");
    assert_eq!(
        api.run(&run_id).await.core().status,
        RunStatus::Running,
        "adopted"
    );

    kill_daemon(&studio);
    assert!(alive(leader), "the job outlived a kill -9 of studiod");
    let run = api.run(&run_id).await;
    assert_eq!(
        run.core().status,
        RunStatus::Running,
        "adopted again: {run:?}"
    );
    assert_eq!(
        run.core().pid,
        Some(i64::from(leader)),
        "the same job: {run:?}"
    );

    std::fs::write(&go, b"").expect("go");
    let run = api.finished(&run_id).await;
    assert!(is(&run, RunStatus::Completed, "exit_0"), "{run:?}");
    assert_eq!(run.core().exit_code, Some(0), "{run:?}");
    let expected: String = (1..=1000).map(|n| format!("{n}\n")).collect();
    let (status, size, log) = api.log(&run_id, "stream=stdout").await;
    assert_eq!(status, 200);
    assert_eq!(size, Some(expected.len() as u64));
    assert_eq!(
        String::from_utf8_lossy(&log),
        expected,
        "the whole log, across both restarts"
    );
    assert!(!alive(leader));
    let runs = api.runs(&id).await;
    assert_eq!(runs.len(), 1, "launched once: {runs:?}");
    let log = studio.log("daemon");
    assert!(
        log.contains("running job(s) left to their shims"),
        "the restart detached: {log}"
    );
    assert!(log.contains("adopted a running job"), "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shims_a_job_that_must_not_run_unattended_ends_with_its_daemon() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let spec = with_policies(
        command("attended", every("1h"), "sleep", &["60"]),
        Policies {
            on_daemon_loss: OnDaemonLoss::Kill,
            ..Policies::default()
        },
    );
    let (_, run_id) = api.create_and_trigger(&spec).await;
    let (_, leader) = dispatched(&api, &run_id).await;
    let daemon = studio.child_pid("daemon");
    signal(daemon, Signal::KILL);
    assert!(
        wait_for(Duration::from_secs(10), || (!alive(leader)).then_some(())).is_some(),
        "the job ended when its daemon was gone"
    );
    studio.wait_running("daemon", Some(daemon), WAIT);
    let run = api.finished(&run_id).await;
    assert!(is(&run, RunStatus::Cancelled, "daemon_lost"), "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shims_an_adopted_job_can_be_cancelled() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let (_, run_id) = api
        .create_and_trigger(&command("adopted", every("1h"), "sleep", &["60"]))
        .await;
    let (_, leader) = dispatched(&api, &run_id).await;
    kill_daemon(&studio);
    assert!(alive(leader), "the job outlived its daemon");
    let reply = api.act(&format!("/api/runs/{run_id}/cancel")).await;
    assert_eq!(reply.status, 200, "{reply}");
    let run = api.finished(&run_id).await;
    assert_eq!(run.core().status, RunStatus::Cancelled, "{run:?}");
    assert!(!alive(leader), "the job's group was ended");
}

/// A studiod on `home` alone (no supervisor, no app), its log appended to `log`; killed
/// and reaped on drop.
struct Daemon(Child);

impl Daemon {
    fn start(home: &Path, env: &[(&str, &str)], log: &File) -> Self {
        let child = Command::new(&bins().studiod)
            .arg("--home")
            .arg(home)
            .args(["--addr", "127.0.0.1:0"])
            .env_remove("STUDIO_TOKEN")
            .env(WORKER_ADDR.0, WORKER_ADDR.1)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log.try_clone().expect("log"))
            .spawn()
            .expect("studiod");
        Self(child)
    }

    /// The address of its readiness line.
    fn ready(&mut self) -> String {
        let out = self.0.stdout.take().expect("stdout");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)
            .expect("readiness line");
        studio_contract::ready::Ready::parse(&line)
            .expect("a readiness line")
            .addr
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A small deterministic generator (xorshift), seeded per run and printed, so a failing
/// sequence of kill delays can be replayed with `STUDIO_CRASH_LOOP_SEED`.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shims_a_crash_loop_never_starts_an_occurrence_twice() {
    const ITERATIONS: usize = 300;
    const SCHEDULES: usize = 50;
    /// A quarter of the kills land while studiod starts (before its readiness line: the
    /// home lock, migrations, the launcher), the rest within this long after it serves,
    /// where recovery, adoption, firing and launching run. Waiting for the readiness line
    /// keeps the loop meaningful on a loaded machine, where starting takes longer.
    const MAX_LIFE_MS: u64 = 100;
    const MAX_START_KILL_MS: u64 = 40;
    let home = TempDir::new("crashloop");
    let env = [
        ("STUDIO_COMMAND_ALLOWLIST", "sh"),
        ("STUDIO_SCHEDULER_TZ", "UTC"),
        ("STUDIO_MAX_CONCURRENT_RUNS", "64"),
    ];
    let log = File::options()
        .create(true)
        .append(true)
        .open(home.path().join("daemons.log"))
        .expect("log");
    let starts = home.path().join("starts");
    // Each job records its start, then lives on a little: long enough to outlive many a
    // studiod and be adopted by the next.
    let script = format!(
        "echo \"$STUDIO_SCHEDULE_ID $STUDIO_SCHEDULED_AT $STUDIO_RUN_ID\" >> '{}'; sleep 0.2",
        starts.display()
    );

    let mut first = Daemon::start(home.path(), &env, &log);
    let addr = first.ready();
    let token = std::fs::read_to_string(home.path().join("run/token")).expect("token");
    let api = Api::at(format!("http://{addr}"), token.trim().to_owned());
    let mut ids = Vec::new();
    for i in 0..SCHEDULES {
        let spec = with_policies(
            sh(&format!("loop/{i}"), every("1s"), &script),
            Policies {
                overlap: Overlap::Allow,
                ..Policies::default()
            },
        );
        ids.push(api.create(&spec).await.id);
    }
    drop(first);

    let seed = std::env::var("STUDIO_CRASH_LOOP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| (now_ms() as u64) | 1);
    eprintln!("crash loop seed: {seed}");
    let mut rng = Rng(seed);
    let began = Instant::now();
    for _ in 0..ITERATIONS {
        let mut daemon = Daemon::start(home.path(), &env, &log);
        let life = if rng.below(4) == 0 {
            rng.below(MAX_START_KILL_MS)
        } else {
            tokio::task::block_in_place(|| daemon.ready());
            rng.below(MAX_LIFE_MS)
        };
        tokio::time::sleep(Duration::from_millis(life)).await;
        drop(daemon);
    }
    let looped = began.elapsed();

    // A last studiod settles what the killed ones left, then nothing fires any more.
    let mut last = Daemon::start(home.path(), &env, &log);
    let addr = last.ready();
    let api = Api::at(format!("http://{addr}"), token.trim().to_owned());
    for id in &ids {
        api.disable(id).await;
    }
    until("every run to end", WAIT, async || {
        let active = api.try_list("/api/runs?status=running").await?.len()
            + api.try_list("/api/runs?status=queued").await?.len();
        (active == 0).then_some(())
    })
    .await;
    let runs = api.try_list("/api/runs").await.expect("runs");
    drop(last);

    let mut occurrences = HashMap::new();
    let mut started = HashSet::new();
    let lines = lines_of(&starts);
    for line in &lines {
        let mut words = line.split(' ');
        let (Some(schedule), Some(at), Some(run)) = (words.next(), words.next(), words.next())
        else {
            panic!("an unreadable start line: {line:?}");
        };
        if let Some(earlier) = occurrences.insert((schedule, at), run) {
            panic!("occurrence {schedule} {at} started twice: by {earlier} and by {run:?}");
        }
        assert!(started.insert(run), "run {run} started twice");
    }
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for run in &runs {
        let id = run.core.id.as_str();
        let reason = run.core.reason.as_deref();
        let key = format!("{} {}", run.core.status.as_str(), reason.unwrap_or("null"));
        *outcomes.entry(key).or_default() += 1;
        let completed = run.core().status == RunStatus::Completed;
        assert_eq!(
            completed,
            started.contains(id),
            "a run is completed exactly when its job started: {run:?}"
        );
        assert!(
            ![
                "shim_lost",
                "launch_uncertain",
                "host_rebooted",
                "spawn_failed",
                "stale"
            ]
            .contains(&reason.unwrap_or_default()),
            "no shim was touched, so no launch is uncertain: {run:?}"
        );
    }
    assert_eq!(started.len(), lines.len());
    let adopted = std::fs::read_to_string(home.path().join("daemons.log"))
        .unwrap_or_default()
        .matches("adopted a running job")
        .count();
    let replaced = runs
        .iter()
        .filter(|r| is(r, RunStatus::Failed, "never_dispatched"))
        .count();
    // However loaded the machine (fewer fires per life), the loop must have crossed each
    // path the contract covers: launches, jobs adopted by a later studiod, and runs whose
    // studiod died before their shim existed.
    assert!(
        lines.len() >= 50 && adopted > 0 && replaced > 0,
        "the loop proved too little: {} starts, {adopted} adopted, {replaced} replaced",
        lines.len()
    );
    eprintln!(
        "crash loop: {ITERATIONS} SIGKILLs of studiod in {:.1} s; {} jobs started, none twice; \
         {adopted} adopted; runs by outcome: {outcomes:?}",
        looped.as_secs_f64(),
        lines.len(),
    );
}
