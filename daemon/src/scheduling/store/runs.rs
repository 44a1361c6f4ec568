//! The runs table and `run_transitions`: the fire transaction (claim), each status change
//! as a compare-and-set with its transition and event, the launch stamp, the tombstone
//! and replacement of a run never launched, the run reads and lists, and the hourly run
//! counts.

use sqlx::{Any, Row, Transaction, any::AnyRow};
use studio_runner::ProcessIdentity;

use super::{
    SchedStore,
    approvals::{self, Consumed},
    audit::{self, Note},
    events::{append_event, run_event},
    is_unique_violation, notify,
    statement::Statement,
    tasks,
};
use crate::{
    scheduling::{
        approval::NewApproval,
        model::{EventRow, RunKind, RunRow, RunStatus, TransitionRow},
    },
    store::StoreError,
};

pub(super) const RUN_COLUMNS: &str = "id, schedule_id, occurrence_key, kind, status, reason, action, \
    scheduled_at_ms, created_at_ms, dispatched_at_ms, finished_at_ms, pid, exit_code, signal, \
    stdout_tail, stderr_tail, stdout_bytes, stderr_bytes, cost_usd, tokens, counted, \
    chain_parent_id, chain_depth, replaces_run_id, follow_ups, program, attempt, \
    pid_start_ticks, boot_id, schedule_name, error_line, deadline_at_ms, approval_id, task_id, \
    worker_id, retry_at_ms, member_id";

/// A run as lists read it: its log tails (up to 64 KiB each) are left in the table.
const RUN_LIST_COLUMNS: &str = "id, schedule_id, occurrence_key, kind, status, reason, action, \
    scheduled_at_ms, created_at_ms, dispatched_at_ms, finished_at_ms, pid, exit_code, signal, \
    NULL AS stdout_tail, NULL AS stderr_tail, stdout_bytes, stderr_bytes, cost_usd, tokens, \
    counted, chain_parent_id, chain_depth, replaces_run_id, follow_ups, program, attempt, \
    pid_start_ticks, boot_id, schedule_name, error_line, deadline_at_ms, approval_id, task_id, \
    worker_id, retry_at_ms, member_id";

pub(super) fn run_from(r: &AnyRow) -> Result<RunRow, sqlx::Error> {
    Ok(RunRow {
        id: r.try_get("id")?,
        schedule_id: r.try_get("schedule_id")?,
        schedule_name: r.try_get("schedule_name")?,
        error_line: r.try_get("error_line")?,
        deadline_at_ms: r.try_get("deadline_at_ms")?,
        occurrence_key: r.try_get("occurrence_key")?,
        kind: r.try_get("kind")?,
        status: r.try_get("status")?,
        reason: r.try_get("reason")?,
        action: r.try_get("action")?,
        scheduled_at_ms: r.try_get("scheduled_at_ms")?,
        created_at_ms: r.try_get("created_at_ms")?,
        dispatched_at_ms: r.try_get("dispatched_at_ms")?,
        finished_at_ms: r.try_get("finished_at_ms")?,
        pid: r.try_get("pid")?,
        program: r.try_get("program")?,
        attempt: r.try_get("attempt")?,
        leader: match (
            r.try_get::<Option<i64>, _>("pid")?,
            r.try_get::<Option<i64>, _>("pid_start_ticks")?,
            r.try_get::<Option<String>, _>("boot_id")?,
        ) {
            (Some(pid), Some(ticks), Some(boot_id)) => {
                match (u32::try_from(pid), u64::try_from(ticks)) {
                    (Ok(pid), Ok(start_ticks)) => Some(ProcessIdentity {
                        pid,
                        start_ticks,
                        boot_id,
                    }),
                    _ => None,
                }
            }
            _ => None,
        },
        exit_code: r.try_get("exit_code")?,
        signal: r.try_get("signal")?,
        stdout_tail: r.try_get("stdout_tail")?,
        stderr_tail: r.try_get("stderr_tail")?,
        stdout_bytes: r.try_get("stdout_bytes")?,
        stderr_bytes: r.try_get("stderr_bytes")?,
        cost_usd: r.try_get("cost_usd")?,
        tokens: r.try_get("tokens")?,
        counted: r.try_get::<i64, _>("counted")? != 0,
        chain_parent_id: r.try_get("chain_parent_id")?,
        chain_depth: r.try_get("chain_depth")?,
        replaces_run_id: r.try_get("replaces_run_id")?,
        follow_ups: r.try_get("follow_ups")?,
        approval_id: r.try_get("approval_id")?,
        task_id: r.try_get("task_id")?,
        worker_id: r.try_get("worker_id")?,
        retry_at_ms: r.try_get("retry_at_ms")?,
        member_id: r.try_get("member_id")?,
    })
}

/// A run about to be written by a claim.
#[derive(Debug, Clone)]
pub(crate) struct NewRun {
    pub id: String,
    pub schedule_id: Option<String>,
    pub occurrence_key: Option<String>,
    pub kind: RunKind,
    pub status: RunStatus,
    pub reason: Option<String>,
    pub action: String,
    pub scheduled_at_ms: Option<i64>,
    pub counted: bool,
    pub chain_parent_id: Option<String>,
    pub chain_depth: i64,
    pub replaces_run_id: Option<String>,
    pub follow_ups: Option<String>,
    /// 1, or one more than the run this one replaces.
    pub attempt: i64,
    /// The request to raise with the claim (the run is then `awaiting_approval`).
    pub approval: Option<NewApproval>,
    /// The consumed request a replacement of a never-launched run keeps.
    pub approval_id: Option<String>,
    /// The task this run is an attempt of, and its lease.
    pub task: Option<Attempt>,
}

/// What makes a run an attempt of a task: the task, the worker that holds its lease, the
/// lease's fencing token and when the lease ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attempt {
    pub task_id: String,
    pub worker_id: String,
    pub fence: i64,
    pub lease_expires_at_ms: i64,
}

/// How the schedule's cursor moves with a claim.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cursor {
    /// A scheduled occurrence: compare-and-set `next_fire_at_ms` from `expected` to `next`,
    /// by the leader of `term` (written only while that is still the cluster's term).
    Advance {
        expected: i64,
        next: Option<i64>,
        term: i64,
    },
    /// A manual trigger or a chain step: the cursor is not touched.
    Keep,
    /// The next attempt of a failed occurrence (`replaces_run_id`), by the leader of
    /// `term`: the cursor is not touched.
    Retry { term: i64 },
}

/// What a claim did.
#[derive(Debug)]
pub(crate) enum Claim {
    /// The run, its events (its request's first), and the schedule's cursor after the
    /// claim (NULL once `max_runs` is reached: the claim that uses the last run disarms
    /// the schedule).
    Claimed(Box<RunRow>, Vec<EventRow>, Option<i64>),
    /// Someone else moved the cursor (or disabled the schedule) first: nothing written.
    Lost,
    /// `max_runs` is reached: nothing written (a scheduled claim also disarms).
    MaxRunsReached,
}

/// The outcome fields a finish writes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Finish {
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub stdout_tail: Option<String>,
    pub stderr_tail: Option<String>,
    pub stdout_bytes: Option<i64>,
    pub stderr_bytes: Option<i64>,
    pub cost_usd: Option<f64>,
    pub tokens: Option<i64>,
}

/// The error line a transition to `to` with `finish` stores (none keeps the one stored).
fn error_line(to: RunStatus, finish: &Finish) -> Option<String> {
    crate::scheduling::model::error_line(
        to,
        finish.stderr_tail.as_deref(),
        finish.stdout_tail.as_deref(),
    )
}

/// Filters of the runs list; the cursor is `(created_at_ms, id)` of the last row seen.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunFilter {
    pub schedule_id: Option<String>,
    /// Any of these (none: any status).
    pub statuses: Vec<RunStatus>,
    /// Text the schedule name contains, in any case.
    pub name_contains: Option<String>,
    /// The part of the schedule name before its first `/`.
    pub project: Option<String>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub before: Option<(i64, String)>,
    pub limit: i64,
}

/// The run list's statement. It names only the filters given (fixed fragments; values
/// are bound), so SQLite walks the index that matches them: written as
/// `(? IS NULL OR schedule_id = ?)` the plan could use no index for either filter.
fn runs_query(f: &RunFilter) -> Statement {
    let mut sql = Statement::new(format!("SELECT {RUN_LIST_COLUMNS} FROM runs WHERE TRUE"));
    if let Some(id) = &f.schedule_id {
        sql.push(" AND schedule_id = ?").bind(id.clone());
    }
    match f.statuses.as_slice() {
        [] => {}
        [one] => {
            sql.push(" AND status = ?").bind(one.as_str().to_owned());
        }
        many => {
            let words: Vec<&str> = many.iter().map(|s| s.as_str()).collect();
            sql.push(" AND status IN (SELECT value FROM json_each(?))")
                .bind(serde_json::to_string(&words).unwrap_or_else(|_| "[]".into()));
        }
    }
    if let Some(part) = &f.name_contains {
        sql.push(" AND instr(lower(schedule_name), lower(?)) > 0")
            .bind(part.clone());
    }
    if let Some(project) = &f.project {
        sql.push(" AND substr(schedule_name, 1, length(?) + 1) = ? || '/'")
            .bind(project.clone())
            .bind(project.clone());
    }
    if let Some(since) = f.since_ms {
        sql.push(" AND created_at_ms >= ?").bind(since);
    }
    if let Some(until) = f.until_ms {
        sql.push(" AND created_at_ms < ?").bind(until);
    }
    if let Some((at, id)) = &f.before {
        sql.push(" AND (created_at_ms < ? OR (created_at_ms = ? AND id < ?))")
            .bind(*at)
            .bind(*at)
            .bind(id.clone());
    }
    sql.push(" ORDER BY created_at_ms DESC, id DESC LIMIT ?")
        .bind(f.limit);
    sql
}

pub(super) async fn record_transition(
    tx: &mut Transaction<'_, Any>,
    run_id: &str,
    from: Option<RunStatus>,
    to: RunStatus,
    reason: Option<&str>,
    now_ms: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO run_transitions (run_id, from_status, to_status, reason, at_ms) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(run_id)
    .bind(from.map(RunStatus::as_str))
    .bind(to.as_str())
    .bind(reason)
    .bind(now_ms)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Inserts `run`, run (or to be run) by `member` when it runs on a studiod's own machine.
pub(super) async fn insert_run(
    tx: &mut Transaction<'_, Any>,
    run: &NewRun,
    member: &str,
    now_ms: i64,
) -> Result<RunRow, sqlx::Error> {
    let finished = run.status.is_terminal().then_some(now_ms);
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO runs (id, schedule_id, schedule_name, occurrence_key, kind, status, reason, \
         action, scheduled_at_ms, created_at_ms, finished_at_ms, counted, chain_parent_id, \
         chain_depth, replaces_run_id, follow_ups, attempt, approval_id, task_id, worker_id, \
         fence, lease_expires_at_ms, member_id) \
         VALUES ($1, $2, (SELECT name FROM schedules WHERE id = $2), $3, $4, $5, $6, $7, $8, $9, \
         $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22) RETURNING {RUN_COLUMNS}"
    )))
    .bind(&run.id)
    .bind(&run.schedule_id)
    .bind(&run.occurrence_key)
    .bind(run.kind.as_str())
    .bind(run.status.as_str())
    .bind(&run.reason)
    .bind(&run.action)
    .bind(run.scheduled_at_ms)
    .bind(now_ms)
    .bind(finished)
    .bind(i64::from(run.counted))
    .bind(&run.chain_parent_id)
    .bind(run.chain_depth)
    .bind(&run.replaces_run_id)
    .bind(&run.follow_ups)
    .bind(run.attempt)
    .bind(&run.approval_id)
    .bind(run.task.as_ref().map(|t| &t.task_id))
    .bind(run.task.as_ref().map(|t| &t.worker_id))
    .bind(run.task.as_ref().map(|t| t.fence))
    .bind(run.task.as_ref().map(|t| t.lease_expires_at_ms))
    .bind(member)
    .fetch_one(&mut **tx)
    .await?;
    let row = run_from(&row)?;
    record_transition(tx, &row.id, None, run.status, run.reason.as_deref(), now_ms).await?;
    Ok(row)
}

/// A run's status change: from what, to what, why, and how its process ended.
#[derive(Debug, Clone, Copy)]
pub(super) struct Step<'a> {
    pub from: RunStatus,
    pub to: RunStatus,
    pub reason: Option<&'a str>,
    pub finish: Option<&'a Finish>,
    /// The run now counts against its schedule's `max_runs` (a granted request's).
    pub count: bool,
}

impl<'a> Step<'a> {
    pub(super) fn to(from: RunStatus, to: RunStatus, reason: &'a str) -> Self {
        Self {
            from,
            to,
            reason: Some(reason),
            finish: None,
            count: false,
        }
    }
}

/// One run, read inside a write.
pub(super) async fn run_by_id(
    tx: &mut Transaction<'_, Any>,
    id: &str,
) -> Result<Option<RunRow>, sqlx::Error> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"
    )))
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?;
    row.as_ref().map(run_from).transpose()
}

/// The compare-and-set of `step` with its transition, in `tx`; `None` when the run was
/// not in `step.from`. A task's attempt moves its task too (its event into `events`).
pub(super) async fn step_in(
    tx: &mut Transaction<'_, Any>,
    id: &str,
    step: &Step<'_>,
    now_ms: i64,
    events: &mut Vec<EventRow>,
) -> Result<Option<RunRow>, sqlx::Error> {
    let Step {
        from,
        to,
        reason,
        finish,
        count,
    } = *step;
    let f = finish.cloned().unwrap_or_default();
    let error_line = error_line(to, &f);
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE runs SET status = $1, reason = COALESCE($2, reason), \
         finished_at_ms = CASE WHEN $3 THEN $4 ELSE finished_at_ms END, \
         exit_code = COALESCE($5, exit_code), signal = COALESCE($6, signal), \
         stdout_tail = COALESCE($7, stdout_tail), stderr_tail = COALESCE($8, stderr_tail), \
         stdout_bytes = COALESCE($9, stdout_bytes), stderr_bytes = COALESCE($10, stderr_bytes), \
         cost_usd = COALESCE(CAST($11 AS DOUBLE PRECISION), cost_usd), tokens = COALESCE($12, tokens), \
         error_line = COALESCE($13, error_line), counted = CASE WHEN $14 THEN 1 ELSE counted END \
         WHERE id = $15 AND status = $16 RETURNING {RUN_COLUMNS}"
    )))
    .bind(to.as_str())
    .bind(reason)
    .bind(to.is_terminal())
    .bind(now_ms)
    .bind(f.exit_code)
    .bind(f.signal)
    .bind(super::without_nul(f.stdout_tail))
    .bind(super::without_nul(f.stderr_tail))
    .bind(f.stdout_bytes)
    .bind(f.stderr_bytes)
    .bind(super::real(f.cost_usd))
    .bind(f.tokens)
    .bind(super::without_nul(error_line))
    .bind(count)
    .bind(id)
    .bind(from.as_str())
    .fetch_optional(&mut **tx)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let mut row = run_from(&row)?;
    record_transition(tx, id, Some(from), to, reason, now_ms).await?;
    tasks::follow(tx, &row, now_ms, events).await?;
    notify::enqueue_in(tx, &row, now_ms).await?;
    if to.is_terminal() {
        row.retry_at_ms = tasks::schedule_retry(tx, &row, now_ms).await?;
    }
    Ok(Some(row))
}

impl SchedStore {
    /// The fire transaction: the cursor advance (compare-and-set), the `max_runs` count
    /// and the run row with its transition and event commit together, or nothing does.
    #[tracing::instrument(skip_all, fields(schedule = ?run.schedule_id, kind = run.kind.as_str()))]
    pub(in crate::scheduling) async fn claim(
        &self,
        run: &NewRun,
        cursor: Cursor,
        now_ms: i64,
        note: Option<&Note<'_>>,
    ) -> Result<Claim, StoreError> {
        let _timed = self.timed();
        let mut tx = self.writer.begin().await?;
        let mut cursor_after = None;
        if let Some(schedule_id) = &run.schedule_id {
            let counted = i64::from(run.counted);
            // Column references in SET read the old row: `runs_counted + counted` is the
            // count after this claim.
            let moved: Option<Option<i64>> = match cursor {
                // The fence is in the statement: a leader whose term has passed moves no
                // cursor, however long it paused between deciding and writing.
                Cursor::Advance {
                    expected,
                    next,
                    term,
                } => sqlx::query_scalar(
                    "UPDATE schedules SET last_fired_at_ms = $1, runs_counted = runs_counted + $2, \
                     next_fire_at_ms = CASE WHEN max_runs IS NOT NULL AND runs_counted + $2 >= max_runs \
                     THEN NULL ELSE $3 END \
                     WHERE id = $4 AND enabled = 1 AND next_fire_at_ms = $1 \
                     AND ($2 = 0 OR max_runs IS NULL OR runs_counted < max_runs) \
                     AND (SELECT term FROM cluster WHERE id = 1) = $5 RETURNING next_fire_at_ms",
                )
                .bind(expected)
                .bind(counted)
                .bind(next)
                .bind(schedule_id)
                .bind(term),
                Cursor::Keep | Cursor::Retry { .. } => sqlx::query_scalar(
                    "UPDATE schedules SET runs_counted = runs_counted + $1, \
                     next_fire_at_ms = CASE WHEN max_runs IS NOT NULL AND runs_counted + $1 >= max_runs \
                     THEN NULL ELSE next_fire_at_ms END \
                     WHERE id = $2 AND ($1 = 0 OR max_runs IS NULL OR runs_counted < max_runs) \
                     RETURNING next_fire_at_ms",
                )
                .bind(counted)
                .bind(schedule_id),
            }
            .fetch_optional(&mut *tx)
            .await?;
            let Some(after) = moved else {
                let exhausted: Option<i64> = sqlx::query_scalar(
                    "SELECT 1 FROM schedules WHERE id = $1 AND max_runs IS NOT NULL AND runs_counted >= max_runs",
                )
                .bind(schedule_id)
                .fetch_optional(&mut *tx)
                .await?;
                if exhausted.is_none() || !run.counted {
                    return Ok(Claim::Lost);
                }
                if let Cursor::Advance { expected, term, .. } = cursor {
                    sqlx::query(
                        "UPDATE schedules SET next_fire_at_ms = NULL WHERE id = $1 AND next_fire_at_ms = $2 \
                         AND (SELECT term FROM cluster WHERE id = 1) = $3",
                    )
                        .bind(schedule_id)
                        .bind(expected)
                        .bind(term)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                }
                return Ok(Claim::MaxRunsReached);
            };
            cursor_after = after;
        }
        // A retry takes over its failed run's occurrence, once.
        if let Some(failed) = &run.replaces_run_id {
            // A retry is the leader's (`Cursor::Retry`): fenced by its term as a fire is.
            let term = match cursor {
                Cursor::Retry { term } | Cursor::Advance { term, .. } => Some(term),
                Cursor::Keep => None,
            };
            let taken = sqlx::query(
                "UPDATE runs SET retry_at_ms = NULL, occurrence_key = NULL \
                 WHERE id = $1 AND retry_at_ms IS NOT NULL \
                 AND ($2 IS NULL OR (SELECT term FROM cluster WHERE id = 1) = $2)",
            )
            .bind(failed)
            .bind(term)
            .execute(&mut *tx)
            .await?;
            if taken.rows_affected() == 0 {
                return Ok(Claim::Lost);
            }
        }
        let row = match insert_run(&mut tx, run, &self.member, now_ms).await {
            // The occurrence exists already: it cannot be written twice.
            Err(e) if is_unique_violation(&e) => return Ok(Claim::Lost),
            other => other?,
        };
        let mut row = row;
        if let Some(note) = note {
            audit::append(&mut tx, note, now_ms).await?;
        }
        let mut events = Vec::with_capacity(2);
        if let Some(request) = &run.approval {
            let (approval, event) =
                approvals::raise(&mut tx, &self.evidence_key, &row, request, now_ms).await?;
            row.approval_id = Some(approval.id);
            events.push(event);
            // Waiting for a person is news to whoever the rules name.
            notify::enqueue_in(&mut tx, &row, now_ms).await?;
        }
        events.push(append_event(&mut tx, "run", &run_event(&row), now_ms).await?);
        tx.commit().await?;
        Ok(Claim::Claimed(Box::new(row), events, cursor_after))
    }

    /// Compare-and-set of a run's status, with its transition and event.
    pub(in crate::scheduling) async fn transition(
        &self,
        id: &str,
        from: RunStatus,
        to: RunStatus,
        reason: Option<&str>,
        finish: Option<&Finish>,
        now_ms: i64,
    ) -> Result<Option<(RunRow, Vec<EventRow>)>, StoreError> {
        let _timed = self.timed();
        let step = Step {
            from,
            to,
            reason,
            finish,
            count: false,
        };
        self.write_step(id, step, now_ms, None).await
    }

    /// A queued run cancelled by a person: its end and the audit row of who asked, in one
    /// transaction.
    pub(in crate::scheduling) async fn cancel_queued(
        &self,
        id: &str,
        reason: &str,
        now_ms: i64,
        note: &Note<'_>,
    ) -> Result<Option<(RunRow, Vec<EventRow>)>, StoreError> {
        let step = Step::to(RunStatus::Queued, RunStatus::Cancelled, reason);
        self.write_step(id, step, now_ms, Some(note)).await
    }

    #[tracing::instrument(skip_all, fields(run = id, to = step.to.as_str()))]
    async fn write_step(
        &self,
        id: &str,
        step: Step<'_>,
        now_ms: i64,
        note: Option<&Note<'_>>,
    ) -> Result<Option<(RunRow, Vec<EventRow>)>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let mut events = Vec::new();
        let Some(row) = step_in(&mut tx, id, &step, now_ms, &mut events).await? else {
            return Ok(None);
        };
        if let Some(note) = note {
            audit::append(&mut tx, note, now_ms).await?;
        }
        events.push(append_event(&mut tx, "run", &run_event(&row), now_ms).await?);
        tx.commit().await?;
        Ok(Some((row, events)))
    }

    /// A queued run takes its slot: `queued → running`, consuming its granted request in
    /// the same transaction (a request is used once). A run whose request is not granted
    /// ends `cancelled` (`approval_not_granted`) instead. `None` when it is no longer
    /// queued (cancelled, or sent back to wait for a new request).
    pub(in crate::scheduling) async fn start_queued(
        &self,
        id: &str,
        now_ms: i64,
    ) -> Result<Option<(RunRow, Vec<EventRow>)>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let (consumed, mut events) =
            approvals::consume_in(&mut tx, &self.evidence_key, id, now_ms).await?;
        let step = match consumed {
            Consumed::Refused => Step::to(
                RunStatus::Queued,
                RunStatus::Cancelled,
                "approval_not_granted",
            ),
            Consumed::NotNeeded | Consumed::Now | Consumed::ByReplaced => Step {
                from: RunStatus::Queued,
                to: RunStatus::Running,
                reason: None,
                finish: None,
                count: false,
            },
        };
        let Some(row) = step_in(&mut tx, id, &step, now_ms, &mut events).await? else {
            return Ok(None);
        };
        events.push(append_event(&mut tx, "run", &run_event(&row), now_ms).await?);
        tx.commit().await?;
        Ok(Some((row, events)))
    }

    /// Stamps the confirmed launch; from here on the run is never fired again.
    pub(in crate::scheduling) async fn mark_dispatched(
        &self,
        id: &str,
        pid: u32,
        leader: Option<&ProcessIdentity>,
        program: Option<&str>,
        deadline_ms: Option<i64>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.writer.begin().await?;
        // `approval_id`: an approved run's launch is evidence too.
        let stamped: Option<Option<String>> = sqlx::query_scalar(
            "UPDATE runs SET dispatched_at_ms = $1, pid = $2, pid_start_ticks = $3, boot_id = $4, \
             program = COALESCE($5, program), deadline_at_ms = COALESCE($6, deadline_at_ms) \
             WHERE id = $7 AND dispatched_at_ms IS NULL RETURNING approval_id",
        )
        .bind(now_ms)
        .bind(i64::from(pid))
        .bind(leader.and_then(|l| i64::try_from(l.start_ticks).ok()))
        .bind(leader.map(|l| l.boot_id.as_str()))
        .bind(program)
        .bind(deadline_ms.map(|d| now_ms.saturating_add(d)))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(Some(approval_id)) = &stamped {
            let key = &self.evidence_key;
            approvals::launched_in(&mut tx, key, (approval_id, id), (pid, program), now_ms).await?;
        }
        tx.commit().await?;
        Ok(stamped.is_some())
    }

    /// A run that was never launched is tombstoned and replaced by a fresh one that takes
    /// over its occurrence key, in one transaction. The replacement is not counted again.
    #[tracing::instrument(skip_all, fields(run = old.id))]
    pub(in crate::scheduling) async fn tombstone_and_replace(
        &self,
        old: &RunRow,
        new_id: &str,
        now_ms: i64,
    ) -> Result<Option<(RunRow, Vec<EventRow>)>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let done = sqlx::query(
            "UPDATE runs SET status = 'failed', reason = 'never_dispatched', finished_at_ms = $1, \
             occurrence_key = NULL WHERE id = $2 AND status = 'running' AND dispatched_at_ms IS NULL",
        )
        .bind(now_ms)
        .bind(&old.id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        record_transition(
            &mut tx,
            &old.id,
            Some(RunStatus::Running),
            RunStatus::Failed,
            Some("never_dispatched"),
            now_ms,
        )
        .await?;
        let mut tomb = old.clone();
        tomb.status = RunStatus::Failed.as_str().into();
        tomb.reason = Some("never_dispatched".into());
        let tomb_event = append_event(&mut tx, "run", &run_event(&tomb), now_ms).await?;
        let replacement = NewRun {
            id: new_id.to_owned(),
            schedule_id: old.schedule_id.clone(),
            occurrence_key: old.occurrence_key.clone(),
            kind: RunKind::Recovery,
            status: RunStatus::Queued,
            reason: Some("replaces_never_dispatched".into()),
            action: old.action.clone(),
            scheduled_at_ms: old.scheduled_at_ms,
            counted: old.counted,
            chain_parent_id: old.chain_parent_id.clone(),
            chain_depth: old.chain_depth,
            replaces_run_id: Some(old.id.clone()),
            follow_ups: old.follow_ups.clone(),
            attempt: old.attempt + 1,
            approval: None,
            approval_id: old.approval_id.clone(),
            task: old.task_id.clone().map(|task_id| Attempt {
                task_id,
                worker_id: old.worker_id.clone().unwrap_or_default(),
                fence: 0,
                lease_expires_at_ms: 0,
            }),
        };
        let row = insert_run(&mut tx, &replacement, &self.member, now_ms).await?;
        if let Some(task_id) = &old.task_id {
            tasks::replace_attempt(&mut tx, task_id, &old.id, &row.id).await?;
        }
        let event = append_event(&mut tx, "run", &run_event(&row), now_ms).await?;
        tx.commit().await?;
        Ok(Some((row, vec![tomb_event, event])))
    }

    pub(crate) async fn run(&self, id: &str) -> Result<Option<RunRow>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(run_from).transpose()?)
    }

    /// Ended runs whose retry is due by `now_ms`, soonest first.
    pub(crate) async fn due_retries(&self, now_ms: i64) -> Result<Vec<RunRow>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE retry_at_ms <= $1 ORDER BY retry_at_ms LIMIT 100"
        )))
        .bind(now_ms)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(run_from).collect::<Result<_, _>>()?)
    }

    /// When the next retry of an occurrence is due.
    pub(crate) async fn next_run_retry(&self) -> Result<Option<i64>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT MIN(retry_at_ms) FROM runs WHERE retry_at_ms IS NOT NULL")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Gives up a pending retry (its schedule is gone or disabled).
    pub(in crate::scheduling) async fn drop_retry(&self, run_id: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE runs SET retry_at_ms = NULL WHERE id = $1")
            .bind(run_id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Runs not yet terminal, oldest first.
    /// The unfinished runs this member runs itself (or will), and those of the time
    /// before members were recorded: what its recovery and its stale-run reaper settle.
    /// On SQLite every run is this studiod's, whatever member id it was recorded under
    /// (a `state.db` restored into another home keeps the old home's id).
    pub(crate) async fn own_active_runs(&self) -> Result<Vec<RunRow>, StoreError> {
        if self.url.is_none() {
            return self.active_runs().await;
        }
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('queued', 'running') \
             AND (member_id = $1 OR member_id IS NULL) ORDER BY created_at_ms, id"
        )))
        .bind(&*self.member)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(run_from).collect::<Result<_, _>>()?)
    }

    /// The ids of `schedule`'s unfinished runs, wherever they run (the overlap policy on
    /// a shared database, where other members run some of them).
    pub(crate) async fn unfinished_runs_of(
        &self,
        schedule: &str,
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM runs WHERE schedule_id = $1 AND status IN ('queued', 'running') \
             ORDER BY created_at_ms, id",
        )
        .bind(schedule)
        .fetch_all(&self.pool)
        .await?)
    }

    pub(crate) async fn active_runs(&self) -> Result<Vec<RunRow>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('queued', 'running') ORDER BY created_at_ms, id"
        )))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(run_from).collect::<Result<_, _>>()?)
    }

    pub(crate) async fn transitions(&self, run_id: &str) -> Result<Vec<TransitionRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT from_status, to_status, reason, at_ms FROM run_transitions WHERE run_id = $1 ORDER BY id",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| {
                Ok(TransitionRow {
                    from_status: r.try_get("from_status")?,
                    to_status: r.try_get("to_status")?,
                    reason: r.try_get("reason")?,
                    at_ms: r.try_get("at_ms")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()?)
    }

    /// Runs newest first, filtered, after the cursor, without their log tails.
    pub(crate) async fn list_runs(&self, f: &RunFilter) -> Result<Vec<RunRow>, StoreError> {
        let rows = runs_query(f)
            .query(self.dialect)?
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(run_from).collect::<Result<_, _>>()?)
    }

    /// Deletes a run, as retention will.
    #[cfg(test)]
    pub(crate) async fn delete_run(&self, id: &str) {
        sqlx::query("DELETE FROM runs WHERE id = $1")
            .bind(id)
            .execute(&self.writer)
            .await
            .expect("delete a run");
    }

    /// Top-level fires (not skipped, not chain steps) since `since_ms`.
    pub(crate) async fn fires_since(
        &self,
        schedule_id: &str,
        since_ms: i64,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE schedule_id = $1 AND created_at_ms >= $2 \
             AND status <> 'skipped' AND kind <> 'chain' AND replaces_run_id IS NULL",
        )
        .bind(schedule_id)
        .bind(since_ms)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Queued and running runs.
    /// Queued runs created before the run made at `created_at_ms` with `id` (a range of
    /// `runs_by_status`).
    pub(crate) async fn queued_before(
        &self,
        created_at_ms: i64,
        id: &str,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE status = 'queued' AND (created_at_ms, id) < ($1, $2)",
        )
        .bind(created_at_ms)
        .bind(id)
        .fetch_one(&self.pool)
        .await?)
    }

    pub(crate) async fn active_count(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE status IN ('queued', 'running')")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Runs created per UTC hour from `since_ms`'s hour on, by current status (the
    /// rollup; hours and statuses with no runs are left out), oldest first.
    pub(crate) async fn run_counts_since(
        &self,
        since_ms: i64,
    ) -> Result<Vec<(i64, String, i64)>, StoreError> {
        let rows = sqlx::query_as(
            "SELECT hour_ms, status, runs FROM run_counts_hourly \
             WHERE hour_ms >= $1 - $1 % 3600000 AND runs > 0 ORDER BY hour_ms, status",
        )
        .bind(since_ms)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// Drops the hourly counts of hours that began before `before_ms`.
    pub(in crate::scheduling) async fn prune_run_counts(
        &self,
        before_ms: i64,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM run_counts_hourly WHERE hour_ms < $1")
            .bind(before_ms)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected())
    }
}
