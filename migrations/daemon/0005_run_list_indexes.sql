-- A run list filtered by schedule or by status walks an index in its own order
-- (newest first, the id breaking ties, as the cursor does), so a page costs the same
-- whether the table holds ten runs or a million, and a rare status is found at once
-- instead of by scanning every run.

DROP INDEX runs_by_schedule;
CREATE INDEX runs_by_schedule ON runs (schedule_id, created_at_ms DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status, created_at_ms DESC, id DESC);
