//! The one schedule spec, everywhere: the API, declaration files and export all use
//! these types. This crate validates a spec (every problem at once, each naming its field
//! path), does the time arithmetic of its trigger and says the trigger in words. It reads
//! no environment and no clock of its own: callers pass the default zone and "now".

pub mod declaration;
pub mod duration;
pub mod load;
pub mod notify;
pub mod spec;
pub mod task;
pub mod trigger;
pub mod validate;
pub mod words;
pub mod zone;

pub use load::{
    Diagnostic, Format, LoadOptions, Loaded, Severity, load_all, load_file, parse_str, render_yaml,
};
pub use notify::{NotifyOn, NotifyRule};
pub use spec::{
    Action, ApprovalPolicy, CronTrigger, FollowUp, MissedFire, OnDaemonLoss, Overlap, Policies,
    RateLimit, ScheduleSpec, Target, Trigger,
};
pub use task::{Backoff, Concurrency, RetryOn, RetryPolicy, TaskSpec, validate_task};
pub use trigger::Armed;
pub use validate::{
    Context, FieldError, MAX_SECRETS, Validated, is_secret_name, parse_json, parse_json_as,
    validate,
};
pub use zone::{Zone, ZoneSource};
