//! `GET /api/admin/cluster`: the members sharing this state's database, the leader and
//! its term (docs/FLEETS.md, "Leadership and terms"); `POST /api/admin/epoch/rotate`:
//! the epoch ended on purpose ("Cluster-wide identity").

use axum::{Json, extract::State};
use studio_api::types::{ClusterMember, ClusterState, EpochRotated};
use studio_contract::{
    error::ApiError,
    time::{now_ms, rfc3339},
};

use super::{
    ApiState,
    front::{By, MachineOwner},
    schedules::store_error,
};
use crate::scheduling::store::MemberRow;

pub(crate) async fn get(State(state): State<ApiState>) -> Result<Json<ClusterState>, ApiError> {
    let s = &state.scheduler;
    let shared = s.reads().shared_url().is_some();
    let cluster = s.reads().cluster().await.map_err(store_error)?;
    let failover = s.failover();
    let silent_after = i64::try_from(failover.as_millis()).unwrap_or(i64::MAX);
    let now = now_ms();
    let state_of = |m: &MemberRow| {
        if m.stopped_at_ms.is_some() {
            "stopped"
        } else if shared && now - m.seen_at_ms > silent_after {
            // (On SQLite the one member beats no heartbeat: it answers, so it lives.)
            "silent"
        } else if cluster.leader.as_deref() == Some(m.id.as_str()) {
            "leading"
        } else {
            "following"
        }
    };
    let members = cluster
        .members
        .iter()
        .map(|m| ClusterMember {
            id: m.id.clone(),
            state: state_of(m).to_owned(),
            host: m.host.clone(),
            pid: m.pid,
            addr: m.addr.clone(),
            started_at: rfc3339(m.started_at_ms),
            seen_at: rfc3339(m.seen_at_ms),
            stopped_at: m.stopped_at_ms.map(rfc3339),
        })
        .collect();
    Ok(Json(ClusterState {
        database: if shared { "postgres" } else { "sqlite" }.to_owned(),
        term: cluster.term,
        leader: cluster.leader,
        leader_since: cluster.leader_since_ms.map(rfc3339),
        answered_by: s.reads().member().to_owned(),
        failover_secs: failover.as_secs(),
        members,
    }))
}

/// `POST /api/admin/epoch/rotate` (the daemon token): a new epoch for every member.
pub(crate) async fn rotate(
    State(state): State<ApiState>,
    _owner: MachineOwner,
    By(by): By,
) -> Result<Json<EpochRotated>, ApiError> {
    let rotated = state.authority.rotate(&by, now_ms()).await?;
    Ok(Json(EpochRotated {
        previous: rotated.previous,
        epoch: rotated.epoch,
    }))
}
