-- A run keeps the name its schedule had when the run was created (a deleted or renamed
-- schedule does not take it away), and the one line that says why it failed, so lists
-- and the attention queue can show both without reading log tails.
ALTER TABLE runs ADD COLUMN schedule_name TEXT;
ALTER TABLE runs ADD COLUMN error_line TEXT;
-- When a running job's deadline ends it (set at dispatch), for the run page's countdown.
ALTER TABLE runs ADD COLUMN deadline_at_ms INTEGER;

UPDATE runs
SET schedule_name = (SELECT s.name FROM schedules s WHERE s.id = runs.schedule_id)
WHERE schedule_id IS NOT NULL;
