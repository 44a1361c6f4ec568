//! The `approvals` and `evidence` tables: raising a request with its run's claim, a
//! person's grant or denial, expiry, voiding when the schedule's action changes, the
//! grant's consumption by the launch, and the reads. Every step seals its evidence row
//! (`studio_evidence`, under the home's key) and writes its event in the transaction of
//! the status change it records, so the log holds exactly what happened.

use serde_json::{Value, json};
use sqlx::{Any, Row, Transaction, any::AnyRow};
use studio_api::{ApprovalEvent, ApprovalStatus};
use studio_evidence::{Entry, GENESIS, Key, Sealed, digest_of, seal_after};
use studio_schedule::ScheduleSpec;

use super::{
    SchedStore,
    audit::{self, Note},
    events::{append_event, run_event},
    runs::{Step, run_by_id, step_in},
    statement::Statement,
};
use crate::{
    audit::{Actor, Kind},
    scheduling::{
        approval::{NewApproval, request_for},
        model::{EventRow, RunRow, RunStatus, follow_ups},
    },
    store::StoreError,
};

const APPROVAL_COLUMNS: &str = "id, run_id, schedule_id, schedule_name, action_json, \
    action_sha256, requested_by, requested_at_ms, expires_at_ms, distinct_from_requester, \
    status, decided_by, decided_role, decided_origin, decided_at_ms, reason";

/// One request as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalRow {
    pub id: String,
    pub run_id: String,
    pub schedule_id: Option<String>,
    pub schedule_name: Option<String>,
    pub action_json: String,
    pub action_sha256: String,
    pub requested_by: Option<String>,
    pub requested_at_ms: i64,
    pub expires_at_ms: i64,
    pub distinct_from_requester: bool,
    pub status: String,
    pub decided_by: Option<String>,
    pub decided_role: Option<String>,
    pub decided_origin: Option<String>,
    pub decided_at_ms: Option<i64>,
    pub reason: Option<String>,
}

impl ApprovalRow {
    pub(crate) fn status(&self) -> Option<ApprovalStatus> {
        ApprovalStatus::parse(&self.status)
    }

    /// What every evidence row of this request names.
    fn subject(&self) -> Value {
        json!({
            "approval": self.id,
            "run": self.run_id,
            "schedule": self.schedule_id,
            "action_sha256": self.action_sha256,
        })
    }
}

fn approval_from(r: &AnyRow) -> Result<ApprovalRow, sqlx::Error> {
    Ok(ApprovalRow {
        id: r.try_get("id")?,
        run_id: r.try_get("run_id")?,
        schedule_id: r.try_get("schedule_id")?,
        schedule_name: r.try_get("schedule_name")?,
        action_json: r.try_get("action_json")?,
        action_sha256: r.try_get("action_sha256")?,
        requested_by: r.try_get("requested_by")?,
        requested_at_ms: r.try_get("requested_at_ms")?,
        expires_at_ms: r.try_get("expires_at_ms")?,
        distinct_from_requester: r.try_get::<i64, _>("distinct_from_requester")? != 0,
        status: r.try_get("status")?,
        decided_by: r.try_get("decided_by")?,
        decided_role: r.try_get("decided_role")?,
        decided_origin: r.try_get("decided_origin")?,
        decided_at_ms: r.try_get("decided_at_ms")?,
        reason: r.try_get("reason")?,
    })
}

fn approval_event(a: &ApprovalRow) -> Value {
    serde_json::to_value(ApprovalEvent {
        id: a.id.clone(),
        run_id: a.run_id.clone(),
        schedule_id: a.schedule_id.clone(),
        schedule_name: a.schedule_name.clone(),
        status: a.status().unwrap_or(ApprovalStatus::Voided),
    })
    .unwrap_or(Value::Null)
}

/// `subject` with `more`'s fields added.
fn content(subject: Value, more: Value) -> Value {
    let (Value::Object(mut all), Value::Object(more)) = (subject, more) else {
        return Value::Null;
    };
    all.extend(more);
    Value::Object(all)
}

/// Seals one evidence row onto the last one, in `tx` (the one writer orders them).
pub(super) async fn seal(
    tx: &mut Transaction<'_, Any>,
    key: &Key,
    kind: &str,
    at_ms: i64,
    (approval_id, run_id): (&str, &str),
    content: Value,
) -> Result<(), sqlx::Error> {
    // The last row, or the checkpoint once retention has pruned every row.
    let last: Option<(i64, String)> = sqlx::query_as(
        "SELECT * FROM (SELECT seq, chain_sha256 FROM evidence ORDER BY seq DESC LIMIT 1) AS e \
         UNION ALL SELECT through_seq, chain_sha256 FROM evidence_checkpoint \
         ORDER BY 1 DESC LIMIT 1",
    )
    .fetch_optional(&mut **tx)
    .await?;
    let (seq, head) = match last {
        Some((seq, chain)) => (
            seq + 1,
            digest_of(&chain).ok_or_else(|| {
                sqlx::Error::Protocol(format!("evidence row {seq} has no chain hash"))
            })?,
        ),
        None => (1, GENESIS),
    };
    let entry = Entry {
        seq,
        at_ms,
        kind: kind.to_owned(),
        content,
    };
    let sealed = seal_after(head, key, entry).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    let text = studio_evidence::canonical(&sealed.entry.content)
        .map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    sqlx::query(
        "INSERT INTO evidence (seq, at_ms, kind, content, content_sha256, chain_sha256, mac, \
         approval_id, run_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(seq)
    .bind(at_ms)
    .bind(kind)
    .bind(String::from_utf8_lossy(&text).as_ref())
    .bind(&sealed.content_sha256)
    .bind(&sealed.chain_sha256)
    .bind(&sealed.mac)
    .bind(approval_id)
    .bind(run_id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

fn sealed_from(r: &AnyRow) -> Result<Sealed, sqlx::Error> {
    let text: String = r.try_get("content")?;
    Ok(Sealed {
        entry: Entry {
            seq: r.try_get("seq")?,
            at_ms: r.try_get("at_ms")?,
            kind: r.try_get("kind")?,
            content: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        },
        content_sha256: r.try_get("content_sha256")?,
        chain_sha256: r.try_get("chain_sha256")?,
        mac: r.try_get("mac")?,
    })
}

/// Raises `request` for `run` (just claimed, or re-raised after a void), in `tx`.
pub(super) async fn raise(
    tx: &mut Transaction<'_, Any>,
    key: &Key,
    run: &RunRow,
    request: &NewApproval,
    now_ms: i64,
) -> Result<(ApprovalRow, EventRow), sqlx::Error> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO approvals (id, run_id, schedule_id, schedule_name, action_json, \
         action_sha256, requested_by, requested_at_ms, expires_at_ms, \
         distinct_from_requester, status) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending') RETURNING {APPROVAL_COLUMNS}"
    )))
    .bind(&request.id)
    .bind(&run.id)
    .bind(&run.schedule_id)
    .bind(&run.schedule_name)
    .bind(&request.action_json)
    .bind(&request.action_sha256)
    .bind(&request.requested_by)
    .bind(now_ms)
    .bind(request.expires_at_ms)
    .bind(i64::from(request.distinct_from_requester))
    .fetch_one(&mut **tx)
    .await?;
    let approval = approval_from(&row)?;
    sqlx::query("UPDATE runs SET approval_id = $1 WHERE id = $2")
        .bind(&approval.id)
        .bind(&run.id)
        .execute(&mut **tx)
        .await?;
    let action: Value = serde_json::from_str(&approval.action_json).unwrap_or(Value::Null);
    let more = json!({
        "action": action,
        "requested_by": approval.requested_by,
        "expires_at_ms": approval.expires_at_ms,
        "distinct_from_requester": approval.distinct_from_requester,
    });
    seal(
        tx,
        key,
        "requested",
        now_ms,
        (&approval.id, &run.id),
        content(approval.subject(), more),
    )
    .await?;
    let event = append_event(tx, "approval", &approval_event(&approval), now_ms).await?;
    Ok((approval, event))
}

async fn approval_in(
    tx: &mut Transaction<'_, Any>,
    id: &str,
) -> Result<Option<ApprovalRow>, sqlx::Error> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1"
    )))
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?;
    row.as_ref().map(approval_from).transpose()
}

/// Moves a request from one of `from` to `to` (with who decided and why), seals `kind`
/// with `more`, and writes its event; `None` when it was in none of `from`.
async fn settle(
    tx: &mut Transaction<'_, Any>,
    key: &Key,
    id: &str,
    (from, to): (&[&str], ApprovalStatus),
    by: Option<&Actor>,
    reason: Option<&str>,
    now_ms: i64,
) -> Result<Option<(ApprovalRow, EventRow)>, sqlx::Error> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE approvals SET status = $1, decided_by = COALESCE($2, decided_by), \
         decided_role = COALESCE($3, decided_role), decided_origin = COALESCE($4, decided_origin), \
         decided_at_ms = CASE WHEN $1 = 'consumed' THEN decided_at_ms ELSE $5 END, \
         reason = COALESCE($6, reason) \
         WHERE id = $7 AND status IN (SELECT value FROM json_each($8)) RETURNING {APPROVAL_COLUMNS}"
    )))
    .bind(to.as_str())
    .bind(by.map(|b| b.principal.as_str()))
    .bind(by.map(|b| b.role.as_str()))
    .bind(by.and_then(|b| b.origin.as_deref()))
    .bind(now_ms)
    .bind(reason)
    .bind(id)
    .bind(serde_json::to_string(from).unwrap_or_default())
    .fetch_optional(&mut **tx)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let a = approval_from(&row)?;
    let more = json!({
        "by": by.map(|b| &b.principal),
        "role": by.map(|b| b.role.as_str()),
        "origin": by.and_then(|b| b.origin.as_deref()),
        "reason": reason,
    });
    let more = match more {
        Value::Object(m) => Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        other => other,
    };
    seal(
        tx,
        key,
        to.as_str(),
        now_ms,
        (&a.id, &a.run_id),
        content(a.subject(), more),
    )
    .await?;
    let event = append_event(tx, "approval", &approval_event(&a), now_ms).await?;
    Ok(Some((a, event)))
}

/// Moves `run_id` along `step` and writes its event.
async fn step_run(
    tx: &mut Transaction<'_, Any>,
    run_id: &str,
    step: &Step<'_>,
    now_ms: i64,
    events: &mut Vec<EventRow>,
) -> Result<Option<RunRow>, sqlx::Error> {
    let Some(run) = step_in(tx, run_id, step, now_ms, events).await? else {
        return Ok(None);
    };
    events.push(append_event(tx, "run", &run_event(&run), now_ms).await?);
    Ok(Some(run))
}

/// Ends a pending request and its run `expired`.
async fn expire_in(
    tx: &mut Transaction<'_, Any>,
    key: &Key,
    a: &ApprovalRow,
    now_ms: i64,
) -> Result<Vec<EventRow>, sqlx::Error> {
    let mut events = Vec::new();
    let pending = &["pending"][..];
    let Some((_, event)) = settle(
        tx,
        key,
        &a.id,
        (pending, ApprovalStatus::Expired),
        None,
        None,
        now_ms,
    )
    .await?
    else {
        return Ok(events);
    };
    events.push(event);
    let step = Step::to(
        RunStatus::AwaitingApproval,
        RunStatus::Expired,
        "approval_expired",
    );
    step_run(tx, &a.run_id, &step, now_ms, &mut events).await?;
    Ok(events)
}

/// A person's answer to a request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Verdict<'a> {
    /// Launch it, unless `hold` names the policy that holds it back now (overlap,
    /// budget): the run is then `skipped` for that reason.
    Grant {
        hold: Option<&'a str>,
    },
    Deny,
}

/// What a decision did.
#[derive(Debug)]
pub(crate) enum Decided {
    Done {
        approval: Box<ApprovalRow>,
        run: Box<RunRow>,
        events: Vec<EventRow>,
    },
    NotFound,
    /// It is not pending: its status.
    NotPending(String),
    /// Its time had passed: it (and its run) are now `expired`.
    Expired(Vec<EventRow>),
    /// `distinct_from_requester`, and the decider asked for the run.
    SameRequester,
}

/// How a claimed run's launch stands with its request.
pub(super) enum Consumed {
    /// The run needs no request.
    NotNeeded,
    /// The grant is used now (its evidence row is sealed).
    Now,
    /// Used already by the run this one replaces (launched never, so it runs once).
    ByReplaced,
    /// Not granted: the run must not launch.
    Refused,
}

/// Consumes the grant of `run_id`'s request as it launches.
pub(super) async fn consume_in(
    tx: &mut Transaction<'_, Any>,
    key: &Key,
    run_id: &str,
    now_ms: i64,
) -> Result<(Consumed, Vec<EventRow>), sqlx::Error> {
    let links: Option<(Option<String>, Option<String>)> =
        sqlx::query_as("SELECT approval_id, replaces_run_id FROM runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(&mut **tx)
            .await?;
    let Some((Some(approval_id), replaces)) = links else {
        return Ok((Consumed::NotNeeded, Vec::new()));
    };
    let granted = &["granted"][..];
    if let Some((_, event)) = settle(
        tx,
        key,
        &approval_id,
        (granted, ApprovalStatus::Consumed),
        None,
        None,
        now_ms,
    )
    .await?
    {
        return Ok((Consumed::Now, vec![event]));
    }
    let status: Option<String> = sqlx::query_scalar("SELECT status FROM approvals WHERE id = $1")
        .bind(&approval_id)
        .fetch_optional(&mut **tx)
        .await?;
    let by_replaced = status.as_deref() == Some("consumed") && replaces.is_some();
    Ok((
        if by_replaced {
            Consumed::ByReplaced
        } else {
            Consumed::Refused
        },
        Vec::new(),
    ))
}

/// Seals the launch of run `run_id` under request `approval_id` (its process is up).
pub(super) async fn launched_in(
    tx: &mut Transaction<'_, Any>,
    key: &Key,
    (approval_id, run_id): (&str, &str),
    (pid, program): (u32, Option<&str>),
    now_ms: i64,
) -> Result<(), sqlx::Error> {
    let Some(a) = approval_in(tx, approval_id).await? else {
        return Ok(());
    };
    let more = json!({ "pid": pid, "program": program });
    seal(
        tx,
        key,
        "launched",
        now_ms,
        (&a.id, run_id),
        content(a.subject(), more),
    )
    .await
}

/// Re-judges the open requests of a schedule whose spec changed to `spec` (`None`: it is
/// being deleted), in the change's transaction. A request whose binding is unchanged
/// stands; any other is voided (`approval_stale`), and its run waits for a new request
/// for the new action, or — when the schedule no longer requires one, or is gone — ends
/// `cancelled`.
pub(super) async fn restate(
    tx: &mut Transaction<'_, Any>,
    key: &Key,
    schedule_id: &str,
    spec: Option<&ScheduleSpec>,
    now_ms: i64,
) -> Result<Vec<EventRow>, sqlx::Error> {
    let open = sqlx::query(
        "SELECT a.id, a.run_id, a.action_sha256, a.requested_by, r.status AS run_status \
         FROM approvals a JOIN runs r ON r.id = a.run_id \
         WHERE a.schedule_id = $1 AND a.status IN ('pending', 'granted') \
         AND r.status IN ('awaiting_approval', 'queued')",
    )
    .bind(schedule_id)
    .fetch_all(&mut **tx)
    .await?;
    let mut events = Vec::new();
    for row in open {
        let id: String = row.try_get("id")?;
        let run_id: String = row.try_get("run_id")?;
        let sha: String = row.try_get("action_sha256")?;
        let requested_by: Option<String> = row.try_get("requested_by")?;
        let run_status = RunStatus::parse(row.try_get("run_status")?).unwrap_or(RunStatus::Queued);
        let next = spec.and_then(|s| request_for(s, requested_by.as_deref(), now_ms));
        if next.as_ref().is_some_and(|n| n.action_sha256 == sha) {
            continue;
        }
        let open = &["pending", "granted"][..];
        let voided = settle(
            tx,
            key,
            &id,
            (open, ApprovalStatus::Voided),
            None,
            Some("approval_stale"),
            now_ms,
        )
        .await?;
        if let Some((_, event)) = voided {
            events.push(event);
        }
        match (spec, next) {
            (Some(spec), Some(next)) => {
                if run_status == RunStatus::Queued {
                    let step = Step::to(
                        RunStatus::Queued,
                        RunStatus::AwaitingApproval,
                        "approval_stale",
                    );
                    step_in(tx, &run_id, &step, now_ms, &mut events).await?;
                }
                let action = serde_json::to_string(&spec.action).unwrap_or_default();
                sqlx::query("UPDATE runs SET action = $1, follow_ups = $2 WHERE id = $3")
                    .bind(&action)
                    .bind(follow_ups(spec))
                    .bind(&run_id)
                    .execute(&mut **tx)
                    .await?;
                let Some(run) = run_by_id(tx, &run_id).await? else {
                    continue;
                };
                let (_, event) = raise(tx, key, &run, &next, now_ms).await?;
                events.push(event);
                let run = run_by_id(tx, &run_id).await?.unwrap_or(run);
                events.push(append_event(tx, "run", &run_event(&run), now_ms).await?);
            }
            _ => {
                let why = if spec.is_some() {
                    "approval_stale"
                } else {
                    "schedule_deleted"
                };
                let step = Step::to(run_status, RunStatus::Cancelled, why);
                step_run(tx, &run_id, &step, now_ms, &mut events).await?;
            }
        }
    }
    Ok(events)
}

/// Filters of the requests list; newest first, before the cursor
/// `(requested_at_ms, id)`.
#[derive(Debug, Clone, Default)]
pub(crate) struct ApprovalFilter {
    pub statuses: Vec<ApprovalStatus>,
    pub schedule_id: Option<String>,
    pub run_id: Option<String>,
    pub before: Option<(i64, String)>,
    pub limit: i64,
}

impl SchedStore {
    /// A person grants or denies request `id` (compare-and-set from `pending`). A grant
    /// counts the run against `max_runs` and queues it to launch once; `hold` (from the
    /// scheduler's overlap and budget check) or `max_runs` skip it instead. With the
    /// decision: its evidence row, the audit row of who decided, and the events.
    pub(in crate::scheduling) async fn decide(
        &self,
        id: &str,
        verdict: Verdict<'_>,
        by: &Actor,
        reason: Option<&str>,
        now_ms: i64,
    ) -> Result<Decided, StoreError> {
        let key = &*self.evidence_key;
        let mut tx = self.writer.begin().await?;
        let Some(a) = approval_in(&mut tx, id).await? else {
            return Ok(Decided::NotFound);
        };
        if a.status() != Some(ApprovalStatus::Pending) {
            return Ok(Decided::NotPending(a.status));
        }
        if now_ms >= a.expires_at_ms {
            let events = expire_in(&mut tx, key, &a, now_ms).await?;
            tx.commit().await?;
            return Ok(Decided::Expired(events));
        }
        if a.distinct_from_requester && a.requested_by.as_deref() == Some(by.principal.as_str()) {
            return Ok(Decided::SameRequester);
        }
        let (to, kind) = match verdict {
            Verdict::Grant { .. } => (ApprovalStatus::Granted, Kind::ApprovalGranted),
            Verdict::Deny => (ApprovalStatus::Denied, Kind::ApprovalDenied),
        };
        let pending = &["pending"][..];
        let Some((approval, event)) =
            settle(&mut tx, key, id, (pending, to), Some(by), reason, now_ms).await?
        else {
            return Ok(Decided::NotPending(a.status));
        };
        let mut events = vec![event];
        let detail = json!({
            "approval": approval.id,
            "schedule": approval.schedule_name,
            "action_sha256": approval.action_sha256,
            "reason": reason,
        });
        let note = Note::run(
            by,
            kind,
            &approval.run_id,
            approval.schedule_id.as_deref(),
            detail,
        );
        audit::append(&mut tx, &note, now_ms).await?;
        let awaiting = RunStatus::AwaitingApproval;
        let step = match verdict {
            Verdict::Deny => Step::to(awaiting, RunStatus::Denied, "denied"),
            Verdict::Grant { hold: Some(why) } => Step::to(awaiting, RunStatus::Skipped, why),
            Verdict::Grant { hold: None } => {
                if self
                    .count_run(&mut tx, approval.schedule_id.as_deref())
                    .await?
                {
                    Step {
                        count: true,
                        ..Step::to(awaiting, RunStatus::Queued, "approved")
                    }
                } else {
                    Step::to(awaiting, RunStatus::Skipped, "max_runs")
                }
            }
        };
        let Some(run) = step_run(&mut tx, &approval.run_id, &step, now_ms, &mut events).await?
        else {
            // The run moved on (cancelled with its schedule): nothing is decided.
            return Ok(Decided::NotPending(a.status));
        };
        if run.status() == Some(RunStatus::Queued) && run.task_id.is_none() {
            // A granted occurrence runs on the member that granted it.
            sqlx::query("UPDATE runs SET member_id = $1 WHERE id = $2")
                .bind(&*self.member)
                .bind(&run.id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(Decided::Done {
            approval: Box::new(approval),
            run: Box::new(run),
            events,
        })
    }

    /// Counts one more run of the schedule against its `max_runs` (disarming it when this
    /// is the last); false when none is left.
    async fn count_run(
        &self,
        tx: &mut Transaction<'_, Any>,
        schedule_id: Option<&str>,
    ) -> Result<bool, sqlx::Error> {
        let Some(schedule_id) = schedule_id else {
            return Ok(true);
        };
        let counted: Option<Option<i64>> = sqlx::query_scalar(
            "UPDATE schedules SET runs_counted = runs_counted + 1, \
             next_fire_at_ms = CASE WHEN max_runs IS NOT NULL AND runs_counted + 1 >= max_runs \
             THEN NULL ELSE next_fire_at_ms END \
             WHERE id = $1 AND (max_runs IS NULL OR runs_counted < max_runs) \
             RETURNING next_fire_at_ms",
        )
        .bind(schedule_id)
        .fetch_optional(&mut **tx)
        .await?;
        Ok(counted.is_some())
    }

    /// Ends up to `limit` pending requests whose time has passed, and their runs,
    /// `expired`; the events.
    pub(in crate::scheduling) async fn expire_due(
        &self,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<EventRow>, StoreError> {
        let due: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM approvals WHERE status = 'pending' AND expires_at_ms <= $1 \
             ORDER BY expires_at_ms LIMIT $2",
        )
        .bind(now_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let mut events = Vec::new();
        for id in due {
            let mut tx = self.writer.begin().await?;
            if let Some(a) = approval_in(&mut tx, &id).await?
                && a.status() == Some(ApprovalStatus::Pending)
            {
                events.extend(expire_in(&mut tx, &self.evidence_key, &a, now_ms).await?);
            }
            tx.commit().await?;
        }
        Ok(events)
    }

    /// When the next pending request expires.
    pub(crate) async fn next_expiry(&self) -> Result<Option<i64>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT MIN(expires_at_ms) FROM approvals WHERE status = 'pending'")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    pub(crate) async fn approval(&self, id: &str) -> Result<Option<ApprovalRow>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(approval_from).transpose()?)
    }

    /// Requests newest first, filtered, after the cursor.
    pub(crate) async fn approvals(
        &self,
        f: &ApprovalFilter,
    ) -> Result<Vec<ApprovalRow>, StoreError> {
        let mut sql = Statement::new(format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE TRUE"
        ));
        if !f.statuses.is_empty() {
            let words: Vec<&str> = f.statuses.iter().map(|s| s.as_str()).collect();
            sql.push(" AND status IN (SELECT value FROM json_each(?))")
                .bind(serde_json::to_string(&words).unwrap_or_default());
        }
        if let Some(v) = &f.schedule_id {
            sql.push(" AND schedule_id = ?").bind(v.clone());
        }
        if let Some(v) = &f.run_id {
            sql.push(" AND run_id = ?").bind(v.clone());
        }
        if let Some((at, id)) = &f.before {
            sql.push(" AND (requested_at_ms < ? OR (requested_at_ms = ? AND id < ?))")
                .bind(*at)
                .bind(*at)
                .bind(id.clone());
        }
        sql.push(" ORDER BY requested_at_ms DESC, id DESC LIMIT ?")
            .bind(f.limit);
        let rows = sql.query(self.dialect)?.fetch_all(&self.pool).await?;
        Ok(rows.iter().map(approval_from).collect::<Result<_, _>>()?)
    }

    /// How many requests wait for a decision.
    pub(crate) async fn pending_approvals(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM approvals WHERE status = 'pending'")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// The evidence rows of one run, oldest first.
    pub(crate) async fn run_evidence(&self, run_id: &str) -> Result<Vec<Sealed>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, at_ms, kind, content, content_sha256, chain_sha256, mac FROM evidence \
             WHERE run_id = $1 ORDER BY seq",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(sealed_from).collect::<Result<_, _>>()?)
    }

    /// The evidence rows sealed at or after `since_ms` (all of them without it), oldest
    /// first, and the chain hash of the row before the first (genesis for the first row;
    /// the checkpoint's when retention pruned the rows before it into archives).
    pub(crate) async fn evidence_since(
        &self,
        since_ms: Option<i64>,
    ) -> Result<([u8; 32], Vec<Sealed>), StoreError> {
        // One read transaction: the rows and the hash before them agree.
        let mut tx = self.pool.begin().await?;
        let first: Option<i64> = match since_ms {
            Some(at) => {
                sqlx::query_scalar("SELECT MIN(seq) FROM evidence WHERE at_ms >= $1")
                    .bind(at)
                    .fetch_one(&mut *tx)
                    .await?
            }
            None => {
                sqlx::query_scalar("SELECT MIN(seq) FROM evidence")
                    .fetch_one(&mut *tx)
                    .await?
            }
        };
        let Some(first) = first else {
            let head: Option<String> = sqlx::query_scalar(
                "SELECT chain_sha256 FROM (SELECT * FROM (SELECT seq, chain_sha256 FROM \
                 evidence ORDER BY seq DESC LIMIT 1) AS e UNION ALL \
                 SELECT through_seq, chain_sha256 FROM evidence_checkpoint) AS h \
                 ORDER BY seq DESC LIMIT 1",
            )
            .fetch_optional(&mut *tx)
            .await?;
            return Ok((
                head.and_then(|h| digest_of(&h)).unwrap_or(GENESIS),
                Vec::new(),
            ));
        };
        let before: Option<String> = sqlx::query_scalar(
            "SELECT chain_sha256 FROM evidence WHERE seq = $1 UNION ALL \
             SELECT chain_sha256 FROM evidence_checkpoint WHERE through_seq = $1",
        )
        .bind(first - 1)
        .fetch_optional(&mut *tx)
        .await?;
        let rows = sqlx::query(
            "SELECT seq, at_ms, kind, content, content_sha256, chain_sha256, mac FROM evidence \
             WHERE seq >= $1 ORDER BY seq",
        )
        .bind(first)
        .fetch_all(&mut *tx)
        .await?;
        let previous = before.and_then(|h| digest_of(&h)).unwrap_or(GENESIS);
        let rows = rows.iter().map(sealed_from).collect::<Result<_, _>>()?;
        Ok((previous, rows))
    }

    /// Seals one evidence row about `run_id` at `at_ms`, in its own transaction.
    #[cfg(test)]
    pub(in crate::scheduling) async fn seal_test_evidence(
        &self,
        run_id: &str,
        at_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.writer.begin().await?;
        let content = json!({ "run": run_id, "approval": "a" });
        seal(
            &mut tx,
            &self.evidence_key,
            "granted",
            at_ms,
            ("a", run_id),
            content,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A status change with an evidence row sealed in its transaction, to measure what
    /// the row adds.
    #[cfg(test)]
    pub(in crate::scheduling) async fn transition_with_evidence(
        &self,
        id: &str,
        (from, to): (RunStatus, RunStatus),
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.writer.begin().await?;
        let step = Step::to(from, to, "measured");
        let mut events = Vec::new();
        step_run(&mut tx, id, &step, now_ms, &mut events).await?;
        let content = json!({ "run": id, "approval": "a", "action_sha256": "0".repeat(64) });
        seal(
            &mut tx,
            &self.evidence_key,
            "denied",
            now_ms,
            ("a", id),
            content,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The home's evidence key, to sign an exported bundle's header.
    pub(crate) fn evidence_key(&self) -> &Key {
        &self.evidence_key
    }
}
