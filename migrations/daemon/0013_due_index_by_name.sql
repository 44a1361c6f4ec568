-- The overview's "up next" reads the soonest fires, ties by name, from schedules_due
-- alone: with the name in the index no fire is sorted, however many schedules share an
-- instant (a yearly cron at midnight, say). The scheduler's due lookups use it as before.
DROP INDEX schedules_due;
CREATE INDEX schedules_due ON schedules (next_fire_at_ms, name) WHERE enabled = 1;
