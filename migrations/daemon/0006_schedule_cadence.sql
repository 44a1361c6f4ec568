-- Each schedule's cadence, for "overdue" health: the tightest gap between consecutive
-- fires of its trigger (an `every` period; for a cron, over its next eight fires; NULL
-- for a one-shot). Derived from the trigger whenever the row is written, so health is
-- one SQL expression over the row (docs/SCHEDULER.md, "Health"). Rows written before
-- this column existed are filled by studiod at start, from their stored spec.

ALTER TABLE schedules ADD COLUMN cadence_ms INTEGER;
