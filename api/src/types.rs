//! Every request and answer body of studiod's API, by the routes that use them.

mod allowlist;
mod approvals;
mod apps;
mod audit;
mod backup;
mod cluster;
mod declarations;
mod events;
mod health;
mod identity;
mod notify;
mod retention;
mod runs;
mod schedules;
mod secrets;
mod summary;
mod tasks;
mod workers;

pub use allowlist::*;
pub use approvals::*;
pub use apps::*;
pub use audit::*;
pub use backup::*;
pub use cluster::*;
pub use declarations::*;
pub use events::*;
pub use health::*;
pub use identity::*;
pub use notify::*;
pub use retention::*;
pub use runs::*;
pub use schedules::*;
pub use secrets::*;
pub use summary::*;
pub use tasks::*;
pub use workers::*;
