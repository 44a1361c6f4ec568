-- A schedule's history strip (its ten newest runs: id, status, error line) is read from
-- the index alone: runs_by_schedule carries the two columns the strip shows beyond its
-- keys, so listing fifty schedules touches no run row.
DROP INDEX runs_by_schedule;
CREATE INDEX runs_by_schedule ON runs (schedule_id, created_at_ms DESC, id DESC, status, error_line);
