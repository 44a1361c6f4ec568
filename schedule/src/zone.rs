//! Which time zone a schedule's cron runs in: the schedule's own IANA zone, else the
//! configured default (`STUDIO_SCHEDULER_TZ`, read by the caller), else the host's, else
//! UTC. The zone used and where it came from are stored with the schedule.

use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZoneSource {
    Schedule,
    Configured,
    Host,
    Utc,
}

impl ZoneSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Schedule => "schedule",
            Self::Configured => "configured",
            Self::Host => "host",
            Self::Utc => "utc",
        }
    }
}

/// A resolved zone: its IANA name, its rules and its source.
#[derive(Debug, Clone)]
pub struct Zone {
    pub name: String,
    pub tz: TimeZone,
    pub source: ZoneSource,
}

impl Zone {
    /// Looks up an IANA name (`Europe/Berlin`, `UTC`).
    pub fn named(name: &str, source: ZoneSource) -> Result<Self, String> {
        let tz = TimeZone::get(name).map_err(|_| {
            format!("unknown time zone {name:?} (use an IANA name like Europe/Berlin)")
        })?;
        Ok(Self {
            name: name.to_owned(),
            tz,
            source,
        })
    }

    pub fn utc() -> Self {
        Self {
            name: "UTC".into(),
            tz: TimeZone::UTC,
            source: ZoneSource::Utc,
        }
    }

    /// The default for schedules that name no zone: `configured` (the value of
    /// `STUDIO_SCHEDULER_TZ`) if set, else the host's named zone, else UTC.
    pub fn default_for(configured: Option<&str>) -> Result<Self, String> {
        if let Some(name) = configured.map(str::trim).filter(|n| !n.is_empty()) {
            return Self::named(name, ZoneSource::Configured)
                .map_err(|e| format!("STUDIO_SCHEDULER_TZ: {e}"));
        }
        let host = TimeZone::system();
        Ok(match host.iana_name() {
            Some(name) if name != "UTC" => Self {
                name: name.to_owned(),
                tz: host.clone(),
                source: ZoneSource::Host,
            },
            _ => Self::utc(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_names_and_refuses_unknown_ones() {
        assert_eq!(
            Zone::named("Europe/Berlin", ZoneSource::Schedule)
                .expect("known")
                .name,
            "Europe/Berlin"
        );
        assert!(Zone::named("Mars/Olympus", ZoneSource::Schedule).is_err());
        let z = Zone::default_for(Some("America/New_York")).expect("configured");
        assert_eq!(
            (z.name.as_str(), z.source),
            ("America/New_York", ZoneSource::Configured)
        );
        assert!(Zone::default_for(Some("Nope/Nope")).is_err());
        assert!(Zone::default_for(None).is_ok());
    }
}
