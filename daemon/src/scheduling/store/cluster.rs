//! The cluster's rows and the leader's session (docs/FLEETS.md, "Leadership and terms").
//!
//! `cluster` holds the term and who took it; `members` a row per studiod home that
//! joined, with its heartbeat. On PostgreSQL the leader is whoever holds
//! [`LEADER_LOCK`], an advisory lock taken on a connection of its own
//! ([`LeaderSession`]): that session's end — a clean stop, a crash, or the server
//! closing it once it has been silent for longer than the failover budget allows — frees
//! the lock for another member. Taking the lock bumps the term in the same session; a
//! fire checks the term it was decided under in its own statement.

use std::time::Duration;

use sqlx::{Connection, Row, postgres::PgConnection};

use super::SchedStore;
use crate::store::StoreError;

/// The advisory lock whose holder leads ("STUDIO" and 1 as a 64-bit key). Advisory locks
/// belong to one database, so clusters on other databases of a server do not meet.
const LEADER_LOCK: i64 = 0x5354_5544_494f_0001;

/// The PostgreSQL channel on which a member announces a schedule it changed (payload:
/// `<member> <schedule id>`), so the leader re-arms it.
pub(crate) const SCHEDULE_CHANNEL: &str = "studio_schedules";

/// The PostgreSQL channel on which a member asks the member that runs a run to cancel
/// it (payload: JSON `{"member", "run", "reason"}`).
pub(crate) const CANCEL_CHANNEL: &str = "studio_cancels";

/// What a cancel announcement carries.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct CancelAsk {
    pub member: String,
    pub run: String,
    pub reason: String,
}

/// A member as it joins.
#[derive(Debug, Clone)]
pub(crate) struct NewMember {
    pub host: String,
    pub pid: u32,
    /// Its HTTP API's address.
    pub addr: String,
    pub started_at_ms: i64,
}

/// A member as stored.
#[derive(Debug, Clone)]
pub(crate) struct MemberRow {
    pub id: String,
    pub host: String,
    pub pid: i64,
    pub addr: String,
    pub started_at_ms: i64,
    pub seen_at_ms: i64,
    pub stopped_at_ms: Option<i64>,
}

/// The cluster as stored: its term, its leader and its members (most recently seen
/// first).
#[derive(Debug, Clone)]
pub(crate) struct ClusterRow {
    pub term: i64,
    pub leader: Option<String>,
    pub leader_since_ms: Option<i64>,
    pub members: Vec<MemberRow>,
}

/// The statement that takes the next term for `$1` at `$2` (ms).
const TAKE_TERM: &str = "UPDATE cluster SET term = term + 1, leader = $1, leader_since_ms = $2 \
                         WHERE id = 1 RETURNING term";

impl SchedStore {
    /// Records this member as running (again): its host, pid and address, seen now.
    pub(crate) async fn join(&self, m: &NewMember) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO members (id, host, pid, addr, started_at_ms, seen_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (id) DO UPDATE SET host = $2, pid = $3, \
             addr = $4, started_at_ms = $5, seen_at_ms = $5, stopped_at_ms = NULL",
        )
        .bind(&*self.member)
        .bind(&m.host)
        .bind(i64::from(m.pid))
        .bind(&m.addr)
        .bind(m.started_at_ms)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// This member is alive at `now_ms`.
    pub(crate) async fn heartbeat(&self, now_ms: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE members SET seen_at_ms = $1 WHERE id = $2")
            .bind(now_ms)
            .bind(&*self.member)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// This member stopped cleanly at `now_ms` (and leads no more, if it did).
    pub(crate) async fn leave(&self, now_ms: i64) -> Result<(), StoreError> {
        let mut tx = self.writer.begin().await?;
        sqlx::query("UPDATE members SET seen_at_ms = $1, stopped_at_ms = $1 WHERE id = $2")
            .bind(now_ms)
            .bind(&*self.member)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE cluster SET leader = NULL WHERE id = 1 AND leader = $1")
            .bind(&*self.member)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Takes the next term for this member through the writer: for SQLite, where the
    /// home's lock already makes this studiod the only one. (On PostgreSQL the term is
    /// taken in the lock's own session: [`LeaderSession::try_lead`].)
    pub(crate) async fn take_term(&self, now_ms: i64) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(TAKE_TERM)
            .bind(&*self.member)
            .bind(now_ms)
            .fetch_one(&self.writer)
            .await?)
    }

    /// The cluster's term, leader and members.
    pub(crate) async fn cluster(&self) -> Result<ClusterRow, StoreError> {
        let (term, leader, leader_since_ms): (i64, Option<String>, Option<i64>) =
            sqlx::query_as("SELECT term, leader, leader_since_ms FROM cluster WHERE id = 1")
                .fetch_one(&self.pool)
                .await?;
        let members = sqlx::query(
            "SELECT id, host, pid, addr, started_at_ms, seen_at_ms, stopped_at_ms FROM members \
             ORDER BY seen_at_ms DESC, id",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| {
            Ok(MemberRow {
                id: r.try_get("id")?,
                host: r.try_get("host")?,
                pid: r.try_get("pid")?,
                addr: r.try_get("addr")?,
                started_at_ms: r.try_get("started_at_ms")?,
                seen_at_ms: r.try_get("seen_at_ms")?,
                stopped_at_ms: r.try_get("stopped_at_ms")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?;
        Ok(ClusterRow {
            term,
            leader,
            leader_since_ms,
            members,
        })
    }

    /// Tells the other members that schedule `id` changed (nothing on SQLite).
    pub(crate) async fn announce_schedule(&self, id: &str) -> Result<(), StoreError> {
        if self.url.is_some() {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(SCHEDULE_CHANNEL)
                .bind(format!("{} {id}", self.member))
                .execute(&self.writer)
                .await?;
        }
        Ok(())
    }
}

impl SchedStore {
    /// Asks member `member` to cancel run `run` (nothing on SQLite, where every run is
    /// this studiod's).
    pub(crate) async fn announce_cancel(
        &self,
        member: &str,
        run: &str,
        reason: &str,
    ) -> Result<(), StoreError> {
        if self.url.is_some() {
            let ask = CancelAsk {
                member: member.to_owned(),
                run: run.to_owned(),
                reason: reason.to_owned(),
            };
            let payload = serde_json::to_string(&ask).unwrap_or_default();
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CANCEL_CHANNEL)
                .bind(payload)
                .execute(&self.writer)
                .await?;
        }
        Ok(())
    }
}

/// The leader's own connection to PostgreSQL, holding [`LEADER_LOCK`] while it lives.
pub(crate) struct LeaderSession {
    conn: PgConnection,
}

impl LeaderSession {
    /// A session of its own (never one of the pools': the lock lives as long as it).
    pub(crate) async fn connect(url: &studio_store::DatabaseUrl) -> Result<Self, sqlx::Error> {
        Ok(Self {
            conn: PgConnection::connect(url.expose()).await?,
        })
    }

    /// Tries the lock once; on success takes the next term for `member` in this session.
    /// Taking the lock and asking the server to end the session once it has been idle for
    /// `silence` (`idle_session_timeout`, PostgreSQL 14+) are one statement: a leader
    /// that stops pinging — stopped, frozen or cut off — loses the lock then, though its
    /// socket may never close.
    pub(crate) async fn try_lead(
        &mut self,
        silence: Duration,
        member: &str,
        now_ms: i64,
    ) -> Result<Option<i64>, sqlx::Error> {
        let held: Option<String> = sqlx::query_scalar(
            "SELECT CASE WHEN pg_try_advisory_lock($1) \
             THEN set_config('idle_session_timeout', $2, false) END",
        )
        .bind(LEADER_LOCK)
        .bind(format!("{}ms", silence.as_millis()))
        .fetch_one(&mut self.conn)
        .await?;
        if held.is_none() {
            return Ok(None);
        }
        let term = sqlx::query_scalar(TAKE_TERM)
            .bind(member)
            .bind(now_ms)
            .fetch_one(&mut self.conn)
            .await?;
        Ok(Some(term))
    }

    /// One round trip: the session (and so the lock) is still this process's. With
    /// `beat`, the round trip is member `beat.0`'s heartbeat at `beat.1` (ms), written
    /// through this session, so it never waits behind the writer's other work.
    pub(crate) async fn ping(&mut self, beat: Option<(&str, i64)>) -> Result<(), sqlx::Error> {
        match beat {
            Some((member, now_ms)) => {
                sqlx::query("UPDATE members SET seen_at_ms = $1 WHERE id = $2")
                    .bind(now_ms)
                    .bind(member)
                    .execute(&mut self.conn)
                    .await?
            }
            None => sqlx::query("SELECT 1").execute(&mut self.conn).await?,
        };
        Ok(())
    }

    /// Gives the lock up at once (a clean stop): another member leads at its next try.
    pub(crate) async fn resign(mut self) {
        let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(LEADER_LOCK)
            .execute(&mut self.conn)
            .await;
        let _ = self.conn.close().await;
    }
}
