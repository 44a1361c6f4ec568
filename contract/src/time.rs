//! Wall-clock helpers: integer milliseconds since the Unix epoch (UTC), shown as RFC 3339.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// RFC 3339 in UTC with millisecond precision, e.g. `2026-11-29T19:10:42.123Z`.
pub fn rfc3339(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(ts) => format!("{ts:.3}"),
        Err(_) => String::from("invalid-time"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_milliseconds_as_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_000_000_123), "2026-11-18T11:06:40.123Z");
    }
}
