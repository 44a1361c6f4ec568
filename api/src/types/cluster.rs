//! The cluster (`GET /api/admin/cluster`, docs/FLEETS.md): the studiod processes sharing
//! this state's database, which one leads, and in what term; and the end of an epoch on
//! purpose (`POST /api/admin/epoch/rotate`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Who shares the database and who schedules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ClusterState {
    /// `sqlite` (the home's one studiod) or `postgres` (any number of members).
    pub database: String,
    /// The current term: taken anew by each member that becomes leader. A fire carries
    /// the term it was decided under and is refused once the term has moved on.
    pub term: i64,
    /// The member that took the current term, unless it stopped since.
    pub leader: Option<String>,
    #[schema(format = DateTime)]
    pub leader_since: Option<String>,
    /// The member that answers this request.
    pub answered_by: String,
    /// How soon another member leads once the leader is gone or silent (seconds).
    pub failover_secs: u64,
    /// Every member that ever joined, most recently seen first.
    pub members: Vec<ClusterMember>,
}

/// One studiod of the cluster (one home).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ClusterMember {
    /// Its id, kept in its home (`run/member`).
    pub id: String,
    /// `leading`, `following`, `silent` (no heartbeat for longer than the failover
    /// budget: killed, frozen or cut off) or `stopped` (a clean stop).
    pub state: String,
    pub host: String,
    pub pid: i64,
    /// Its HTTP API's address.
    pub addr: String,
    #[schema(format = DateTime)]
    pub started_at: String,
    /// Its last heartbeat (each second on PostgreSQL; its start on SQLite).
    #[schema(format = DateTime)]
    pub seen_at: String,
    #[schema(format = DateTime)]
    pub stopped_at: Option<String>,
}

/// An epoch ended on purpose and the one that stands now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EpochRotated {
    /// The epoch that ended: its sessions and pairing codes are refused `epoch_ended`.
    pub previous: String,
    /// The epoch every member admits under now.
    pub epoch: String,
}
