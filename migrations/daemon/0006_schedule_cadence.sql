-- Each schedule's cadence, for "overdue" health: the tightest gap between consecutive
-- fires of its trigger (an `every` period; for a cron, over its next eight fires; NULL
-- for a one-shot). Derived from the trigger whenever the row is written, so health is
-- one SQL expression over the row (docs/SCHEDULER.md, "Health"). Rows written before
-- this column existed are filled by studiod at start, from their stored spec.

ALTER TABLE schedules ADD COLUMN cadence_ms INTEGER;

-- The rows still to fill, found at each start without reading the whole table.
CREATE INDEX schedules_without_cadence ON schedules (id)
    WHERE cadence_ms IS NULL AND trigger_kind <> 'at';
