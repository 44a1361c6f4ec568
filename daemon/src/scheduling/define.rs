//! From a validated spec to the stored row: a new schedule, a revision of an existing one
//! (the anchor rule), or a toggle of `enabled`. Shared by the schedules API and
//! declarations, so both arm a schedule the same way.

use serde_json::Value;
use studio_schedule::{ScheduleSpec, Trigger, Validated, Zone};

use super::{
    engine::{EngineError, arm},
    model::{ScheduleRow, ScheduleStats},
};

/// The stored row of a validated spec; `anchor_ms` starts a fresh `every` timeline.
fn row_of(v: &Validated, id: String, anchor_ms: i64, now: i64) -> ScheduleRow {
    let zone = v.armed.zone();
    let enabled = v.spec.enabled;
    ScheduleRow {
        id,
        name: v.spec.name.clone().unwrap_or_default(),
        spec: serde_json::to_string(&v.spec).unwrap_or_default(),
        enabled,
        trigger_kind: match v.spec.trigger {
            Trigger::Cron(_) => "cron",
            Trigger::Every(_) => "every",
            Trigger::At(_) => "at",
        }
        .into(),
        timezone: zone.map(|z| z.name.clone()),
        timezone_source: zone.map(|z| z.source.as_str().to_owned()),
        anchor_ms,
        next_fire_at_ms: if enabled {
            v.armed.next_after(now, anchor_ms)
        } else {
            None
        },
        last_fired_at_ms: None,
        cadence_ms: v.armed.cadence_ms(now, anchor_ms),
        max_runs: v.spec.policies.max_runs.and_then(|m| i64::try_from(m).ok()),
        runs_counted: 0,
        created_at_ms: now,
        updated_at_ms: now,
        revision: 1,
        managed_by: None,
        owner_key: None,
        source: None,
        stats: ScheduleStats::default(),
    }
}

/// A new schedule (made by hand: no owner), its timeline anchored now.
pub(crate) fn new_row(v: &Validated, id: String, now: i64) -> ScheduleRow {
    row_of(v, id, now, now)
}

/// `current` revised to the validated spec `v`, with its counters, ownership and id kept
/// and its revision bumped. A changed trigger starts a new timeline; otherwise the cursor
/// is recomputed on the old one.
pub(crate) fn revised_row(current: &ScheduleRow, v: &Validated, now: i64) -> ScheduleRow {
    let old_spec: Option<ScheduleSpec> = serde_json::from_str(&current.spec).ok();
    let trigger_changed = old_spec.as_ref().map(|s| &s.trigger) != Some(&v.spec.trigger);
    let anchor = if trigger_changed {
        now
    } else {
        current.anchor_ms
    };
    let mut row = row_of(v, current.id.clone(), anchor, now);
    row.last_fired_at_ms = current.last_fired_at_ms;
    row.runs_counted = current.runs_counted;
    row.created_at_ms = current.created_at_ms;
    row.revision = current.revision + 1;
    row.managed_by.clone_from(&current.managed_by);
    row.owner_key.clone_from(&current.owner_key);
    row.source.clone_from(&current.source);
    row.stats.clone_from(&current.stats);
    if !trigger_changed && current.enabled && row.enabled && current.next_fire_at_ms.is_none() {
        // Disarmed (an `at` that fired, max_runs reached) stays disarmed unless re-triggered.
        row.next_fire_at_ms = None;
    }
    row
}

/// `current` enabled or disabled: `enabled` is written into the authored spec too (absent
/// means true), and enabling re-arms on the existing timeline.
pub(crate) fn toggled_row(
    current: &ScheduleRow,
    enabled: bool,
    default_zone: &Zone,
    now: i64,
) -> Result<ScheduleRow, EngineError> {
    let mut spec: Value =
        serde_json::from_str(&current.spec).map_err(|e| EngineError::BadSpec(e.to_string()))?;
    if let Some(obj) = spec.as_object_mut() {
        if enabled {
            obj.remove("enabled");
        } else {
            obj.insert("enabled".into(), Value::Bool(false));
        }
    }
    let mut row = current.clone();
    row.spec = spec.to_string();
    row.enabled = enabled;
    row.next_fire_at_ms = if enabled {
        arm(current, default_zone)?
            .1
            .next_after(now, current.anchor_ms)
    } else {
        None
    };
    row.updated_at_ms = now;
    row.revision = current.revision + 1;
    Ok(row)
}
