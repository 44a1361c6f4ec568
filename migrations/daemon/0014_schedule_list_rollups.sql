-- What the schedules list and the overview read of every schedule, kept small.
--
-- Health (disabled, never fired, failing, overdue, …) is computed from these columns
-- alone: an index holding them in name order is scanned for the overview's counts and
-- for a health filter, instead of the table, whose rows carry each spec. A listed row
-- is read from the table only once it matched.
CREATE INDEX schedules_health ON schedules (name, enabled, has_runs, last_fired_at_ms,
    last_outcome, last_outcome_at_ms, next_fire_at_ms, cadence_ms);

-- Each schedule's history strip, kept with it: its ten newest runs as a JSON array of
-- [id, status, created_at_ms, error_line]. A run's creation, a change of its status or
-- error line, and the deletion of a run the strip shows recompute it from
-- runs_by_schedule, so a list of fifty schedules reads fifty rows and no run. (The
-- order of an aggregate's input is SQLite's choice: readers sort the marks.)
ALTER TABLE schedules ADD COLUMN recent_runs TEXT NOT NULL DEFAULT '[]';

-- The one definition of a strip; asked for one schedule, SQLite computes that one.
CREATE VIEW schedule_strips AS
SELECT s.id AS schedule_id,
       (SELECT json_group_array(json_array(id, status, created_at_ms, error_line))
        FROM (SELECT id, status, created_at_ms, error_line FROM runs
              WHERE runs.schedule_id = s.id
              ORDER BY created_at_ms DESC, id DESC LIMIT 10)) AS marks
FROM schedules AS s;

UPDATE schedules SET recent_runs =
    (SELECT marks FROM schedule_strips WHERE schedule_id = schedules.id);

CREATE TRIGGER runs_strip_insert AFTER INSERT ON runs
WHEN new.schedule_id IS NOT NULL
BEGIN
    UPDATE schedules SET recent_runs =
        (SELECT marks FROM schedule_strips WHERE schedule_id = new.schedule_id)
    WHERE id = new.schedule_id;
END;

CREATE TRIGGER runs_strip_update AFTER UPDATE OF status, error_line ON runs
WHEN new.schedule_id IS NOT NULL
BEGIN
    UPDATE schedules SET recent_runs =
        (SELECT marks FROM schedule_strips WHERE schedule_id = new.schedule_id)
    WHERE id = new.schedule_id;
END;

-- Pruning deletes old runs by the thousand: only one the strip shows recomputes it.
CREATE TRIGGER runs_strip_delete AFTER DELETE ON runs
WHEN old.schedule_id IS NOT NULL
    AND instr((SELECT recent_runs FROM schedules WHERE id = old.schedule_id), old.id) > 0
BEGIN
    UPDATE schedules SET recent_runs =
        (SELECT marks FROM schedule_strips WHERE schedule_id = old.schedule_id)
    WHERE id = old.schedule_id;
END;
