//! Remote workers in real processes (docs/TASKS.md, "Workers"): `studio worker`
//! processes, each with its own home and certificate, joined with one-time tokens to one
//! studiod over mutual TLS. Tasks land only on workers whose labels match; `kill -9` of a
//! worker mid-task ends the attempt `worker_lost` and its retry completes elsewhere; a
//! worker stopped past its lease is replaced, and when it resumes its late report is
//! refused and its job killed; studiod restarted under running workers loses nothing;
//! a worker's own allow-list is the last word; certificates from another authority,
//! expired ones, revoked workers and reused or expired tokens are refused.

use std::process::{Child, Command, Output, Stdio};

use studio_api::{JoinTokenCreated, Task, TaskDetail, TaskStatus, WorkerList};

use super::*;

/// A worker's lease in these tests: short, so that losses are noticed quickly.
const LEASE_SECS: &str = "2";

fn studio_with_workers(lease_secs: &str) -> (Studio, Api) {
    let port = studio_tests::free_port();
    let addr = format!("127.0.0.1:{port}");
    let studio = start(&[
        ("STUDIO_WORKER_ADDR", addr.as_str()),
        ("STUDIO_LEASE_TTL_SECS", lease_secs),
    ]);
    let api = Api::new(&studio);
    (studio, api)
}

/// `studio <args>` with nothing from the test's environment that names a home.
fn studio_cmd(args: &[&str]) -> Output {
    Command::new(&studio_tests::bins().studio)
        .args(args)
        .env_remove("STUDIO_HOME")
        .env_remove("STUDIO_WORKER_HOME")
        .stdin(Stdio::null())
        .output()
        .expect("run studio")
}

async fn token(api: &Api, labels: &[&str], ttl: &str) -> JoinTokenCreated {
    let body = serde_json::json!({ "labels": labels, "ttl": ttl });
    api.post("/api/workers/tokens", &body).await.expect(201)
}

/// One `studio worker`: its own home (removed, with any job it left, on drop), and
/// its process while it runs (killed by pid on drop).
struct WorkerProc {
    home: TempDir,
    id: String,
    child: Option<Child>,
}

impl WorkerProc {
    /// Joins a new worker with a token for `labels`, allowing `allow` on it.
    async fn join(api: &Api, name: &str, labels: &[&str], allow: &[&str]) -> Self {
        let created = token(api, labels, "10m").await;
        let home = studio_tests::join_worker(&created.server, &created.token, name, allow);
        let identity: serde_json::Value =
            serde_json::from_slice(&std::fs::read(home.path().join("worker.json")).expect("id"))
                .expect("worker.json");
        let id = identity["worker_id"].as_str().expect("an id").to_owned();
        Self {
            home,
            id,
            child: None,
        }
    }

    fn start(&mut self) {
        let log = std::fs::File::create(self.home.path().join("worker.log")).expect("log");
        let child = Command::new(&studio_tests::bins().studio)
            .args(["worker", "--capacity", "2", "--home"])
            .arg(self.home.path())
            .env_remove("STUDIO_HOME")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn studio worker");
        self.child = Some(child);
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("worker.log")).unwrap_or_default()
    }

    /// The job leader this worker recorded for `run`.
    fn job_pid(&self, run: &str) -> Option<u32> {
        let path = self.home.path().join("runs").join(run).join("job.json");
        let job: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        job["pid"].as_u64().and_then(|p| u32::try_from(p).ok())
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            signal(child.id(), Signal::CONT);
        }
        self.kill9();
    }
}

async fn connected(api: &Api, n: usize) {
    until(&format!("{n} connected workers"), WAIT, async || {
        let list: WorkerList = api.get("/api/workers").await.expect(200);
        (list
            .workers
            .iter()
            .filter(|w| !w.builtin && w.connected)
            .count()
            == n)
            .then_some(())
    })
    .await;
}

async fn submit(api: &Api, body: serde_json::Value) -> Task {
    let reply = api.post("/api/tasks", &body).await;
    assert!(matches!(reply.status, 200 | 201), "{reply}");
    reply.json()
}

fn sh_task(labels: &[&str], script: &str) -> serde_json::Value {
    serde_json::json!({
        "action": {"kind": "command", "executable": "sh", "args": ["-c", script]},
        "labels": labels,
        "retry": {"max_attempts": 3, "on": ["worker_lost"], "backoff": {"initial": "1s", "max": "1s"}},
    })
}

async fn detail(api: &Api, id: &str) -> TaskDetail {
    api.get(&format!("/api/tasks/{id}")).await.expect(200)
}

async fn finished(api: &Api, id: &str) -> TaskDetail {
    until("the task to end", Duration::from_secs(60), async || {
        // studiod may be restarting: no answer is not an answer yet.
        let reply = api
            .try_send(Method::GET, &format!("/api/tasks/{id}"), None)
            .await?;
        let t: TaskDetail = reply.expect(200);
        t.task.status.is_terminal().then_some(t)
    })
    .await
}

/// The task's attempt that is running with its job started, once there is one.
async fn running_attempt(api: &Api, id: &str) -> RunCore {
    until("an attempt to start", WAIT, async || {
        let t = detail(api, id).await;
        t.attempts
            .iter()
            .map(|a| a.core.clone())
            .find(|a| a.status == RunStatus::Running && a.dispatched_at.is_some())
    })
    .await
}

fn completed(t: &TaskDetail) -> usize {
    t.attempts
        .iter()
        .filter(|a| a.core.status == RunStatus::Completed)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_take_only_tasks_their_labels_serve_and_keep_to_their_own_allow_list() {
    let (studio, api) = studio_with_workers(LEASE_SECS);
    let mut cpu = WorkerProc::join(&api, "cpu", &["linux"], &["sh"]).await;
    let mut gpu1 = WorkerProc::join(&api, "gpu1", &["linux", "gpu"], &["sh"]).await;
    let mut gpu2 = WorkerProc::join(&api, "gpu2", &["linux", "gpu"], &["sh"]).await;
    for w in [&mut cpu, &mut gpu1, &mut gpu2] {
        w.start();
    }
    connected(&api, 3).await;

    let mut gpu_tasks = Vec::new();
    for i in 0..4 {
        let mut body = sh_task(&["gpu"], "echo on $STUDIO_TASK_ID");
        body["idempotency_key"] = format!("gpu-{i}").into();
        gpu_tasks.push(submit(&api, body).await.id);
    }
    let linux = submit(&api, sh_task(&["linux"], "echo linux")).await.id;
    let gpu_ids = [gpu1.id.as_str(), gpu2.id.as_str()];
    for id in &gpu_tasks {
        let t = finished(&api, id).await;
        assert_eq!(t.task.status, TaskStatus::Completed, "{t:?}");
        let on = t.attempts[0].core.worker_id.clone().unwrap_or_default();
        assert!(gpu_ids.contains(&on.as_str()), "a gpu task ran on {on}");
    }
    let t = finished(&api, &linux).await;
    assert_eq!(t.task.status, TaskStatus::Completed, "{t:?}");
    // Its log came over the wire into studiod's run log.
    let log = studio.cli(&["task", "logs", &linux]);
    assert!(text(&log).contains("linux"), "{}", text(&log));

    // The same key: the same task, not run again.
    let mut again = sh_task(&["gpu"], "echo on $STUDIO_TASK_ID");
    again["idempotency_key"] = "gpu-0".into();
    let reply = api.post("/api/tasks", &again).await;
    let same: Task = reply.expect(200);
    assert_eq!(same.id, gpu_tasks[0]);
    assert_eq!(detail(&api, &same.id).await.attempts.len(), 1);

    // No worker has `arm`: accepted, queued, shown unmatched.
    let arm = submit(&api, sh_task(&["arm"], "true")).await;
    assert!(arm.unmatched && arm.status == TaskStatus::Queued, "{arm:?}");

    // studiod allows `true`; no worker does: nothing starts, and the attempt says why.
    let refused = submit(
        &api,
        serde_json::json!({
            "action": {"kind": "command", "executable": "true"},
            "labels": ["linux"],
        }),
    )
    .await;
    let t = finished(&api, &refused.id).await;
    let attempt = &t.attempts[0].core;
    assert_eq!(
        (t.task.status, attempt.reason.as_deref()),
        (TaskStatus::Failed, Some("not_allowed")),
        "{t:?}"
    );
    let list: WorkerList = api.get("/api/workers").await.expect(200);
    assert_eq!(list.workers[0].id, "builtin");
    assert_eq!(list.workers.len(), 4, "{list:?}");
    let listed = studio.cli(&["worker", "list"]);
    assert!(text(&listed).contains("gpu1"), "{}", text(&listed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_task_loses_the_attempt_and_the_retry_completes_elsewhere() {
    let (_studio, api) = studio_with_workers(LEASE_SECS);
    let mut a = WorkerProc::join(&api, "a", &["gpu"], &["sh"]).await;
    let mut b = WorkerProc::join(&api, "b", &["gpu"], &["sh"]).await;
    a.start();
    b.start();
    connected(&api, 2).await;
    let task = submit(
        &api,
        sh_task(&["gpu"], "echo started; sleep 4; echo finished"),
    )
    .await;
    let first = running_attempt(&api, &task.id).await;
    let (victim, other) = if first.worker_id.as_deref() == Some(a.id.as_str()) {
        (&mut a, &b)
    } else {
        (&mut b, &a)
    };
    victim.kill9();
    let t = finished(&api, &task.id).await;
    assert_eq!(t.task.status, TaskStatus::Completed, "{t:?}");
    let lost = &t.attempts[0].core;
    assert_eq!(
        (lost.status, lost.reason.as_deref()),
        (RunStatus::Failed, Some("worker_lost")),
        "{t:?}"
    );
    let last = &t.attempts.last().expect("a retry").core;
    assert_eq!(last.worker_id.as_deref(), Some(other.id.as_str()));
    assert_eq!(completed(&t), 1, "exactly one completed attempt: {t:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_past_its_lease_is_replaced_and_its_late_report_refused() {
    let (_studio, api) = studio_with_workers(LEASE_SECS);
    let mut a = WorkerProc::join(&api, "a", &["gpu"], &["sh"]).await;
    let mut b = WorkerProc::join(&api, "b", &["gpu"], &["sh"]).await;
    a.start();
    b.start();
    connected(&api, 2).await;
    let task = submit(&api, sh_task(&["gpu"], "sleep 8; echo finished")).await;
    let first = running_attempt(&api, &task.id).await;
    let stopped = if first.worker_id.as_deref() == Some(a.id.as_str()) {
        &a
    } else {
        &b
    };
    let job = stopped
        .job_pid(&first.id)
        .expect("the job's pid on its worker");
    signal(stopped.pid(), Signal::STOP);
    // Its lease runs out; the retry runs on the other worker.
    until("the retry to start elsewhere", WAIT, async || {
        let t = detail(&api, &task.id).await;
        (t.attempts.len() == 2 && t.attempts[1].core.dispatched_at.is_some()).then_some(())
    })
    .await;
    assert!(
        alive(job),
        "a stopped worker's job runs on until the worker resumes"
    );
    signal(stopped.pid(), Signal::CONT);
    // Resumed, it learns the attempt is not its own: the job is killed, long before
    // its own end.
    let killed = studio_tests::wait_for(Duration::from_secs(5), || (!alive(job)).then_some(()));
    assert!(
        killed.is_some(),
        "the superseded job still runs: {}",
        stopped.log()
    );
    let t = finished(&api, &task.id).await;
    assert_eq!(t.task.status, TaskStatus::Completed, "{t:?}");
    let lost = &t.attempts[0].core;
    assert_eq!(
        (lost.status, lost.reason.as_deref()),
        (RunStatus::Failed, Some("worker_lost")),
        "a late report changes nothing: {t:?}"
    );
    assert_eq!(completed(&t), 1, "{t:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studiod_restarted_under_running_workers_loses_and_repeats_nothing() {
    let (studio, api) = studio_with_workers("6");
    let mut w = WorkerProc::join(&api, "w", &["gpu"], &["sh"]).await;
    w.start();
    connected(&api, 1).await;
    let task = submit(&api, sh_task(&["gpu"], "echo begun; sleep 3; echo ended")).await;
    let first = running_attempt(&api, &task.id).await;
    let out = studio.cli(&["restart", "daemon"]);
    assert!(out.status.success(), "{}", text(&out));
    let t = finished(&api, &task.id).await;
    assert_eq!(t.task.status, TaskStatus::Completed, "{t:?}");
    assert_eq!(t.attempts.len(), 1, "nothing ran twice: {t:?}");
    assert_eq!(t.attempts[0].core.id, first.id);
    let log = studio.cli(&["task", "logs", &task.id]);
    let log = text(&log);
    assert!(log.contains("begun") && log.contains("ended"), "{log}");
}

/// studiod stops answering (suspended, so its supervisor does not restart it) for longer
/// than a lease: the worker kills the job it can no longer be sure is its own, and keeps
/// the end of the one that finished meanwhile; when studiod is back (killed and started
/// again, which gives running attempts one more lease), the worker reports both, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_loses_studiod_for_a_lease_kills_its_jobs_and_reports_on_reconnect() {
    const LEASE: Duration = Duration::from_secs(6);
    let (studio, api) = studio_with_workers("6");
    let mut w = WorkerProc::join(&api, "w", &["gpu"], &["sh"]).await;
    w.start();
    connected(&api, 1).await;
    let no_retry = |script: &str| {
        let mut body = sh_task(&["gpu"], script);
        body["retry"] = serde_json::json!({"max_attempts": 1});
        body
    };
    let quick = submit(&api, no_retry("sleep 2; echo quick")).await;
    let long = submit(&api, no_retry("echo begun; sleep 120; echo never")).await;
    let quick_run = running_attempt(&api, &quick.id).await;
    let long_run = running_attempt(&api, &long.id).await;
    let job = studio_tests::wait_for(Duration::from_secs(5), || w.job_pid(&long_run.id))
        .expect("the long job's pid on its worker");

    let daemon = studio.child_pid("daemon");
    let stopped = Instant::now();
    signal(daemon, Signal::STOP);
    let killed = studio_tests::wait_for(LEASE * 3, || (!alive(job)).then_some(()));
    let after = stopped.elapsed();
    if killed.is_none() {
        signal(daemon, Signal::CONT);
        panic!("the job outlived a lost studiod: {}", w.log());
    }
    assert!(
        after >= LEASE - Duration::from_secs(1),
        "killed after {after:?}, before a whole lease without studiod"
    );
    // studiod ends while suspended; its supervisor starts it again.
    signal(daemon, Signal::KILL);
    let t = finished(&api, &quick.id).await;
    assert_eq!(t.task.status, TaskStatus::Completed, "{t:?}");
    assert_eq!(t.attempts.len(), 1, "{t:?}");
    assert_eq!(t.attempts[0].core.id, quick_run.id);
    let log = text(&studio.cli(&["task", "logs", &quick.id]));
    assert!(log.contains("quick"), "{log}");
    let t = finished(&api, &long.id).await;
    assert_eq!(t.task.status, TaskStatus::Failed, "{t:?}");
    assert_eq!(t.attempts.len(), 1, "{t:?}");
    let lost = &t.attempts[0].core;
    assert_eq!(
        (lost.status, lost.reason.as_deref()),
        (RunStatus::Failed, Some("worker_lost")),
        "lost, not cancelled by anyone: {t:?}"
    );
    let log = text(&studio.cli(&["task", "logs", &long.id]));
    assert!(log.contains("begun") && !log.contains("never"), "{log}");
    assert!(
        w.log()
            .contains("studiod has been unreachable for a whole lease"),
        "{}",
        w.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_studiods_authority_admits_and_a_revoked_worker_is_refused() {
    let (studio, api) = studio_with_workers(LEASE_SECS);
    let mut w = WorkerProc::join(&api, "w", &["gpu"], &["sh"]).await;
    let home_arg = w.home.path().display().to_string();
    let check = |home: &str| studio_cmd(&["worker", "check", "--worker-home", home]);
    let ok = check(&home_arg);
    assert!(ok.status.success(), "{}", text(&ok));

    // A token is used once, and not after its time.
    let created = token(&api, &["gpu"], "10m").await;
    let join = |token: &str, home: &TempDir| {
        studio_cmd(&[
            "worker",
            "join",
            "--server",
            &created.server,
            "--token",
            token,
            "--worker-home",
            &home.path().display().to_string(),
        ])
    };
    let (h1, h2, h3) = (
        TempDir::new("wj1"),
        TempDir::new("wj2"),
        TempDir::new("wj3"),
    );
    assert!(join(&created.token, &h1).status.success());
    let reused = join(&created.token, &h2);
    assert!(!reused.status.success());
    assert!(text(&reused).contains("already used"), "{}", text(&reused));
    let short = token(&api, &["gpu"], "1s").await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let late = join(&short.token, &h3);
    assert!(text(&late).contains("expired"), "{}", text(&late));

    // A certificate from another authority, and an expired one from studiod's own.
    let ca_dir = studio.home_path().join("run").join("ca");
    let own = studio_pki::Authority::load_or_create(&ca_dir).expect("studiod's authority");
    let foreign_dir = TempDir::new("foreign-ca");
    let foreign = studio_pki::Authority::load_or_create(foreign_dir.path()).expect("a foreign CA");
    let forged = |sign: &dyn Fn(&str) -> studio_pki::Issued| {
        let home = TempDir::new("wforged");
        for file in ["worker.json", "ca.crt"] {
            std::fs::copy(w.home.path().join(file), home.path().join(file)).expect("copy");
        }
        let (key, csr) = studio_pki::key_and_csr("forged").expect("csr");
        std::fs::write(home.path().join("worker.key"), key).expect("key");
        std::fs::write(home.path().join("worker.crt"), sign(&csr).cert_pem).expect("cert");
        home
    };
    let from_foreign = forged(&|csr| {
        foreign
            .sign_worker_csr(csr, &w.id, Duration::from_secs(3600))
            .expect("signed")
    });
    let refused = check(&from_foreign.path().display().to_string());
    assert!(
        !refused.status.success(),
        "another authority's certificate admitted"
    );
    let now = jiff::Timestamp::now().as_millisecond();
    let expired = forged(&|csr| {
        own.sign_worker_csr_between(csr, &w.id, now - 7_200_000, now - 3_600_000)
            .expect("signed")
    });
    let refused = check(&expired.path().display().to_string());
    assert!(!refused.status.success(), "an expired certificate admitted");
    // A valid certificate of studiod's authority that no enrolled worker holds.
    let unknown = forged(&|csr| {
        own.sign_worker_csr(csr, &w.id, Duration::from_secs(3600))
            .expect("signed")
    });
    let refused = check(&unknown.path().display().to_string());
    assert!(
        text(&refused).contains("never enrolled"),
        "{}",
        text(&refused)
    );

    // Revoked while it runs a job: the attempt ends `worker_lost`, the worker is
    // refused and stops, and its job is killed.
    w.start();
    connected(&api, 1).await;
    let task = submit(
        &api,
        serde_json::json!({
            "action": {"kind": "command", "executable": "sh", "args": ["-c", "sleep 30"]},
            "labels": ["gpu"],
        }),
    )
    .await;
    let attempt = running_attempt(&api, &task.id).await;
    let job = w.job_pid(&attempt.id).expect("job pid");
    let out = studio.cli(&["worker", "revoke", &w.id]);
    assert!(out.status.success(), "{}", text(&out));
    let t = finished(&api, &task.id).await;
    assert_eq!(
        t.attempts[0].core.reason.as_deref(),
        Some("worker_lost"),
        "{t:?}"
    );
    let exited = studio_tests::wait_for(Duration::from_secs(10), || {
        w.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    });
    assert!(exited.is_some_and(|s| !s.success()), "{}", w.log());
    let gone = studio_tests::wait_for(Duration::from_secs(10), || (!alive(job)).then_some(()));
    assert!(gone.is_some(), "a revoked worker's job still runs");
    let refused = check(&home_arg);
    assert!(text(&refused).contains("revoked"), "{}", text(&refused));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_with_a_target_runs_on_a_matching_worker_and_waits_for_one() {
    let (studio, api) = studio_with_workers(LEASE_SECS);
    let mut w = WorkerProc::join(&api, "w", &["gpu"], &["sh"]).await;
    w.start();
    connected(&api, 1).await;
    let mut spec = command(
        "on-gpu",
        every("1h"),
        "sh",
        &["-c", "echo scheduled on a worker"],
    );
    spec.target = Some(studio_api::schedule::Target {
        labels: vec!["gpu".into()],
    });
    let (_, run) = api.create_and_trigger(&spec).await;
    let done = until("the occurrence to end", WAIT, async || {
        let r: RunDetail = api.get(&format!("/api/runs/{run}")).await.expect(200);
        r.run.core.status.is_terminal().then_some(r)
    })
    .await;
    let core = &done.run.core;
    assert_eq!(
        (core.status, core.worker_id.as_deref()),
        (RunStatus::Completed, Some(w.id.as_str())),
        "{done:?}"
    );
    let log = studio.cli(&["run", "logs", &run]);
    assert!(
        text(&log).contains("scheduled on a worker"),
        "{}",
        text(&log)
    );

    // No worker has `arm`: the occurrence waits, queued, and can be cancelled.
    let mut spec = command("on-arm", every("1h"), "sh", &["-c", "true"]);
    spec.target = Some(studio_api::schedule::Target {
        labels: vec!["arm".into()],
    });
    let (_, waiting) = api.create_and_trigger(&spec).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r: RunDetail = api.get(&format!("/api/runs/{waiting}")).await.expect(200);
    assert_eq!(r.run.core.status, RunStatus::Queued, "{r:?}");
    let cancelled: Run = api
        .act(&format!("/api/runs/{waiting}/cancel"))
        .await
        .expect(200);
    assert_eq!(cancelled.core.status, RunStatus::Cancelled);
    // Cancelled, it holds nothing back: the next occurrence is not an overlap.
    let arm_id = r.run.core.schedule_id.clone().expect("its schedule");
    let next = api.trigger(&arm_id).await;
    assert_eq!(next.core.status, RunStatus::Queued, "{next:?}");

    // Gated by an approval bound to its labels, with a follow-up: the grant queues the
    // occurrence for a worker, and its follow-up runs on a worker too.
    let mut spec = approvals::gated(
        command(
            "chained",
            every("1h"),
            "sh",
            &["-c", "echo gated on a worker"],
        ),
        "10m",
        true,
    );
    spec.target = Some(studio_api::schedule::Target {
        labels: vec!["gpu".into()],
    });
    spec.on_success = Some(Box::new(studio_api::schedule::FollowUp {
        action: Action::Command {
            executable: "sh".into(),
            args: vec!["-c".into(), "echo follow-up on a worker".into()],
        },
        on_success: None,
        on_fail: None,
    }));
    let (schedule, gated) = api.create_and_trigger(&spec).await;
    let r: RunDetail = api.get(&format!("/api/runs/{gated}")).await.expect(200);
    assert_eq!(r.run.core.status, RunStatus::AwaitingApproval, "{r:?}");
    let approval = r.run.core.approval_id.clone().expect("a request");
    let detail: studio_api::ApprovalDetail = api
        .get(&format!("/api/approvals/{approval}"))
        .await
        .expect(200);
    assert_eq!(
        detail.approval.action["labels"],
        serde_json::json!(["gpu"]),
        "the person sees where it runs: {:?}",
        detail.approval.action
    );
    let approver = approvals::browser(&studio).await;
    let granted = approvals::decide(&studio, &approver, &approval, "grant").await;
    assert_eq!(granted.status, 200, "{granted}");
    let follow_up = until("the follow-up to end", WAIT, async || {
        let runs = api.runs(&schedule).await;
        runs.into_iter()
            .find(|r| r.core().chain_parent_id.as_deref() == Some(gated.as_str()))
            .filter(|r| r.core().status.is_terminal())
    })
    .await;
    for (run, says) in [
        (gated.as_str(), "gated on a worker"),
        (follow_up.core().id.as_str(), "follow-up on a worker"),
    ] {
        let r: RunDetail = api.get(&format!("/api/runs/{run}")).await.expect(200);
        assert_eq!(
            (r.run.core.status, r.run.core.worker_id.as_deref()),
            (RunStatus::Completed, Some(w.id.as_str())),
            "{r:?}"
        );
        let log = studio.cli(&["run", "logs", run]);
        assert!(text(&log).contains(says), "{}", text(&log));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_restarted_mid_job_adopts_it_and_reports_its_end_and_no_secret_reaches_it() {
    let (studio, api) = studio_with_workers("6");
    let mut w = WorkerProc::join(&api, "w", &["gpu"], &["sh"]).await;
    w.start();
    connected(&api, 1).await;
    let task = submit(
        &api,
        sh_task(&["gpu"], "echo begun; sleep 3; env; echo ended"),
    )
    .await;
    let first = running_attempt(&api, &task.id).await;
    let job = w.job_pid(&first.id).expect("job pid");
    // A stop leaves the job to its shim; the next worker on the home adopts it.
    signal(w.pid(), Signal::TERM);
    let stopped = studio_tests::wait_for(Duration::from_secs(10), || {
        w.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    });
    assert!(stopped.is_some_and(|s| s.success()), "{}", w.log());
    assert!(alive(job), "a worker's stop kills none of its jobs");
    w.child = None;
    w.start();
    let t = finished(&api, &task.id).await;
    assert_eq!(t.task.status, TaskStatus::Completed, "{t:?}: {}", w.log());
    assert_eq!(t.attempts.len(), 1, "{t:?}");
    let log = text(&studio.cli(&["task", "logs", &task.id]));
    assert!(log.contains("begun") && log.contains("ended"), "{log}");
    // The job's environment is the worker's inheritable variables and its own: nothing of
    // studiod's, least of all its token.
    assert!(
        !log.contains(&studio.token()),
        "the daemon token reached a worker's job"
    );
    assert!(
        !log.contains("STUDIO_TOKEN") && log.contains("STUDIO_RUN_ID="),
        "{log}"
    );
}
