//! The due-time queue and the decision to fire.
//!
//! One task sleeps until the earliest armed instant (re-reading the wall clock at least
//! once a minute, so a clock change is noticed); creating, editing, enabling or deleting
//! a schedule wakes it. A fire reached after its successor instant, or more than the grace
//! (`STUDIO_MISSED_FIRE_GRACE_SECS`) after its own, is late: all its missed instants fold
//! into one decision of the schedule's `missed_fire` policy.

use std::{
    collections::{BTreeSet, HashMap},
    path::PathBuf,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};
use studio_contract::lifecycle::Shutdown;

use studio_contract::time::now_ms;
use studio_runner::Canceller;
use studio_schedule::{Armed, MissedFire, Overlap, ScheduleSpec, Zone, ZoneSource};
use tokio::sync::{Notify, Semaphore, broadcast};

use super::{
    SchedulerConfig,
    allowlist::AllowList,
    approval::{self, NewApproval},
    model::{EventRow, RunKind, RunRow, RunStatus, ScheduleRow, follow_ups},
    store::{Claim, Cursor, NewRun, Note, SchedStore, WriteError},
};
use crate::{
    DaemonError,
    audit::{Actor, Kind},
    error::chain,
    store::StoreError,
};

/// How many due fires are decided concurrently.
const FIRING_AT_ONCE: usize = 32;
/// The longest sleep before the wall clock is read again.
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// How long a stop waits for cancelled jobs to end, then for killed ones to be recorded:
/// together inside studiod's own drain limit.
const DRAIN_CANCELLED: Duration = Duration::from_millis(2_500);
const DRAIN_KILLED: Duration = Duration::from_millis(1_000);
const _: () = assert!(
    DRAIN_CANCELLED.as_millis() + DRAIN_KILLED.as_millis()
        < studio_contract::lifecycle::DAEMON_DRAIN.as_millis(),
    "the jobs' drain must end inside studiod's drain limit"
);
/// How long a `detach` holds: the supervisor stops studiod right after asking, and a
/// stop long after it (no restart followed) cancels jobs as any stop does.
const DETACH_WINDOW_MS: i64 = 30_000;

/// Why a scheduler command (a schedule write, a manual trigger, a cancel) was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EngineError {
    #[error("no such schedule")]
    ScheduleNotFound,
    #[error("a schedule named {0:?} exists")]
    NameTaken(String),
    /// The row moved past the revision the write expected: nothing was written.
    #[error("the schedule changed meanwhile")]
    Moved,
    #[error("no such run")]
    RunNotFound,
    #[error("the run has already ended")]
    RunNotActive,
    /// It runs on another member (studiod) of the cluster, which has not been seen within
    /// the failover budget: nobody can end it now.
    #[error("the studiod that runs it (member {0}) does not answer")]
    MemberAway(String),
    #[error("max_runs is reached")]
    MaxRunsReached,
    #[error("the budget is exhausted")]
    BudgetExhausted,
    #[error("no such approval request")]
    ApprovalNotFound,
    /// Decided already, expired or consumed: its status.
    #[error("the request is {0}, not pending")]
    ApprovalNotPending(String),
    #[error("the request expired before the decision")]
    ApprovalExpired,
    #[error("the request was voided: what it would run changed")]
    ApprovalStale,
    #[error("the session that asked for the run cannot decide it")]
    RequesterCannotApprove,
    #[error("another task was submitted with this idempotency key: {0}")]
    IdempotencyConflict(String),
    #[error("the concurrency key's queue is full")]
    QueueFull,
    #[error("no such task")]
    TaskNotFound,
    #[error("the task has already ended")]
    TaskNotActive,
    #[error("the task has not ended")]
    TaskNotFinished,
    #[error("no such worker")]
    WorkerNotFound,
    #[error("no such secret")]
    SecretNotFound,
    #[error("no such endpoint")]
    EndpointNotFound,
    /// Rules of these schedules and unfinished tasks send to it.
    #[error("the endpoint is in use by {}", .0.join(", "))]
    EndpointInUse(Vec<String>),
    /// Named by these schedules and unfinished tasks.
    #[error("the secret is in use by {}", .0.join(", "))]
    SecretInUse(Vec<String>),
    #[error("the secret cannot be sealed: {0}")]
    Seal(#[from] crate::secrets::SealError),
    #[error("the stored spec cannot be read: {0}")]
    BadSpec(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<WriteError> for EngineError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::NameTaken(name) => Self::NameTaken(name),
            WriteError::Store(e) => Self::Store(e),
        }
    }
}

/// A run the daemon is responsible for right now.
#[derive(Debug, Default)]
pub(crate) struct Active {
    pub schedule_id: Option<String>,
    /// The remote worker running this attempt: studiod's stop leaves it to its worker.
    pub worker: Option<String>,
    /// A run of a schedule with a target, waiting for a worker or run by one: studiod's
    /// stop leaves it for the next studiod and the workers.
    pub targeted: bool,
    pub canceller: Option<Canceller>,
    pub cancel_reason: Option<String>,
    /// The job's process group, once launched.
    pub pgid: Option<u32>,
}

#[derive(Debug, Default)]
struct DueQueue {
    by_time: BTreeSet<(i64, String)>,
    by_id: HashMap<String, i64>,
}

impl DueQueue {
    fn set(&mut self, id: &str, at: Option<i64>) {
        if let Some(old) = self.by_id.remove(id) {
            self.by_time.remove(&(old, id.to_owned()));
        }
        if let Some(at) = at {
            self.by_id.insert(id.to_owned(), at);
            self.by_time.insert((at, id.to_owned()));
        }
    }

    fn pop_due(&mut self, now: i64) -> Vec<(i64, String)> {
        let mut due = Vec::new();
        while let Some(first) = self.by_time.first().filter(|(t, _)| *t <= now).cloned() {
            self.by_time.remove(&first);
            self.by_id.remove(&first.1);
            due.push(first);
        }
        due
    }

    fn earliest(&self) -> Option<i64> {
        self.by_time.first().map(|(t, _)| *t)
    }

    fn clear(&mut self) {
        self.by_time.clear();
        self.by_id.clear();
    }
}

pub(crate) struct Scheduler {
    pub(super) store: SchedStore,
    pub(super) config: SchedulerConfig,
    pub(super) default_zone: Zone,
    pub(super) runs_dir: PathBuf,
    pub(super) run_dir: PathBuf,
    queue: Mutex<DueQueue>,
    wake: Notify,
    pub(super) active: Mutex<HashMap<String, Active>>,
    pub(super) slots: Arc<Semaphore>,
    /// Fires being decided at once.
    firing: Arc<Semaphore>,
    /// Forks a shim per job (`docs/SHIMS.md`); `None` when none is configured.
    pub(super) launcher: Option<studio_runner::client::Launcher>,
    /// The home lock's descriptor as the launcher inherits it, for shims to close.
    pub(super) lock_fd: Option<std::os::fd::RawFd>,
    events: broadcast::Sender<EventRow>,
    pub(super) stop: Shutdown,
    /// What `command` actions may run (see `allowlist`).
    pub(super) allowlist: AllowList,
    /// studiod's metrics (`/metrics`).
    pub(super) metrics: Arc<crate::metrics::Metrics>,
    /// Wakes the notification sender (a run changed: it may have left deliveries).
    pub(super) notify_wake: Notify,
    pub(super) allowlist_writes: tokio::sync::Mutex<()>,
    /// This boot's id: recorded with every job leader, checked before signalling one.
    pub(super) boot_id: String,
    /// Until when (ms) a stop leaves running jobs to their shims for the next studiod to
    /// adopt instead of cancelling them: set by a `detach` request on the control socket
    /// for the stop that follows it (`studio restart daemon`), never for a later one.
    pub(super) detached_until_ms: AtomicI64,
    /// Wakes the expiry of approval requests when one is raised.
    pub(super) expiry_wake: Notify,
    /// Wakes the built-in worker when a task is submitted.
    pub(super) task_wake: Notify,
    /// Wakes the retries of occurrences when a run ends.
    pub(super) retry_wake: Notify,
    /// The built-in worker's fair order across priorities.
    pub(super) fairness: Mutex<super::tasks::Fairness>,
    /// Bumped when the queue may hold work for a remote worker (a submission, a freed
    /// slot, a released retry) or an attempt of one is asked to cancel: each worker's
    /// assignment stream looks again.
    pub(super) work_signal: tokio::sync::watch::Sender<u64>,
    /// Wakes the lease reaper when a remote attempt takes a lease.
    pub(super) lease_wake: Notify,
    /// The remote workers whose assignment stream is open now.
    pub(super) connected: Mutex<HashMap<String, usize>>,
    /// Held by the retention pass that runs (one at a time).
    pub(super) retention_lock: tokio::sync::Mutex<()>,
    /// Replans the next retention pass (its policy changed).
    pub(super) retention_wake: Notify,
    /// When the next retention pass runs on its own (ms; 0 until planned).
    pub(super) retention_next: AtomicI64,
    /// The schedules whose due fire is being decided now: a re-read of the armed
    /// schedules (`resync`, an announcement) leaves them to their fire, which arms them
    /// from its own claim, so no two fires of one schedule overlap.
    in_flight: Mutex<std::collections::HashSet<String>>,
    /// The other members' identity announcements (`studio_principals`), as heard by
    /// the listener, for the authority (`Authority::follow_cluster`).
    pub(super) identity_notes: broadcast::Sender<String>,
    /// The term whose lock this studiod holds, while it holds it (`leader`).
    pub(super) leader: tokio::sync::watch::Sender<Option<i64>>,
    /// The term this studiod leads in once it has taken office (armed the schedules,
    /// extended the leases): what the leader-only loops wait for.
    pub(super) office: tokio::sync::watch::Sender<Option<i64>>,
}

/// Whether a schedule's runs go to workers (its spec names a target).
pub(crate) fn targeted(row: &ScheduleRow) -> bool {
    serde_json::from_str::<ScheduleSpec>(&row.spec).is_ok_and(|spec| spec.target.is_some())
}

/// The spec of a stored row, armed in the zone recorded on the row.
pub(crate) fn arm(
    row: &ScheduleRow,
    default_zone: &Zone,
) -> Result<(ScheduleSpec, Armed), EngineError> {
    let spec: ScheduleSpec =
        serde_json::from_str(&row.spec).map_err(|e| EngineError::BadSpec(e.to_string()))?;
    let zone = match &row.timezone {
        Some(name) => Zone::named(name, ZoneSource::Schedule).map_err(EngineError::BadSpec)?,
        None => default_zone.clone(),
    };
    let armed = match &spec.trigger {
        studio_schedule::Trigger::Cron(c) => Armed::Cron {
            cron: Box::new(
                studio_schedule::trigger::parse_cron(&c.expression)
                    .map_err(EngineError::BadSpec)?,
            ),
            zone,
        },
        studio_schedule::Trigger::Every(text) => Armed::Every {
            period_ms: studio_schedule::duration::parse_interval(text)
                .map_err(EngineError::BadSpec)?,
        },
        studio_schedule::Trigger::At(text) => Armed::At {
            at_ms: text
                .parse::<jiff::Timestamp>()
                .map_err(|e| EngineError::BadSpec(e.to_string()))?
                .as_millisecond(),
        },
    };
    Ok((spec, armed))
}

impl Scheduler {
    /// The scheduler with its launcher started (inheriting `lock_fd`, the home lock) and its allow-list loaded (seeded at the
    /// first start of `state.db`); its loop is [`Scheduler::run`].
    pub(crate) async fn new(
        store: SchedStore,
        config: SchedulerConfig,
        default_zone: Zone,
        runs_dir: PathBuf,
        run_dir: PathBuf,
        stop: Shutdown,
        lock_fd: Option<std::os::fd::RawFd>,
    ) -> Result<Arc<Self>, DaemonError> {
        let (events, _) = broadcast::channel(4096);
        let metrics = Arc::new(crate::metrics::Metrics::new(store.write_time().clone()));
        let launcher = config
            .launcher
            .as_ref()
            .map(|command| studio_runner::client::Launcher::start(command, lock_fd))
            .transpose()
            .map_err(DaemonError::io("cannot start the job launcher"))?;
        let boot_id = studio_runner::identity::boot_id()
            .map_err(DaemonError::io("cannot read this boot's id"))?;
        let this = Arc::new(Self {
            launcher,
            lock_fd,
            slots: Arc::new(Semaphore::new(config.max_concurrent.max(1))),
            firing: Arc::new(Semaphore::new(FIRING_AT_ONCE)),
            store,
            config,
            default_zone,
            runs_dir,
            run_dir,
            queue: Mutex::default(),
            wake: Notify::new(),
            active: Mutex::default(),
            events,
            stop,
            allowlist: AllowList::default(),
            metrics,
            notify_wake: Notify::new(),
            allowlist_writes: tokio::sync::Mutex::default(),
            boot_id,
            detached_until_ms: AtomicI64::new(0),
            expiry_wake: Notify::new(),
            task_wake: Notify::new(),
            retry_wake: Notify::new(),
            fairness: Mutex::default(),
            work_signal: tokio::sync::watch::Sender::new(0),
            lease_wake: Notify::new(),
            connected: Mutex::default(),
            retention_lock: tokio::sync::Mutex::default(),
            retention_wake: Notify::new(),
            retention_next: AtomicI64::new(0),
            in_flight: Mutex::default(),
            identity_notes: broadcast::channel(64).0,
            leader: tokio::sync::watch::Sender::new(None),
            office: tokio::sync::watch::Sender::new(None),
        });
        this.load_allowlist().await?;
        this.load_retention_policy().await?;
        Ok(this)
    }

    /// The other members' identity announcements, from now on.
    pub(crate) fn identity_notes(&self) -> broadcast::Receiver<String> {
        self.identity_notes.subscribe()
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<EventRow> {
        self.events.subscribe()
    }

    /// Run slots taken now, and how many there are.
    pub(crate) fn slots_taken(&self) -> (usize, usize) {
        let slots = self.config.max_concurrent.max(1);
        (slots.saturating_sub(self.slots.available_permits()), slots)
    }

    /// The store, to read: its write methods are visible only inside `scheduling`.
    pub(crate) fn reads(&self) -> &SchedStore {
        &self.store
    }

    /// The zone of cron schedules that name none.
    pub(crate) fn default_zone(&self) -> &Zone {
        &self.default_zone
    }

    /// The command allow-list as it stands now.
    pub(crate) fn allowlist_snapshot(&self) -> Arc<[String]> {
        self.allowlist.snapshot()
    }

    /// The folder of the home the runs' folders are in (its filesystem is the home's).
    pub(crate) fn home_dir(&self) -> &std::path::Path {
        self.runs_dir.parent().unwrap_or(&self.runs_dir)
    }

    /// The log file of one stream of a run (`runs/<id>/<stream>.log`).
    pub(crate) fn run_log(&self, run_id: &str, stream: &str) -> PathBuf {
        self.runs_dir.join(run_id).join(format!("{stream}.log"))
    }

    /// Turns `true` when studiod stops.
    pub(crate) fn stopping(&self) -> Shutdown {
        self.stop.clone()
    }

    pub(super) fn publish(&self, event: EventRow) {
        if event.kind == "run" {
            self.count_end(&event.data);
            self.notify_wake.notify_one();
        }
        let _ = self.events.send(event);
    }

    /// Counts a run's end in the metrics when its event says it ended.
    fn count_end(&self, data: &str) {
        #[derive(serde::Deserialize)]
        struct Status {
            status: studio_api::RunStatus,
        }
        if let Ok(Status { status }) = serde_json::from_str(data)
            && status.is_terminal()
        {
            let ended = crate::metrics::Ended {
                status: status.as_str().to_owned(),
            };
            self.metrics.runs.get_or_create(&ended).inc();
        }
    }

    /// The ports of this machine's own Studio listeners.
    pub(crate) fn own_ports(&self) -> &[u16] {
        &self.config.own_ports
    }

    /// studiod's metrics.
    pub(crate) fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    /// Publishes `events` in their order.
    pub(super) fn publish_all(&self, events: Vec<EventRow>) {
        for event in events {
            self.publish(event);
        }
    }

    pub(super) fn active(&self) -> std::sync::MutexGuard<'_, HashMap<String, Active>> {
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, DueQueue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts a schedule's current cursor in the queue (or takes it out) and wakes the loop;
    /// a member that does not lead tells the leader instead.
    pub(super) fn rearm(&self, row: &ScheduleRow) {
        let at = row.enabled.then_some(row.next_fire_at_ms).flatten();
        self.queue().set(&row.id, at);
        self.wake.notify_one();
        self.tell_leader(&row.id);
    }

    /// Takes a schedule out of the queue and wakes the loop (and tells the leader).
    pub(super) fn forget(&self, id: &str) {
        self.queue().set(id, None);
        self.wake.notify_one();
        self.tell_leader(id);
    }

    /// On a shared database, a member that does not lead announces a schedule it changed,
    /// so the leader arms it as it now stands (`listen`). The write has committed: the
    /// leader reads it back.
    fn tell_leader(&self, id: &str) {
        if self.store.shared_url().is_none() || self.term().is_some() {
            return;
        }
        let (store, id) = (self.store.clone(), id.to_owned());
        tokio::spawn(async move {
            if let Err(error) = store.announce_schedule(&id).await {
                tracing::warn!(schedule = %id, error = %chain(&error), "cannot tell the leader");
            }
        });
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The leader arms schedule `id` as stored now (another member changed it), unless
    /// its fire is being decided (that fire arms it; a change it missed is caught by the
    /// next `resync`).
    pub(super) async fn rearm_from_store(&self, id: &str) -> Result<(), StoreError> {
        if self.in_flight().contains(id) {
            return Ok(());
        }
        let at = self
            .store
            .schedule(id)
            .await?
            .and_then(|row| row.enabled.then_some(row.next_fire_at_ms).flatten());
        self.queue().set(id, at);
        self.wake.notify_one();
        Ok(())
    }

    /// Arms the queue as the store has it (the leader's safety net under the
    /// announcements on a shared database).
    async fn resync(&self) -> Result<(), StoreError> {
        let armed = self.store.armed().await?;
        let in_flight = self.in_flight().clone();
        let mut q = self.queue();
        q.clear();
        for (id, at) in armed {
            if !in_flight.contains(&id) {
                q.set(&id, Some(at));
            }
        }
        Ok(())
    }

    /// Recovers this member's interrupted runs, then runs its own loops and, whenever it
    /// leads (`leader`), the scheduler's: fires until stopped.
    pub(crate) async fn run(self: Arc<Self>) {
        if let Err(error) = self.recover().await {
            tracing::error!(error = %chain(&error), "startup recovery failed");
        }
        tokio::spawn(self.clone().campaign_forever());
        tokio::spawn(self.clone().reap_forever());
        tokio::spawn(self.clone().work_forever());
        tokio::spawn(self.clone().listen_forever());
        let expiry = self
            .clone()
            .while_leading("approval expiry", Self::expire_forever);
        tokio::spawn(expiry);
        tokio::spawn(self.clone().while_leading("retries", Self::retry_forever));
        tokio::spawn(
            self.clone()
                .while_leading("lease reaper", Self::leases_forever),
        );
        tokio::spawn(
            self.clone()
                .while_leading("notifications", Self::notify_forever),
        );
        tokio::spawn(
            self.clone()
                .while_leading("retention", Self::retention_forever),
        );
        let mut holding = self.leader.subscribe();
        while let Some(term) = self.next_term(&mut holding).await {
            self.take_office(term).await;
            // Only now the leader-only loops start: the lease reaper, say, must not
            // run before the leases were extended.
            self.office.send_replace(Some(term));
            self.fire_while_leading(term, &mut holding).await;
            self.office.send_replace(None);
            self.queue().clear();
        }
        self.drain().await;
    }

    /// What a leader does as it starts its term: arms every schedule, gives remote
    /// workers one full lease to reconnect, and derives missing cadences.
    async fn take_office(self: &Arc<Self>, term: i64) {
        let loading = std::time::Instant::now();
        match self.store.armed().await {
            Ok(armed) => {
                let count = armed.len();
                {
                    let mut q = self.queue();
                    for (id, at) in armed {
                        q.set(&id, Some(at));
                    }
                }
                let elapsed_ms = loading.elapsed().as_millis();
                tracing::info!(term, schedules = count, elapsed_ms, "scheduler armed");
            }
            Err(error) => tracing::error!(error = %chain(&error), "cannot load schedules"),
        }
        let now = now_ms();
        let cluster_wide = async {
            self.store.extend_leases(now + self.lease_ttl_ms()).await?;
            self.fill_cadences(now).await
        };
        if let Err(error) = cluster_wide.await {
            tracing::error!(error = %chain(&error), "cannot extend leases or fill cadences");
        }
    }

    /// Fires due schedules while this studiod leads in `term`.
    async fn fire_while_leading(
        self: &Arc<Self>,
        term: i64,
        leading: &mut tokio::sync::watch::Receiver<Option<i64>>,
    ) {
        let stop = self.stop.clone();
        let shared = self.store.shared_url().is_some();
        let mut resynced = std::time::Instant::now();
        loop {
            let due = self.queue().pop_due(now_ms());
            for (at, id) in due {
                // Fires proceed concurrently (bounded), so their claims queue back to back
                // at the writer instead of each waiting for the one before. A schedule is
                // in the queue once, so no two fires of one schedule overlap here.
                let Ok(permit) = self.firing.clone().acquire_owned().await else {
                    return;
                };
                let this = self.clone();
                self.in_flight().insert(id.clone());
                tokio::spawn(async move {
                    if let Err(error) = this.fire_due(&id, at, term).await {
                        tracing::error!(schedule = %id, error = %chain(&error), "fire failed; retrying in 1 s");
                        this.queue().set(&id, Some(now_ms() + 1_000));
                        this.wake.notify_one();
                    }
                    this.in_flight().remove(&id);
                    drop(permit);
                });
            }
            let sleep = self
                .queue()
                .earliest()
                .map(|t| Duration::from_millis(u64::try_from(t - now_ms()).unwrap_or(0)))
                .unwrap_or(MAX_SLEEP)
                .min(MAX_SLEEP);
            tokio::select! {
                () = tokio::time::sleep(sleep) => {}
                () = self.wake.notified() => {}
                () = super::leader::until_not(leading, term) => return,
                () = stop.triggered() => return,
            }
            if shared && resynced.elapsed() >= super::listen::SHARED_IDLE {
                resynced = std::time::Instant::now();
                if let Err(error) = self.resync().await {
                    tracing::warn!(error = %chain(&error), "cannot re-read the armed schedules");
                }
            }
        }
    }

    /// One due instant of one schedule.
    #[tracing::instrument(skip_all, fields(schedule = id, at))]
    async fn fire_due(self: &Arc<Self>, id: &str, at: i64, term: i64) -> Result<(), EngineError> {
        let Some(row) = self.store.schedule(id).await? else {
            return Ok(());
        };
        if !row.enabled || row.next_fire_at_ms != Some(at) {
            self.rearm(&row);
            return Ok(());
        }
        let (spec, armed) = match arm(&row, &self.default_zone) {
            Ok(a) => a,
            Err(error) => {
                tracing::error!(error = %error, "unreadable schedule disarmed");
                self.store.move_cursor(id, at, None).await?;
                return Ok(());
            }
        };
        let now = now_ms();
        // Late: the next instant has passed too (more than one was missed), or this one is
        // beyond the grace. Either way one decision of the policy, never a burst.
        let successor_passed = armed
            .next_after(at, row.anchor_ms)
            .is_some_and(|n| n <= now);
        let late = successor_passed || now - at > self.config.missed_fire_grace_ms;
        let next = armed.next_after(if late { now } else { at }, row.anchor_ms);
        let policies = &spec.policies;
        let (kind, mut skip) = match (late, policies.missed_fire) {
            (true, MissedFire::Skip) => (RunKind::Scheduled, Some("missed")),
            (true, MissedFire::RunOnce) => (RunKind::Recovery, None),
            (false, _) => (RunKind::Scheduled, None),
        };
        // A gated occurrence waits for a person; its overlap and budget are decided when
        // it is granted, as it would launch.
        let approval = approval::request_for(&spec, None, now);
        if skip.is_none() {
            skip = match approval {
                Some(_) => self.rate_limited(&row, &spec, now).await?,
                None => self.gate(&row, &spec, now).await?,
            };
        }
        let run = self.new_run(&row, &spec, kind, Some(at), skip, approval);
        let cursor = Cursor::Advance {
            expected: at,
            next,
            term,
        };
        match self.claim_and_launch(run, &row, cursor, None).await? {
            Claim::MaxRunsReached => {
                tracing::info!("max_runs reached: schedule disarmed");
                self.forget(id);
            }
            // The claim returned the cursor it left: no need to read it back.
            Claim::Claimed(_, _, after) => {
                self.metrics.fires.inc();
                let late_ms = u32::try_from((now - at).max(0)).unwrap_or(u32::MAX);
                self.metrics
                    .fire_lateness
                    .observe(f64::from(late_ms) / 1000.0);
                self.queue().set(id, after);
                self.wake.notify_one();
            }
            Claim::Lost => {
                if let Some(fresh) = self.store.schedule(id).await? {
                    if fresh.enabled && fresh.next_fire_at_ms == Some(at) {
                        // Nothing moved the cursor: the term fenced this fire off (another
                        // member leads now). Look again in a second, not at once, until
                        // this loop learns it no longer leads.
                        self.queue().set(id, Some(now_ms() + 1_000));
                        self.wake.notify_one();
                    } else {
                        self.rearm(&fresh);
                    }
                }
            }
        }
        Ok(())
    }

    /// overlap → budget → rate limit (`max_runs` is counted in the claim itself).
    async fn gate(
        &self,
        row: &ScheduleRow,
        spec: &ScheduleSpec,
        now: i64,
    ) -> Result<Option<&'static str>, EngineError> {
        if let Some(why) = self.hold(row, spec).await? {
            return Ok(Some(why));
        }
        self.rate_limited(row, spec, now).await
    }

    /// What holds a run of `row` back as it would launch: its overlap policy (`replace`
    /// cancels the running ones instead) and its budget.
    pub(super) async fn hold(
        &self,
        row: &ScheduleRow,
        spec: &ScheduleSpec,
    ) -> Result<Option<&'static str>, EngineError> {
        let p = &spec.policies;
        // On a shared database other members run some of its runs (started by hand
        // there): the database knows them all. Alone, this studiod's own list does.
        let running: Vec<String> = if self.store.shared_url().is_some() {
            self.store.unfinished_runs_of(&row.id).await?
        } else {
            self.active()
                .iter()
                .filter(|(_, a)| a.schedule_id.as_deref() == Some(row.id.as_str()))
                .map(|(id, _)| id.clone())
                .collect()
        };
        if !running.is_empty() {
            match p.overlap {
                Overlap::Skip => return Ok(Some("overlap")),
                Overlap::Allow => {}
                Overlap::Replace => {
                    for run_id in running {
                        let _ = self.cancel(&run_id, "replaced", None).await;
                    }
                }
            }
        }
        if let Some(budget) = p.budget_usd
            && self.store.spend(&row.id).await? >= budget
        {
            return Ok(Some("budget_exhausted"));
        }
        Ok(None)
    }

    /// The rate limit: decided when an occurrence fires.
    async fn rate_limited(
        &self,
        row: &ScheduleRow,
        spec: &ScheduleSpec,
        now: i64,
    ) -> Result<Option<&'static str>, EngineError> {
        if let Some(limit) = spec.policies.rate_limit {
            let window = i64::try_from(limit.window_seconds).unwrap_or(i64::MAX / 2_000) * 1_000;
            if self.store.fires_since(&row.id, now - window).await? >= i64::from(limit.max_fires) {
                return Ok(Some("rate_limited"));
            }
        }
        Ok(None)
    }

    pub(super) fn new_run(
        &self,
        row: &ScheduleRow,
        spec: &ScheduleSpec,
        kind: RunKind,
        scheduled_at: Option<i64>,
        skip: Option<&str>,
        approval: Option<NewApproval>,
    ) -> NewRun {
        // A skipped occurrence asks nobody.
        let approval = approval.filter(|_| skip.is_none());
        let follow_ups = follow_ups(spec);
        NewRun {
            id: uuid::Uuid::now_v7().to_string(),
            schedule_id: Some(row.id.clone()),
            occurrence_key: scheduled_at.map(|t| format!("{}:{t}", row.id)),
            kind,
            status: if skip.is_some() {
                RunStatus::Skipped
            } else if approval.is_some() {
                RunStatus::AwaitingApproval
            } else {
                RunStatus::Queued
            },
            reason: skip.map(str::to_owned),
            action: serde_json::to_string(&spec.action).unwrap_or_default(),
            scheduled_at_ms: scheduled_at,
            // A gated run counts when it is granted.
            counted: skip.is_none() && approval.is_none(),
            chain_parent_id: None,
            chain_depth: 0,
            replaces_run_id: None,
            follow_ups,
            attempt: 1,
            approval,
            approval_id: None,
            task: None,
        }
    }

    /// Claims (one transaction, with `note`'s audit row when a person asked), publishes,
    /// and launches what was claimed to run.
    pub(super) async fn claim_and_launch(
        self: &Arc<Self>,
        mut run: NewRun,
        row: &ScheduleRow,
        cursor: Cursor,
        note: Option<&Note<'_>>,
    ) -> Result<Claim, EngineError> {
        // A run of a schedule with a target waits `queued` for a worker that has its
        // labels; any other takes a free slot here and starts as `running`, or waits.
        let targeted = targeted(row);
        let permit = (run.status == RunStatus::Queued && !targeted)
            .then(|| self.slots.clone().try_acquire_owned().ok())
            .flatten();
        if permit.is_some() {
            run.status = RunStatus::Running;
        }
        if run.status.is_active() {
            self.active().insert(
                run.id.clone(),
                Active {
                    schedule_id: run.schedule_id.clone(),
                    targeted,
                    ..Active::default()
                },
            );
        }
        let claim = self.store.claim(&run, cursor, now_ms(), note).await;
        let claim = match claim {
            Ok(claim) => claim,
            Err(error) => {
                self.active().remove(&run.id);
                return Err(error.into());
            }
        };
        match &claim {
            Claim::Claimed(claimed, events, _) => {
                for event in events {
                    self.publish(event.clone());
                }
                if claimed.approval_id.is_some() {
                    self.expiry_wake.notify_one();
                }
                if targeted && claimed.status() == Some(RunStatus::Queued) {
                    // A worker that serves its labels claims it.
                    self.tasks_changed();
                } else if claimed.status().is_some_and(RunStatus::is_active) {
                    super::CrashPoint::reached(
                        self.config.crash_at,
                        super::CrashPoint::AfterClaim,
                        &self.run_dir,
                    );
                    let owner = super::launch::Owner::Schedule(row.clone());
                    self.launch((**claimed).clone(), owner, permit);
                }
            }
            Claim::Lost | Claim::MaxRunsReached => {
                self.active().remove(&run.id);
            }
        }
        Ok(claim)
    }

    /// Cancels an active run: a queued one at once, a running one through its group. When
    /// a person asks (`by`), the audit row is written with the queued run's end, or,
    /// for a running one, before its group is signalled.
    pub(super) async fn cancel(
        &self,
        run_id: &str,
        reason: &str,
        by: Option<&Actor>,
    ) -> Result<RunRow, EngineError> {
        let row = self
            .store
            .run(run_id)
            .await?
            .ok_or(EngineError::RunNotFound)?;
        let note = |status: &str| {
            by.map(|by| {
                let detail = serde_json::json!({
                    "schedule": row.schedule_name,
                    "status": status,
                });
                Note::run(
                    by,
                    Kind::RunCancelled,
                    run_id,
                    row.schedule_id.as_deref(),
                    detail,
                )
            })
        };
        match row.status() {
            Some(RunStatus::Queued) => {
                let cancelled = match note("queued") {
                    Some(note) => {
                        self.store
                            .cancel_queued(run_id, reason, now_ms(), &note)
                            .await?
                    }
                    None => {
                        self.store
                            .transition(
                                run_id,
                                RunStatus::Queued,
                                RunStatus::Cancelled,
                                Some(reason),
                                None,
                                now_ms(),
                            )
                            .await?
                    }
                };
                if let Some((row, events)) = cancelled {
                    self.publish_all(events);
                    let mut active = self.active();
                    match active.get_mut(run_id) {
                        // Waiting for a worker, it has no launch of its own to end it.
                        Some(a) if a.targeted => {
                            active.remove(run_id);
                        }
                        Some(a) => a.cancel_reason = Some(reason.to_owned()),
                        None => {}
                    }
                    return Ok(row);
                }
            }
            Some(RunStatus::Running) => {
                let asked = self.active().contains_key(run_id);
                if let (true, Some(note)) = (asked, note("running")) {
                    self.store.append_audit(&note, now_ms()).await?;
                }
                {
                    let mut active = self.active();
                    if let Some(a) = active.get_mut(run_id) {
                        a.cancel_reason = Some(reason.to_owned());
                        if let Some(c) = &a.canceller {
                            c.cancel();
                        }
                        if a.worker.is_some() {
                            // Its worker's assignment stream passes the cancel on.
                            self.work_signal.send_modify(|n| *n += 1);
                        }
                        return Ok(row);
                    }
                }
                if let Some(owner) = self.run_elsewhere(&row) {
                    let note = if asked { None } else { note("running") };
                    return self.cancel_elsewhere(&row, &owner, reason, note).await;
                }
            }
            _ => {}
        }
        Err(EngineError::RunNotActive)
    }

    /// The other member that runs `row` on its own machine, on a shared database.
    fn run_elsewhere(&self, row: &RunRow) -> Option<String> {
        let on_a_worker = row
            .worker_id
            .as_deref()
            .is_some_and(|w| w != super::store::BUILTIN);
        let owner = row.member_id.as_deref()?;
        (self.store.shared_url().is_some() && !on_a_worker && owner != self.store.member())
            .then(|| owner.to_owned())
    }

    /// Asks member `owner`, which runs `row`, to cancel it (`listen`), once the audit row
    /// of who asked is written; refused while that member is not seen alive.
    async fn cancel_elsewhere(
        &self,
        row: &RunRow,
        owner: &str,
        reason: &str,
        note: Option<Note<'_>>,
    ) -> Result<RunRow, EngineError> {
        let cluster = self.store.cluster().await?;
        let silent_after = i64::try_from(self.config.failover.as_millis()).unwrap_or(i64::MAX);
        let alive = cluster.members.iter().any(|m| {
            m.id == owner && m.stopped_at_ms.is_none() && now_ms() - m.seen_at_ms <= silent_after
        });
        if !alive {
            return Err(EngineError::MemberAway(owner.to_owned()));
        }
        if let Some(note) = note {
            self.store.append_audit(&note, now_ms()).await?;
        }
        self.store.announce_cancel(owner, &row.id, reason).await?;
        Ok(row.clone())
    }

    /// Asks that a stop within [`DETACH_WINDOW_MS`] leave running jobs to their shims;
    /// how many run now.
    pub(crate) fn detach(&self) -> usize {
        self.detached_until_ms
            .store(now_ms() + DETACH_WINDOW_MS, Ordering::SeqCst);
        self.active().len()
    }

    /// Stops firing: cancels every running job (reason `daemon_shutdown`), KILLs the groups
    /// of any that ignore TERM, and waits a bounded time for their terminal writes — all
    /// within the daemon's own stop grace. After a `detach` request it cancels nothing: the
    /// jobs run on under their shims, and the next studiod adopts them.
    pub(super) async fn drain(&self) {
        if now_ms() <= self.detached_until_ms.load(Ordering::SeqCst) {
            let running = self.active().len();
            tracing::info!(
                running,
                "stopping without cancelling: running jobs stay with their shims for the next studiod"
            );
            return;
        }
        // A remote worker's attempts are its own: they run on while studiod is away.
        let running: Vec<String> = self
            .active()
            .iter()
            .filter(|(_, a)| a.worker.is_none() && !a.targeted)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &running {
            let _ = self.cancel(id, "daemon_shutdown", None).await;
        }
        let local_left = || {
            self.active()
                .values()
                .any(|a| a.worker.is_none() && !a.targeted)
        };
        let settled = |limit: Duration| async move {
            let deadline = tokio::time::Instant::now() + limit;
            while local_left() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        settled(DRAIN_CANCELLED).await;
        let stubborn: Vec<u32> = self.active().values().filter_map(|a| a.pgid).collect();
        for pgid in stubborn {
            if let Some(p) = i32::try_from(pgid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
            }
        }
        settled(DRAIN_KILLED).await;
    }
}
