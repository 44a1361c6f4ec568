//! What the CLI and `studio up` read from their environment, read here and nowhere else.

use std::time::Duration;

/// `STUDIO_TOKEN`, trimmed; `None` when unset or blank.
pub(crate) fn token() -> Option<String> {
    std::env::var("STUDIO_TOKEN")
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// Whether `STUDIO_TOKEN` is set at all (`studio up` keeps it from the app).
pub(crate) fn token_is_set() -> bool {
    std::env::var_os("STUDIO_TOKEN").is_some()
}

/// `STUDIO_SCHEDULER_TZ`: the zone of cron schedules that name none.
pub(crate) fn scheduler_zone() -> Option<String> {
    std::env::var("STUDIO_SCHEDULER_TZ").ok()
}

/// Whether `NO_COLOR` asks for no colour (any non-empty value, per no-color.org).
pub(crate) fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// studiod's wait for the previous one's lock, when `STUDIO_DAEMON_LOCK_WAIT_MS` is valid.
pub(crate) fn daemon_lock_wait() -> Option<Duration> {
    std::env::var(studio_contract::home::DAEMON_LOCK_WAIT_ENV)
        .ok()
        .and_then(|v| studio_contract::home::parse_lock_wait(&v))
}
