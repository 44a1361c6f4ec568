-- Who the run's job leader was: its start time (clock ticks after boot) and the boot's
-- id beside `pid`. Recovery signals a recorded process group only when all three still
-- match, never a process that merely reuses the pid.
ALTER TABLE runs ADD COLUMN pid_start_ticks INTEGER;
ALTER TABLE runs ADD COLUMN boot_id TEXT;
