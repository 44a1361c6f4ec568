//! The worker's run loop: connect (mutual TLS), register, take leases from the
//! assignment stream and run each through the launcher and a per-job shim, renew the
//! leases by heartbeat, stream the logs, report each start and end with the lease's
//! fencing token; reconnect when studiod is away, and kill the jobs that outlive a lost
//! studiod by more than one lease.
//!
//! One loop owns the connection; each job has a task that launches it, follows its shim
//! by pidfd and records its outcome in the job table, where the loop picks it up. A
//! report is retried until studiod acknowledges or refuses it; `runs/<id>/reported`
//! marks an attempt done with, so a restarted worker adopts or reports the rest.

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    io::{Read, Seek, SeekFrom},
    os::fd::AsRawFd,
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use studio_proto::{
    WORKER_PROTOCOL_VERSION,
    worker::v1::{
        self as wire, AssignmentsRequest, Finished, HeartbeatRequest, Held, LogChunk,
        RegisterRequest, ReportRequest, Started, assignment, report_request,
        worker_client::WorkerClient,
    },
};
use studio_runner::{
    Canceller, JobSpec, LaunchRequest, LaunchSpec, Outcome, ProcessIdentity,
    client::{Launcher, LauncherCommand, ShimWatch},
    evidence::{self, Evidence},
};
use tonic::{Code, Status, transport::Channel};

use crate::{
    LAUNCHER_LEADING, WorkerError, connect,
    home::{Identity, LeaseFile, WorkerHome},
};

/// How often the loop flushes logs and reports.
const TICK: Duration = Duration::from_millis(200);
/// The largest log chunk sent at once (one per stream a flush; five flushes a second).
const CHUNK: u64 = 1024 * 1024;
/// Reconnection waits, doubling from the first to the last (and to at most a quarter of
/// a lease, so a worker tries several times before its attempts' leases run out).
const BACKOFF: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(5));
/// Between TERM and KILL when a job is cancelled or reaches its deadline.
const GRACE: Duration = Duration::from_secs(5);
/// The marker of an attempt done with (its end acknowledged, refused, or lost).
const REPORTED: &str = "reported";
/// The marker of an attempt this worker killed after a whole lease without studiod: its
/// end is reported as lost, not cancelled (also by the next worker that adopts it).
const LOST: &str = "lost";
const LEASE_FILE: &str = "lease.json";

/// How to run the worker.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub home: PathBuf,
    /// How many jobs it runs at once.
    pub capacity: u32,
    /// The labels it offers (default: all its join granted).
    pub labels: Option<Vec<String>>,
}

/// One attempt this worker holds.
#[derive(Debug)]
struct Job {
    fence: i64,
    cancel: Canceller,
    /// The job's leader, once launched; `started_sent` once studiod has it.
    pid: Option<u32>,
    started_sent: bool,
    /// How it ended, once it has; what studiod is told.
    end: Option<End>,
    /// Superseded or lost: never reported again.
    dropped: bool,
    /// Log bytes studiod has of stdout and stderr.
    sent: [u64; 2],
}

#[derive(Debug, Clone)]
enum End {
    Outcome(Box<Outcome>),
    Refused {
        reason: &'static str,
        detail: String,
    },
}

/// What a job has to tell studiod, copied out of the table for one flush.
struct Pending {
    fence: i64,
    pid: Option<u32>,
    started_sent: bool,
    end: Option<End>,
    dropped: bool,
    sent: [u64; 2],
}

impl Pending {
    fn of(j: &Job) -> Self {
        Self {
            fence: j.fence,
            pid: j.pid,
            started_sent: j.started_sent,
            end: j.end.clone(),
            dropped: j.dropped,
            sent: j.sent,
        }
    }
}

impl Job {
    fn new(fence: i64) -> (Self, tokio::sync::watch::Receiver<bool>) {
        let (cancel, cancelled) = Canceller::pair();
        let job = Self {
            fence,
            cancel,
            pid: None,
            started_sent: false,
            end: None,
            dropped: false,
            sent: [0, 0],
        };
        (job, cancelled)
    }
}

struct Worker {
    home: WorkerHome,
    identity: Identity,
    opts: RunOptions,
    launcher: Launcher,
    lock_fd: i32,
    boot_id: String,
    env: crate::config::Env,
    jobs: Mutex<HashMap<String, Job>>,
    /// Wakes the loop when a job started or ended.
    changed: tokio::sync::Notify,
    /// The last answer from studiod, and how long a lease lasts.
    contact: Mutex<(Instant, Duration)>,
}

/// Runs the worker until `shutdown`; its jobs stay with their shims after.
pub async fn run(
    opts: RunOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), WorkerError> {
    let home = WorkerHome::new(&opts.home);
    let identity = home.identity()?;
    home.prepare()?;
    let lock = home.lock()?;
    let program = std::env::current_exe()
        .map_err(|e| WorkerError::io("cannot find its own executable", e))?;
    let command = LauncherCommand {
        program,
        leading: vec![LAUNCHER_LEADING.into()],
        open_files: None,
    };
    let launcher = Launcher::start(&command, Some(lock.as_raw_fd()))
        .map_err(|e| WorkerError::io("cannot start the job launcher", e))?;
    let boot_id = studio_runner::identity::boot_id()
        .map_err(|e| WorkerError::io("cannot read this boot's id", e))?;
    let worker = Arc::new(Worker {
        lock_fd: lock.as_raw_fd(),
        home,
        identity,
        opts,
        launcher,
        boot_id,
        env: crate::config::Env::read(),
        jobs: Mutex::default(),
        changed: tokio::sync::Notify::new(),
        contact: Mutex::new((Instant::now(), Duration::from_secs(30))),
    });
    worker.adopt();
    tracing::info!(worker = %worker.identity.worker_id, server = %worker.identity.server, "worker started");
    if let Some(socket) = &worker.env.notify_socket {
        // systemd's `Type=notify`: the unit is started once this arrives.
        if let Err(error) = studio_contract::service::notify(socket, "READY=1") {
            tracing::error!(%error, socket, "cannot tell the service manager");
        }
    }
    let served = worker.clone().serve();
    let watched = worker.clone().watch();
    tokio::select! {
        result = served => result,
        never = watched => match never {},
        () = shutdown => {
            tracing::info!("worker stopping; its jobs stay with their shims");
            drop(lock);
            Ok(())
        }
    }
}

impl Worker {
    fn jobs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Job>> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connects again and again; returns only when studiod revoked this worker.
    async fn serve(self: Arc<Self>) -> Result<(), WorkerError> {
        let mut wait = BACKOFF.0;
        loop {
            let began = Instant::now();
            match self.session().await {
                Err(e) if matches!(e.code(), Code::PermissionDenied | Code::Unauthenticated) => {
                    self.kill_all("this worker is not admitted any more", false);
                    self.wait_killed().await;
                    return Err(WorkerError::Remote(format!(
                        "studiod refused this worker: {}",
                        e.message()
                    )));
                }
                Err(e) => tracing::warn!(error = %e.message(), "studiod connection ended"),
                Ok(()) => {}
            }
            let most = BACKOFF.1.min(self.lease_ttl() / 4).max(BACKOFF.0);
            if began.elapsed() > most {
                wait = BACKOFF.0;
            }
            tokio::time::sleep(wait.min(most)).await;
            wait = (wait * 2).min(most);
        }
    }

    /// One connection: register, then assignments, heartbeats, logs and reports until
    /// it fails.
    async fn session(self: &Arc<Self>) -> Result<(), Status> {
        let tls = self.tls().map_err(|e| Status::unavailable(e.to_string()))?;
        // Connecting and registering take at most a lease: the watchdog may act after one.
        let within = self.lease_ttl().min(connect::CONNECT);
        let channel = connect::channel(&self.identity.server, tls, within)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let mut client = WorkerClient::new(channel);
        let labels = self
            .opts
            .labels
            .clone()
            .unwrap_or_else(|| self.identity.labels.clone());
        // A studiod that stops answering (suspended, cut off) ends the session within a
        // lease, so the watchdog can act.
        let bounded = |what: &'static str| {
            move |r: Result<Result<(), Status>, tokio::time::error::Elapsed>| {
                r.unwrap_or_else(|_| {
                    Err(Status::deadline_exceeded(format!(
                        "studiod did not answer a {what}"
                    )))
                })
            }
        };
        let register = client.register(RegisterRequest {
            labels,
            capacity: self.opts.capacity,
            version: studio_contract::VERSION.to_owned(),
            protocol: WORKER_PROTOCOL_VERSION,
        });
        let reg = tokio::time::timeout(within, register)
            .await
            .map_err(|_| Status::deadline_exceeded("studiod did not answer the registration"))??
            .into_inner();
        let ttl = Duration::from_millis(reg.lease_ttl_ms.max(1));
        self.touch(ttl);
        tracing::info!(labels = ?reg.labels, "registered with studiod");
        // What ended while away first, then new work.
        bounded("heartbeat")(tokio::time::timeout(ttl, self.heartbeat(&mut client)).await)?;
        bounded("report")(tokio::time::timeout(ttl, self.flush(&mut client)).await)?;
        let assignments = tokio::time::timeout(ttl, client.assignments(AssignmentsRequest {}))
            .await
            .map_err(|_| Status::deadline_exceeded("studiod did not open the assignments"))??;
        let mut assignments = assignments.into_inner();
        let beat_every = Duration::from_millis(reg.heartbeat_every_ms.max(100));
        let mut beat = tokio::time::interval(beat_every);
        let mut tick = tokio::time::interval(TICK);
        loop {
            tokio::select! {
                next = assignments.message() => match next? {
                    Some(a) => self.take(a),
                    None => return Err(Status::unavailable("studiod closed the assignment stream")),
                },
                _ = beat.tick() => {
                    let beat = tokio::time::timeout(ttl, self.heartbeat(&mut client)).await;
                    bounded("heartbeat")(beat)?;
                }
                _ = tick.tick() => {
                    let sent = tokio::time::timeout(ttl, self.flush(&mut client)).await;
                    bounded("report")(sent)?;
                }
                () = self.changed.notified() => {
                    let sent = tokio::time::timeout(ttl, self.flush(&mut client)).await;
                    bounded("report")(sent)?;
                }
            }
        }
    }

    fn tls(&self) -> Result<rustls::ClientConfig, WorkerError> {
        let ca = self.home.read(&self.home.ca_file())?;
        let cert = self.home.read(&self.home.cert_file())?;
        let key = self.home.read(&self.home.key_file())?;
        Ok(studio_pki::worker_client_config(&ca, &cert, &key)?)
    }

    /// A lease's length, as studiod last said it.
    fn lease_ttl(&self) -> Duration {
        self.contact
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
    }

    fn touch(&self, ttl: Duration) {
        *self.contact.lock().unwrap_or_else(PoisonError::into_inner) = (Instant::now(), ttl);
    }

    /// Runs [`Worker::watchdog`] every tick, whatever a session is waiting on (a
    /// connect, a handshake or a call to a studiod that does not answer).
    async fn watch(self: Arc<Self>) -> std::convert::Infallible {
        loop {
            tokio::time::sleep(TICK).await;
            self.watchdog();
        }
    }

    /// Kills the running jobs once studiod has been away for a whole lease: they are
    /// not this worker's to run any more (studiod has ended them `worker_lost`).
    fn watchdog(&self) {
        let (last, ttl) = *self.contact.lock().unwrap_or_else(PoisonError::into_inner);
        if last.elapsed() > ttl {
            self.kill_all("studiod has been unreachable for a whole lease", true);
        }
    }

    /// Cancels every job still running; `lost` marks each as lost first.
    fn kill_all(&self, why: &str, lost: bool) {
        for (run, job) in self.jobs().iter() {
            if job.end.is_none() && !job.dropped && !job.cancel.is_cancelled() {
                tracing::warn!(run = %run, why, "killing a job");
                if lost && let Err(e) = fs::write(self.home.run_dir(run).join(LOST), b"") {
                    tracing::warn!(run = %run, error = %e, "cannot mark a lost job");
                }
                job.cancel.cancel();
            }
        }
    }

    /// Waits (a bounded time) until every launched job's shim has ended after
    /// [`Worker::kill_all`].
    async fn wait_killed(&self) {
        let until = Instant::now() + GRACE + Duration::from_secs(2);
        while Instant::now() < until
            && self
                .jobs()
                .values()
                .any(|j| j.pid.is_some() && j.end.is_none())
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Acts on one message of the assignment stream.
    fn take(self: &Arc<Self>, a: wire::Assignment) {
        match a.kind {
            Some(assignment::Kind::Lease(lease)) => {
                let (job, cancelled) = Job::new(lease.fence);
                {
                    let mut jobs = self.jobs();
                    if jobs.contains_key(&lease.run_id) {
                        return;
                    }
                    jobs.insert(lease.run_id.clone(), job);
                }
                tracing::info!(run = %lease.run_id, task = %lease.task_id, fence = lease.fence, "leased");
                let this = self.clone();
                tokio::spawn(async move {
                    let run_id = lease.run_id.clone();
                    let end = this.drive(lease, cancelled).await;
                    this.ended(&run_id, end);
                });
            }
            Some(assignment::Kind::Cancel(cancel)) => {
                if let Some(job) = self.jobs().get(&cancel.run_id)
                    && job.fence == cancel.fence
                {
                    tracing::info!(run = %cancel.run_id, reason = %cancel.reason, "cancel asked");
                    job.cancel.cancel();
                }
            }
            None => {}
        }
    }

    /// Records how a job ended (`None`: lost, left to its lease) and wakes the loop.
    fn ended(&self, run_id: &str, end: Option<End>) {
        if let Some(job) = self.jobs().get_mut(run_id) {
            match end {
                Some(end) => job.end = Some(end),
                None => {
                    // Nothing of it runs any more, and its end is left to its lease.
                    job.dropped = true;
                    job.pid = None;
                }
            }
        }
        self.changed.notify_one();
    }

    /// Launches a leased job and follows it to its end.
    async fn drive(
        self: &Arc<Self>,
        lease: wire::Lease,
        cancelled: tokio::sync::watch::Receiver<bool>,
    ) -> Option<End> {
        let run_dir = self.home.run_dir(&lease.run_id);
        let file = LeaseFile {
            run_id: lease.run_id.clone(),
            task_id: lease.task_id.clone(),
            fence: lease.fence,
        };
        let recorded = fs::create_dir_all(&run_dir)
            .and_then(|()| evidence::record(&run_dir, LEASE_FILE, &file));
        if let Err(e) = recorded {
            return Some(End::Refused {
                reason: "spawn_failed",
                detail: format!("nothing was started: cannot record the lease: {e}"),
            });
        }
        let spec = match self.job_spec(&lease, &run_dir) {
            Ok(spec) => spec,
            Err((reason, detail)) => return Some(End::Refused { reason, detail }),
        };
        let req = LaunchRequest {
            run_id: lease.run_id.clone(),
            boot_id: self.boot_id.clone(),
            spec: LaunchSpec::from_job_spec(&spec),
            daemon_pid: None,
            inherited_lock_fd: Some(self.lock_fd),
        };
        let report = match self.launcher.launch(&req).await {
            Ok(report) => report,
            Err(e) => {
                tracing::warn!(run = %lease.run_id, error = %e, "launch not reported");
                return self.settle(&run_dir);
            }
        };
        let (shim, leader) = match (report.shim, report.result) {
            (Some(shim), Ok(leader)) => (shim, leader),
            (_, Err(why)) => {
                return Some(End::Refused {
                    reason: "spawn_failed",
                    detail: why,
                });
            }
            (None, Ok(_)) => return self.settle(&run_dir),
        };
        if let Some(job) = self.jobs().get_mut(&lease.run_id) {
            job.pid = Some(leader.pid);
        }
        self.changed.notify_one();
        follow(&shim, cancelled).await;
        self.settle(&run_dir)
    }

    /// How a job whose shim is gone ended, from its folder; `None` when the folder
    /// cannot tell (the attempt is left to its lease: `worker_lost`).
    fn settle(&self, run_dir: &std::path::Path) -> Option<End> {
        match evidence::classify(run_dir, &self.boot_id) {
            Ok(Evidence::Ended(outcome)) => Some(End::Outcome(outcome)),
            Ok(Evidence::NeverStarted) => Some(End::Refused {
                reason: "spawn_failed",
                detail: "nothing was started: the job launcher went away first".into(),
            }),
            Ok(Evidence::SupervisorLost { job }) => {
                job.kill_group(&self.boot_id);
                None
            }
            other => {
                tracing::warn!(dir = %run_dir.display(), found = ?other.map(|_| ()), "a job's end is unknown");
                None
            }
        }
    }

    /// The job of a lease on this machine: its program found on this worker's `PATH`
    /// after this worker's own allow-list admits it, its environment this worker's
    /// inheritable variables plus the job's own.
    fn job_spec(
        &self,
        lease: &wire::Lease,
        run_dir: &std::path::Path,
    ) -> Result<JobSpec, (&'static str, String)> {
        let job = lease
            .job
            .as_ref()
            .ok_or(("spawn_failed", "the lease carries no job".to_owned()))?;
        let (name, mut args) = match &job.action {
            Some(wire::job::Action::Command(c)) => (c.executable.clone(), c.args.clone()),
            Some(wire::job::Action::Agent(a)) => {
                let mut words = self.env.agent_command.iter().cloned();
                let program = words.next().unwrap_or_default();
                let mut args: Vec<String> = words.collect();
                for (flag, value) in [("--model", &a.model), ("--profile", &a.profile)] {
                    if !value.is_empty() {
                        args.extend([flag.to_owned(), value.clone()]);
                    }
                }
                args.extend(["--".to_owned(), a.prompt.clone()]);
                (program, args)
            }
            None => return Err(("spawn_failed", "the lease names no action".into())),
        };
        let allowed = self
            .home
            .allow_list()
            .map_err(|e| ("not_allowed", format!("nothing was started: {e}")))?;
        if !allowed.contains(&name) {
            return Err((
                "not_allowed",
                format!(
                    "nothing was started: {name:?} is not on this worker's allow-list \
                     (its owner adds it with `studio worker allow add {name}`)"
                ),
            ));
        }
        let program = studio_runner::resolve(&name, &self.env.search_path)
            .map_err(|e| ("spawn_failed", format!("{e}; nothing was started")))?;
        let mut env: BTreeMap<String, String> = job.env.clone().into_iter().collect();
        // Its secrets, for this job only: in its environment, and masked in its output.
        let mut redact: Vec<studio_runner::Redaction> = Vec::new();
        for secret in &job.secrets {
            env.insert(secret.variable.clone(), secret.value.clone());
            if !redact.iter().any(|r| r.name == secret.name) {
                redact.push(studio_runner::Redaction {
                    name: secret.name.clone(),
                    value: secret.value.clone(),
                });
            }
        }
        let mut studio = vec![
            ("STUDIO_RUN_ID", lease.run_id.clone()),
            ("STUDIO_ATTEMPT", lease.attempt.to_string()),
            (
                "STUDIO_RESULT_FILE",
                run_dir.join("result.json").display().to_string(),
            ),
        ];
        // A schedule's occurrence is no task's attempt.
        if !lease.task_id.is_empty() {
            studio.push(("STUDIO_TASK_ID", lease.task_id.clone()));
        }
        let cwd = (!job.cwd.is_empty()).then(|| PathBuf::from(&job.cwd));
        Ok(JobSpec {
            program: program.display().to_string(),
            args: std::mem::take(&mut args),
            cwd,
            env: studio_runner::env::job_env(self.env.host_env.iter().cloned(), &env, &studio),
            run_dir: run_dir.to_path_buf(),
            log_cap: job.log_cap,
            deadline: Some(Duration::from_millis(job.deadline_ms.max(1))),
            grace: GRACE,
            die_with_parent: true,
            redact,
        })
    }

    /// Takes over the attempts a previous worker on this home left: a job still under
    /// its shim is followed again, an ended one is reported, and one whose shim died
    /// without an outcome is left to its lease (`worker_lost`).
    fn adopt(self: &Arc<Self>) {
        let Ok(entries) = fs::read_dir(self.home.runs_dir()) else {
            return;
        };
        for dir in entries.flatten().map(|e| e.path()) {
            if dir.join(REPORTED).exists() {
                continue;
            }
            let Some(lease) = fs::read(dir.join(LEASE_FILE))
                .ok()
                .and_then(|b| serde_json::from_slice::<LeaseFile>(&b).ok())
            else {
                continue;
            };
            let (mut job, cancelled) = Job::new(lease.fence);
            job.pid = evidence::job(&dir).map(|leader| leader.pid);
            match evidence::classify(&dir, &self.boot_id) {
                Ok(Evidence::Ended(outcome)) => {
                    job.started_sent = true;
                    job.end = Some(End::Outcome(outcome));
                }
                Ok(Evidence::Supervised { shim }) => {
                    let this = self.clone();
                    let (run_id, dir) = (lease.run_id.clone(), dir.clone());
                    tokio::spawn(async move {
                        follow(&shim, cancelled).await;
                        let end = this.settle(&dir);
                        this.ended(&run_id, end);
                    });
                }
                found => {
                    if let Ok(Evidence::SupervisorLost { job }) = &found {
                        job.kill_group(&self.boot_id);
                    }
                    tracing::warn!(run = %lease.run_id, "a job left by an earlier worker has no known end");
                    mark_reported(&dir);
                    continue;
                }
            }
            tracing::info!(run = %lease.run_id, "adopted an attempt from an earlier worker");
            self.jobs().insert(lease.run_id, job);
        }
    }

    /// Renews the leases held; cancels and kills what studiod says.
    async fn heartbeat(&self, client: &mut WorkerClient<Channel>) -> Result<(), Status> {
        let held: Vec<Held> = self
            .jobs()
            .iter()
            .filter(|(_, j)| !j.dropped)
            .map(|(run, j)| Held {
                run_id: run.clone(),
                fence: j.fence,
            })
            .collect();
        let reply = client
            .heartbeat(HeartbeatRequest { held })
            .await?
            .into_inner();
        self.touch(Duration::from_millis(reply.lease_ttl_ms.max(1)));
        let mut jobs = self.jobs();
        for run in &reply.cancel {
            if let Some(job) = jobs.get(run) {
                job.cancel.cancel();
            }
        }
        for run in &reply.kill {
            if let Some(job) = jobs.get_mut(run) {
                tracing::warn!(run = %run, "studiod says this attempt is not ours any more; killing it");
                job.cancel.cancel();
                job.dropped = true;
            }
        }
        Ok(())
    }

    /// Sends what is pending: starts, log bytes, ends (each end after its last log
    /// bytes); forgets what is done with.
    async fn flush(&self, client: &mut WorkerClient<Channel>) -> Result<(), Status> {
        let pending: Vec<(String, Pending)> = self
            .jobs()
            .iter()
            .map(|(run, j)| (run.clone(), Pending::of(j)))
            .collect();
        for (run, p) in pending {
            let Pending {
                fence,
                pid,
                started_sent,
                end,
                dropped,
                sent,
            } = p;
            if dropped {
                if end.is_some() {
                    self.forget(&run);
                }
                continue;
            }
            if let (Some(pid), false) = (pid, started_sent) {
                let started = report_request::Kind::Started(Started { pid });
                match self.report(client, &run, fence, started).await? {
                    true => self.update(&run, |j| j.started_sent = true),
                    false => self.supersede(&run),
                }
            }
            if pid.is_some() || end.is_some() {
                let run_dir = self.home.run_dir(&run);
                let (chunks, now) = read_logs(&run_dir, &run, fence, sent);
                if !chunks.is_empty() {
                    match client.logs(tokio_stream::iter(chunks)).await {
                        Ok(_) => self.update(&run, |j| j.sent = now),
                        Err(s) if s.code() == Code::FailedPrecondition => {
                            self.supersede(&run);
                            continue;
                        }
                        Err(s) => return Err(s),
                    }
                    if now != read_logs_len(&run_dir) {
                        // More output than one round sends: the next tick goes on.
                        continue;
                    }
                }
            }
            if let Some(end) = end {
                let finished = match end {
                    End::Outcome(outcome) => Finished {
                        lost: outcome.ending == studio_runner::Ending::Cancelled
                            && self.home.run_dir(&run).join(LOST).exists(),
                        outcome_json: serde_json::to_string(&outcome).unwrap_or_default(),
                        refusal: None,
                    },
                    End::Refused { reason, detail } => Finished {
                        lost: false,
                        outcome_json: String::new(),
                        refusal: Some(wire::Refusal {
                            reason: reason.to_owned(),
                            detail,
                        }),
                    },
                };
                let kind = report_request::Kind::Finished(finished);
                if !self.report(client, &run, fence, kind).await? {
                    tracing::warn!(run = %run, "studiod refused the end of a superseded attempt");
                }
                self.forget(&run);
            }
        }
        Ok(())
    }

    /// One report; `false` when studiod refuses it as superseded.
    async fn report(
        &self,
        client: &mut WorkerClient<Channel>,
        run: &str,
        fence: i64,
        kind: report_request::Kind,
    ) -> Result<bool, Status> {
        let req = ReportRequest {
            run_id: run.to_owned(),
            fence,
            kind: Some(kind),
        };
        match client.report(req).await {
            Ok(_) => Ok(true),
            Err(s) if s.code() == Code::FailedPrecondition => Ok(false),
            Err(s) => Err(s),
        }
    }

    fn update(&self, run: &str, change: impl FnOnce(&mut Job)) {
        if let Some(job) = self.jobs().get_mut(run) {
            change(job);
        }
    }

    /// studiod refused a report: the attempt is another's now. Its job is killed.
    fn supersede(&self, run: &str) {
        tracing::warn!(run = %run, "the lease was superseded; killing the job");
        self.update(run, |j| {
            j.cancel.cancel();
            j.dropped = true;
        });
    }

    /// Done with an attempt: marked in its folder, out of the table.
    fn forget(&self, run: &str) {
        mark_reported(&self.home.run_dir(run));
        self.jobs().remove(run);
    }
}

/// Follows a shim until it exits, passing a cancel on as SIGTERM (its job's group then
/// gets TERM, a grace, and KILL).
async fn follow(shim: &ProcessIdentity, mut cancelled: tokio::sync::watch::Receiver<bool>) {
    let watch = match ShimWatch::open(shim) {
        Ok(Some(watch)) => watch,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch a shim by pidfd; polling it");
            while shim.is_running(&shim.boot_id) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            return;
        }
    };
    tokio::select! {
        () = watch.exited() => return,
        asked = cancelled.wait_for(|c| *c) => {
            if asked.is_ok() && let Err(e) = watch.terminate() {
                tracing::warn!(error = %e, "cannot signal a shim");
            }
        }
    }
    watch.exited().await;
}

fn mark_reported(dir: &std::path::Path) {
    if let Err(e) = fs::write(dir.join(REPORTED), b"") {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot mark an attempt reported");
    }
}

/// The lengths of a run folder's two logs.
fn read_logs_len(run_dir: &std::path::Path) -> [u64; 2] {
    ["stdout.log", "stderr.log"].map(|name| {
        fs::metadata(run_dir.join(name))
            .map(|m| m.len())
            .unwrap_or(0)
    })
}

/// The log bytes after `sent`, as chunks of at most [`CHUNK`] per stream, and the
/// offsets after them.
fn read_logs(
    run_dir: &std::path::Path,
    run: &str,
    fence: i64,
    sent: [u64; 2],
) -> (Vec<LogChunk>, [u64; 2]) {
    let mut chunks = Vec::new();
    let mut after = sent;
    for (i, (name, stream)) in [
        ("stdout.log", wire::Stream::Stdout),
        ("stderr.log", wire::Stream::Stderr),
    ]
    .into_iter()
    .enumerate()
    {
        let Ok(mut file) = fs::File::open(run_dir.join(name)) else {
            continue;
        };
        let mut data = Vec::new();
        let read = file
            .seek(SeekFrom::Start(sent[i]))
            .and_then(|_| (&mut file).take(CHUNK).read_to_end(&mut data));
        if read.is_err() || data.is_empty() {
            continue;
        }
        after[i] = sent[i] + data.len() as u64;
        chunks.push(LogChunk {
            run_id: run.to_owned(),
            fence,
            stream: stream as i32,
            offset: sent[i],
            data,
        });
    }
    (chunks, after)
}

/// Connects once with the worker's certificate and asks studiod whether it admits it (a
/// heartbeat holding nothing: it changes nothing but the worker's last-seen time). The
/// worker's id and server when admitted.
pub async fn check(home: &std::path::Path) -> Result<(String, String), WorkerError> {
    let home = WorkerHome::new(home);
    let identity = home.identity()?;
    let ca = home.read(&home.ca_file())?;
    let cert = home.read(&home.cert_file())?;
    let key = home.read(&home.key_file())?;
    let tls = studio_pki::worker_client_config(&ca, &cert, &key)?;
    let channel = connect::channel(&identity.server, tls, connect::CONNECT).await?;
    WorkerClient::new(channel)
        .heartbeat(HeartbeatRequest { held: Vec::new() })
        .await
        .map_err(|s| {
            WorkerError::Remote(format!("studiod refused this worker: {}", s.message()))
        })?;
    Ok((identity.worker_id, identity.server))
}
